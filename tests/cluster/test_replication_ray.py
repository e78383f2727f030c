"""Replicated shards on a local Ray cluster of three labelled worker nodes, each with its own folder as its disk
(cluster.replication.ray_replicas): a killed primary, a lost node whose folder is deleted before it comes back, and a
frozen primary, all under writes and searches through the router's HTTP API."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

pytest.importorskip("ray", reason="needs the cluster extra: pip install -e .[cluster]")

from cluster.index_job import build_index  # noqa: E402
from cluster.sharding import shard_of  # noqa: E402
from tests.service.service_testing import TLS, needle_of, wait_ready  # noqa: E402

SHARDS = 2
COPIES = 3


@pytest.fixture(scope="module")
def cluster(world: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The replicated service on the Ray group's shared cluster (tests/cluster/conftest.py: three labelled worker
    nodes, one a copy); the tests that kill a node start it again, so the cluster is whole when the module ends."""
    from cluster import deploy
    from service.settings import Settings
    from tests.cluster.conftest import WORKER_NODES, shared_ray

    assert WORKER_NODES == COPIES
    root = tmp_path_factory.mktemp("replicated-ray")
    index = root / "index"
    build_index(world["corpus"], world["bundle"], index, SHARDS, batch_size=100)
    ray = shared_ray()
    options = deploy.ClusterOptions(
        shard_cpus=0,
        replicas=COPIES,
        node_dir=root / "nodes",
        retry_seconds=10.0,
        shard_timeout_seconds=8.0,
        router_on_head=True,
        map_store=ray.local.map_store,  # the Redis of the cluster's GCS fault tolerance
    )
    settings = Settings(host="127.0.0.1", port=ray.port, insecure_writes=True)
    deploy.start(index, settings, options, address=ray.address)
    try:
        wait_ready(ray.url, timeout=120)
        yield {"url": ray.url, "local": ray.local, "nodes": root / "nodes"}
    finally:
        deploy.stop()


def coordinator() -> Any:
    from cluster import deploy
    from cluster.replication.ray_replicas import coordinator_of

    return coordinator_of(deploy.GROUPS[-1])


def copy_handle(name: str) -> Any:
    import ray

    from cluster import deploy
    from cluster.replication.ray_replicas import NAMESPACE, actor_name

    return ray.get_actor(actor_name(deploy.GROUPS[-1], name), namespace=NAMESPACE)


def views() -> list[Any]:
    import ray

    return list(ray.get(coordinator().views.remote()))


