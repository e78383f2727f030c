"""A Ray cluster on this machine: a head node and worker nodes on loopback (`ssi cluster local`, tests).

Each node is a real raylet with its own object store, started by Ray's own `ray.cluster_utils.Cluster`
(what Ray's test suite uses for multi-node clusters on one host): tasks and replicas are scheduled
across nodes exactly as on a real cluster, only the network is loopback.
"""

from __future__ import annotations

from typing import Any


class LocalCluster:
    def __init__(
        self, workers: int = 2, cpus_per_node: int = 1, object_store_mb: int = 256, log_monitor: bool = True
    ) -> None:
        """`log_monitor=False`: no process tails the workers' log files for the drivers (one that does not print them
        saves its CPU: the tests' shared cluster)."""
        from cluster.connect import widen_serve_start_bounds

        widen_serve_start_bounds()
        from ray.cluster_utils import Cluster

        node = {"num_cpus": cpus_per_node, "object_store_memory": object_store_mb * 1024 * 1024}
        head = {**node, "include_dashboard": False, "include_log_monitor": log_monitor}
        self.cluster: Any = Cluster(initialize_head=True, head_node_args=head)
        self.node_args = node
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

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()
