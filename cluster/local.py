"""A Ray cluster on this machine: a head node and worker nodes on loopback (`ssi cluster local`, tests).

Each node is a real raylet with its own object store, started by Ray's own `ray.cluster_utils.Cluster`
(what Ray's test suite uses for multi-node clusters on one host): tasks and replicas are scheduled
across nodes exactly as on a real cluster, only the network is loopback.

With `redis_dir`, the head's control store (Ray's GCS) keeps its tables in a Redis this cluster starts
(cluster.redis_server, persistence on, its files in that folder): Ray's GCS fault tolerance. A GCS killed and
started again (`restart_gcs`) reads them back; the actors, the Serve proxies and replicas on every node live on
meanwhile, and the raylets wait for it (up to `RAY_gcs_rpc_server_reconnect_timeout_s`, GCS_RECONNECT here). The
whole head can go too (`kill_head`: every process of it, as a lost machine) and a new head start in its place
(`start_head`: on the GCS's address and the same Redis, as a supervisor or KubeRay starts a head pod again): the
actors on the worker nodes live on, those that were on the head are started again there.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GCS_RECONNECT_SECONDS = "300"  # how long a raylet waits for a GCS that is away before it exits (Ray's default: 60)


class LocalCluster:
    def __init__(
        self,
        workers: int = 2,
        cpus_per_node: int = 1,
        object_store_mb: int = 256,
        log_monitor: bool = True,
        redis_dir: Path | None = None,
    ) -> None:
        """`log_monitor=False`: no process tails the workers' log files for the drivers (one that does not print them
        saves its CPU: the tests' shared cluster). `redis_dir`: GCS fault tolerance, its Redis's files there."""
        from cluster.connect import widen_serve_start_bounds

        widen_serve_start_bounds()
        from ray.cluster_utils import Cluster

        self.redis: Any = None
        self._environment: dict[str, str | None] = {}
        self._supervising = threading.Event()  # set: no GCS supervisor (supervise_gcs) starts the GCS again
        if redis_dir is not None:
            from cluster.redis_server import RedisServer

            self.redis = RedisServer(redis_dir)
            # Read by the head as it starts (the GCS's store), and by every raylet started after it (the wait).
            self._set_environment(
                {
                    "RAY_REDIS_ADDRESS": self.redis.address,
                    "RAY_external_storage_namespace": f"ssi-{uuid.uuid4().hex[:8]}",
                    "RAY_gcs_rpc_server_reconnect_timeout_s": os.environ.get(
                        "RAY_gcs_rpc_server_reconnect_timeout_s", GCS_RECONNECT_SECONDS
                    ),
                }
            )
        node = {"num_cpus": cpus_per_node, "object_store_memory": object_store_mb * 1024 * 1024}
        head = {**node, "include_dashboard": False, "include_log_monitor": log_monitor}
        self._head_down = threading.Event()  # set between kill_head and start_head: no GCS to supervise
        try:
            self.cluster: Any = Cluster(initialize_head=True, head_node_args=head)
        except BaseException:
            self._stop_redis()
            raise
        self.node_args = node
        self.head_args = head
        # Worker i is labelled ssi.node=n<i>: copy i of every replicated shard runs there (cluster.replication).
        self.workers: list[Any] = [self.add_worker(i) for i in range(workers)]
        self.address: str = self.cluster.address

    def add_worker(self, index: int) -> Any:
        """Start worker node `index` (again, after `kill_worker`: a node that comes back under its label)."""
        from cluster.replication.ray_replicas import NODE_LABEL, node_label

        return self.cluster.add_node(**self.node_args, labels={NODE_LABEL: node_label(index)})

    def kill_worker(self, index: int) -> None:
        """Kill every process of worker node `index` (its raylet, object store and workers), as a lost machine: the
        raylet's children (the node's workers) are killed too, not left to notice that their raylet is gone."""
        import psutil

        node = self.workers[index]
        children: list[psutil.Process] = []
        for info in node.all_processes.get("raylet", []):
            try:
                children += psutil.Process(info.process.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        self.cluster.remove_node(node, allow_graceful=False)
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass

    def connect(self) -> Any:
        """Join the cluster from this process (the driver); returns the ray module."""
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, logging_level="warning", log_to_driver=False)
        return ray

    def nodes(self) -> int:
        import ray

        return sum(1 for node in ray.nodes() if node.get("Alive"))

    @property
    def map_store(self) -> str | None:
        """Where the coordinator keeps the shard map on this cluster: its Redis, where it has one."""
        return None if self.redis is None else self.redis.url

    def gcs_pid(self) -> int:
        return int(self.cluster.head_node.all_processes["gcs_server"][0].process.pid)

    def kill_gcs(self) -> None:
        """kill -9 of the head's GCS process alone (its raylet, the workers and actors on every node live on)."""
        self.cluster.head_node.kill_gcs_server()

    def gcs_alive(self) -> bool:
        processes = self.cluster.head_node.all_processes.get("gcs_server")
        return bool(processes) and processes[0].process.poll() is None

    def restart_gcs(self) -> None:
        """Start the GCS again, on the same port and the same Redis: it reads its tables back. One that exited by
        itself (it does when its Redis goes away) is forgotten first, as `kill_gcs` forgets the one it kills."""
        head = self.cluster.head_node
        if head.all_processes.get("gcs_server"):
            head.all_processes.pop("gcs_server")
            head._gcs_address = None
            head._gcs_client = None
        head.start_gcs_server()

    def supervise_gcs(self, every: float = 1.0) -> threading.Event:
        """Start the GCS again whenever it has exited (what systemd or KubeRay does for a real head), in a thread,
        until the returned event is set (`shutdown` sets it); a GCS that cannot start yet (Redis away) is tried
        again."""
        stop = self._supervising

        def watch() -> None:
            while not stop.wait(every):
                if self._head_down.is_set() or self.gcs_alive():
                    continue
                try:
                    self.restart_gcs()
                except Exception as exc:  # noqa: BLE001 — Redis not back yet: the next round tries again
                    log.warning("the GCS could not start again: %r", exc)

        threading.Thread(target=watch, name="gcs-supervisor", daemon=True).start()
        return stop

    def kill_head(self) -> None:
        """kill -9 of every process of the head node (`head_processes`), as a machine that is lost; the Redis, a
        machine of its own in a deployment, stays. This process leaves the cluster first: its driver is attached to
        the head's raylet and would die with it (call `connect` again after `start_head`)."""
        import psutil
        import ray

        ray.shutdown()
        self._head_down.set()
        processes = self.head_processes()
        for process in processes:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(processes, timeout=10)

    def start_head(self) -> None:
        """A new head node in place of the one `kill_head` killed, on the same GCS address and the same Redis: its GCS
        reads the cluster's tables back, the worker nodes' raylets (waiting for it) reconnect, and the detached actors
        that lived on the old head (the coordinator, Serve's controller) are started again on this one."""
        old = self.cluster.head_node
        host, _, port = old.gcs_address.rpartition(":")
        self.cluster.head_node = None  # not remove_node: that would tidy away what the new head must read back
        self.cluster.add_node(**self.head_args, node_ip_address=host, gcs_server_port=int(port))
        self._head_down.clear()

    def head_processes(self) -> list[Any]:
        """Every process of the head node (its GCS, raylet, and the raylet's workers: the coordinator, Serve's
        controller and proxy), as psutil processes; not this process, the driver."""
        import psutil

        found: list[psutil.Process] = []
        for infos in self.cluster.head_node.all_processes.values():
            for info in infos:
                try:
                    process = psutil.Process(info.process.pid)
                    found += [process, *process.children(recursive=True)]
                except psutil.NoSuchProcess:
                    continue
        return found

    def _set_environment(self, values: dict[str, str]) -> None:
        for name, value in values.items():
            self._environment.setdefault(name, os.environ.get(name))
            os.environ[name] = value

    def _stop_redis(self) -> None:
        for name, value in self._environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._environment.clear()
        if self.redis is not None:
            self.redis.stop()

    def shutdown(self) -> None:
        import ray

        self._supervising.set()  # the GCS stopped below is not started again
        try:
            ray.shutdown()
            self.cluster.shutdown()
        finally:
            self._stop_redis()