def wait_all_in_sync(timeout: float = 90.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = views()
        if all(len(v.in_sync) == COPIES for v in current):
            return current
        time.sleep(0.5)
    raise AssertionError(f"copies not back in sync after {timeout:g}s: {views()}")


def wait_new_primary(shard: int, old: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = views()[shard]
        if view.primary != old:
            return view
        time.sleep(0.3)
    raise AssertionError(f"shard {shard}: {old} still primary after {timeout:g}s")


def fingerprints() -> dict[int, set[tuple[int, int, str]]]:
    import ray

    return {v.shard: {tuple(ray.get(copy_handle(n).fingerprint.remote())) for n in v.replicas} for v in views()}


class Traffic:
    """Two writers and one searcher through the router until stopped; every answer kept."""

    def __init__(self, url: str, texts: list[str], queries: list[str]) -> None:
        self.url, self.texts, self.queries = url, texts, queries
        self.stop = threading.Event()
        self.writes: dict[str, int] = {}
        self.refusals: Counter[str] = Counter()  # a write's non-200 answers, by message: what an assertion shows
        self.searches: Counter[int] = Counter()
        self.partial = 0
        self.threads = [threading.Thread(target=self._write, args=(w,), daemon=True) for w in range(2)]
        self.threads.append(threading.Thread(target=self._search, daemon=True))
        for thread in self.threads:
            thread.start()

    def _write(self, worker: int) -> None:
        with httpx.Client(base_url=self.url, timeout=30, verify=TLS) as client:
            n = 0
            while not self.stop.is_set():
                doc_id = f"w{worker}-{n}"
                body = {"title": doc_id, "text": self.texts[n % len(self.texts)]}
                try:
                    response = client.put(f"/documents/{quote(doc_id, safe='')}", json=body)
                    status = response.status_code
                    if status != 200:
                        self.refusals[f"{status}: {response.text[:160]}"] += 1
                except httpx.HTTPError as exc:
                    status = 0
                    self.refusals[f"0: {type(exc).__name__}"] += 1
                self.writes[doc_id] = status
                n += 1

    def _search(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30, verify=TLS) as client:
            n = 0
            while not self.stop.is_set():
                try:
                    response = client.post("/search", json={"query": self.queries[n % len(self.queries)], "k": 10})
                    self.searches[response.status_code] += 1
                    if response.status_code == 200 and len(response.json()["hits"]) != 10:
                        self.partial += 1
                except httpx.HTTPError:
                    self.searches[0] += 1
                n += 1

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def test_a_killed_primary_and_a_lost_node_lose_no_acknowledged_write(world: dict, cluster: dict) -> None:
    """Slow: three worker nodes, a primary's process killed and a whole node killed, its folder deleted and the
    node started again, under writes and searches; each waits for the coordinator's failover and catch-up."""
    import ray

    placed = {n: ray.get(copy_handle(n).node.remote()) for v in views() for n in v.replicas}
    assert placed == {n: f"n{n[-1]}" for n in placed}  # copy i of every shard on node n<i>: three nodes a shard
    docs = world["docs"]
    traffic = Traffic(
        cluster["url"], [f"{needle_of(d)} replicated" for d in docs[:20]], [needle_of(d) for d in docs[20:40]]
    )
    try:
        time.sleep(2)
        victim = views()[0].primary
        os.kill(int(ray.get(copy_handle(victim).pid.remote())), signal.SIGKILL)
        promoted = wait_new_primary(0, victim)
        assert promoted.term >= 2
        wait_all_in_sync()  # the killed copy was restarted by Ray on its node and caught up

        cluster["local"].kill_worker(2)  # every process of node n2
        time.sleep(4)
        shutil.rmtree(cluster["nodes"] / "n2")  # and its disk
        cluster["local"].workers[2] = cluster["local"].add_worker(2)
        wait_all_in_sync(timeout=120)
        time.sleep(2)
    finally:
        traffic.finish()
    acknowledged = [doc_id for doc_id, status in traffic.writes.items() if status == 200]
    assert len(acknowledged) > 20, Counter(traffic.writes.values())
    assert set(traffic.writes.values()) <= {0, 200, 503}, Counter(traffic.writes.values())
    assert set(traffic.searches) <= {200, 503} and traffic.partial == 0, traffic.searches
    with httpx.Client(base_url=cluster["url"], timeout=30, verify=TLS) as client:
        missing = [d for d in acknowledged if client.get(f"/documents/{quote(d, safe='')}").status_code != 200]
    assert missing == []
    prints = fingerprints()
    assert all(len(same) == 1 for same in prints.values()), prints  # every copy of a shard holds the same documents
    print(f"\nwrites {Counter(traffic.writes.values())}, searches {dict(traffic.searches)}")


def test_a_frozen_primary_acknowledges_no_write_after_its_replacement(world: dict, cluster: dict) -> None:
    """Slow: a primary's process stopped (SIGSTOP) past the failure timeout, replaced, then let go."""
    import ray

    wait_all_in_sync()
    shard = 1
    old = views()[shard].primary
    pid = int(ray.get(copy_handle(old).pid.remote()))
    doc_id = next(f"frozen-{i}" for i in range(1000) if shard_of(f"frozen-{i}", SHARDS) == shard)
    os.kill(pid, signal.SIGSTOP)
    try:
        with httpx.Client(base_url=cluster["url"], timeout=60, verify=TLS) as client:
            first = client.put(f"/documents/{doc_id}", json={"title": "t", "text": "sent while frozen"})
            assert first.status_code == 503, first.text  # the frozen primary never answered: not acknowledged
            wait_new_primary(shard, old)
            later = next(f"after-{i}" for i in range(1000) if shard_of(f"after-{i}", SHARDS) == shard)
            second = client.put(f"/documents/{later}", json={"title": "t", "text": "to the new primary"})
            assert second.status_code == 200, second.text
    finally:
        os.kill(pid, signal.SIGCONT)
    # the write queued to it while frozen runs now, under its old term: refused by the copies, not acknowledged
    late = ray.get(copy_handle(old).put.remote([{"id": f"{doc_id}-late", "title": "t", "text": "late"}]))
    assert late.status == 503
    wait_all_in_sync()
    with httpx.Client(base_url=cluster["url"], timeout=30, verify=TLS) as client:
        assert client.get(f"/documents/{doc_id}").status_code == 404
        assert client.get(f"/documents/{doc_id}-late").status_code == 404
        assert client.get(f"/documents/{later}").status_code == 200
    prints = fingerprints()
    assert all(len(same) == 1 for same in prints.values()), prints


def test_acknowledged_clicks_survive_a_lost_node_in_the_clusters_log(world: dict, cluster: dict, tmp_path) -> None:
    """Slow: clicks through the router, then a worker node killed; the log of the two nodes left is read back by
    `ssi train --clicks`'s reader, and the node started again."""
    from typer.testing import CliRunner

    from ssi_cli.main import build_app
    from training.clicks import read_click_log

    wait_all_in_sync()
    clicked: set[tuple[str, str]] = set()
    with httpx.Client(base_url=cluster["url"], timeout=30, verify=TLS) as client:
        for doc in world["docs"][60:80]:
            answer = client.post("/search", json={"query": needle_of(doc), "k": 5}).json()
            pick = answer["hits"][-1]["id"]
            click = client.post("/clicks", json={"impression": answer["impression"], "id": pick})
            assert click.status_code == 200, click.text
            clicked.add((answer["impression"], pick))
    cluster["local"].kill_worker(0)
    try:
        out = tmp_path / "cluster-events.sqlite"
        exported = CliRunner().invoke(build_app("cluster"), ["cluster", "events", "--out", str(out)])
        assert exported.exit_code == 0, exported.output
        assert "events-n1, events-n2; not answering: events-n0" in exported.output
        log = read_click_log(out)
        found = {(i.impression, i.ad_id) for i in log.impressions if i.clicked}
        assert clicked <= found, clicked - found
    finally:
        cluster["local"].workers[0] = cluster["local"].add_worker(0)
    wait_all_in_sync(timeout=120)


def test_a_killed_gcs_loses_no_acknowledged_write_and_the_map_outlives_the_coordinator(
    world: dict, cluster: dict
) -> None:
    """Slow: the head's GCS killed (kill -9) under writes and searches, started again on its Redis; then the
    coordinator's process killed, so that Ray starts it again and it reads the map back from Redis."""
    import ray

    local = cluster["local"]
    if local.redis is None:
        pytest.skip("needs Debian's redis-server and the redis client (the cluster extra) for GCS fault tolerance")
    wait_all_in_sync()
    handle = coordinator()  # resolved while the GCS is up: actor calls go to the actor directly
    before = ray.get(handle.describe.remote())
    docs = world["docs"]
    traffic = Traffic(cluster["url"], [f"{needle_of(d)} head" for d in docs[:20]], [needle_of(d) for d in docs[40:60]])
    try:
        time.sleep(1)
        local.kill_gcs()
        gone = time.monotonic()
        searched = traffic.searches.copy()
        written = Counter(traffic.writes.values())
        time.sleep(5)  # Serve's proxy, the router, the copies and the coordinator go on without the GCS
        # A write held up on the loaded machine (CI's 2 cores at their busiest) is given up to 15 s more to be
        # acknowledged, the GCS still away.
        deadline = time.monotonic() + 15
        while Counter(traffic.writes.values())[200] <= written[200] and time.monotonic() < deadline:
            time.sleep(0.25)
        during = traffic.searches - searched
        writes_during = Counter(traffic.writes.values()) - written
        local.restart_gcs()
        time.sleep(2)
        pid = ray.get(handle.pid.remote(), timeout=30)
        os.kill(pid, signal.SIGKILL)  # Ray restarts it (the GCS is back): a new epoch, the map read from Redis
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                after = ray.get(coordinator().describe.remote(), timeout=5)
                if after["epoch"] > before["epoch"] and after["rounds"] > 0:
                    break
            except Exception:  # noqa: BLE001 — being restarted
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("the coordinator did not come back")
        resumed = Counter(traffic.writes.values())
        time.sleep(3)
        resumed = Counter(traffic.writes.values()) - resumed
    finally:
        traffic.finish()
    print(f"\nGCS down {time.monotonic() - gone:.1f}s: searches {dict(during)}, writes {dict(writes_during)}")
    print("map before:", [(v["term"], v["version"], v["primary"]) for v in before["shards"]])
    print("map after: ", [(v["term"], v["version"], v["primary"]) for v in after["shards"]])
    assert during[200] > 0 and set(during) == {200}, during  # every search answered while the GCS was away
    # Writes meanwhile: answered 200 or 503 with its reason, nothing else. On a quiet machine they are acknowledged
    # (the fault benchmark: 269 of 269 while the GCS was away), but on CI's loaded 2 cores two clean-clone runs of four
    # acknowledged none (the router's call to a primary raised RayActorError, or took over 8 s; not traced):
    # docs/operate/replication.md says so. Nothing acknowledged is lost either way (below).
    assert set(writes_during) <= {200, 503}, (writes_during, traffic.refusals)
    assert resumed[200] > 0, resumed  # and after the coordinator's restart, under its new epoch
    # The map outlived it: read back from Redis, not begun afresh. A fresh map starts every shard at version 0 with no
    # start counted, and the new coordinator's reconciliation would then lift a failed-over shard's term past what its
    # copies have seen; read back, every shard's record goes on from where it was. A primary that did not answer the
    # new coordinator's first rounds in time (CI's loaded 2 cores, the GCS just back; c23 of 2026-12-03) is replaced
    # under a new term, as designed: its record still goes on, and no acknowledged write is lost (below).
    for old, new in zip(before["shards"], after["shards"], strict=True):
        assert new["replicas"] == old["replicas"], (old, new)
        assert new["version"] >= old["version"] and new["term"] >= old["term"], (old, new)
        assert all(new["starts"].get(name, 0) >= count for name, count in old["starts"].items()), (old, new)
        assert new["term"] > old["term"] or new["primary"] == old["primary"], (old, new)
        assert new["primary"] in new["in_sync"], new
    acknowledged = [doc_id for doc_id, status in traffic.writes.items() if status == 200]
    with httpx.Client(base_url=cluster["url"], timeout=30, verify=TLS) as client:
        missing = [d for d in acknowledged if client.get(f"/documents/{quote(d, safe='')}").status_code != 200]
    assert missing == []
    wait_all_in_sync()
    prints = fingerprints()
    assert all(len(same) == 1 for same in prints.values()), prints
