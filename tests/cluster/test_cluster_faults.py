"""A shard process killed (SIGKILL) on a local Ray cluster while writes and searches run through the router.

What the cluster promises (docs/cluster-faults.md): every answer is a success or a 503 that names the missing shard,
never a partial ranking, a 500 or a hang; every write acknowledged with a 2xx is there once Ray Serve has restarted
the shard (its store on disk is the truth); a shard that cannot come back (its store missing) is a 503 naming it
within the shard timeout, never an empty shard; and with two replicas per shard, searches keep answering while one
replica is down. One local index build for the module, served on the cluster the Serve modules share
(tests/cluster/conftest.py); the figures in the docs are the ones printed (`pytest -s`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest

pytest.importorskip("ray", reason="needs the cluster extra: pip install -e .[cluster]")

from cluster.index_job import build_index  # noqa: E402
from cluster.sharding import shard_of  # noqa: E402
from tests.service.service_testing import TLS, needle_of, probe_queries, wait_ready  # noqa: E402

SHARDS = 2  # each shard a Serve replica (a process, two with replicas=2); the victim is shard 1
VICTIM = 1
# The router's bounds, short so that the test sees the 503s of a restart (Serve takes ~3 s to replace a replica).
RETRY_SECONDS = 2.0
SHARD_TIMEOUT = 3.0  # well above a search on a loaded machine (< 1 s), below a restart
ANSWER_BOUND = SHARD_TIMEOUT + 5.0  # no request may take longer than this (a hang is a failure)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request of the workload: when it was sent (seconds after the start), what came back, how long it took."""

    kind: str  # "search" or "write"
    sent: float
    took: float
    status: int  # 0: no HTTP answer (timeout, connection error)
    detail: str = ""
    doc_id: str = ""


@dataclass
class Workload:
    """Searchers and writers in threads, each with its own HTTP client, until `stop` is set."""

    url: str
    queries: list[str]
    texts: list[str]
    write: bool
    started: float = field(default_factory=time.monotonic)
    stop: threading.Event = field(default_factory=threading.Event)
    outcomes: list[Outcome] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, searchers: int = 2, writers: int = 2) -> Workload:
        for i in range(searchers):
            self.threads.append(threading.Thread(target=self._loop, args=(self._search, i), daemon=True))
        for i in range(writers if self.write else 0):
            self.threads.append(threading.Thread(target=self._loop, args=(self._put, i), daemon=True))
        for thread in self.threads:
            thread.start()
        return self

    def finish(self) -> list[Outcome]:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=ANSWER_BOUND + 5)
        assert not any(thread.is_alive() for thread in self.threads), "a request never came back"
        return sorted(self.outcomes, key=lambda o: o.sent)

    def now(self) -> float:
        return time.monotonic() - self.started

    def _loop(self, step: Callable[[httpx.Client, int, int], Outcome], worker: int) -> None:
        with httpx.Client(base_url=self.url, timeout=ANSWER_BOUND, verify=TLS) as client:
            n = 0
            while not self.stop.is_set():
                self.outcomes.append(step(client, worker, n))
                n += 1

    def _send(self, kind: str, doc_id: str, request: Callable[[], httpx.Response]) -> Outcome:
        sent = self.now()
        try:
            response = request()
        except httpx.HTTPError as exc:
            return Outcome(kind, sent, self.now() - sent, 0, repr(exc), doc_id)
        detail = "" if response.status_code < 300 else str(response.json().get("detail", response.text))
        return Outcome(kind, sent, self.now() - sent, response.status_code, detail, doc_id)

    def _search(self, client: httpx.Client, worker: int, n: int) -> Outcome:
        query = self.queries[(worker + n) % len(self.queries)]
        return self._send("search", "", lambda: client.post("/search", json={"query": query, "k": 10}))

    def _put(self, client: httpx.Client, worker: int, n: int) -> Outcome:
        doc_id = f"fault-{worker}-{n}"
        body = {"title": title_of(doc_id), "text": self.texts[n % len(self.texts)]}
        return self._send("write", doc_id, lambda: client.put(f"/documents/{doc_id}", json=body))


def title_of(doc_id: str) -> str:
    return f"written as {doc_id}"


def shard_replicas(client: httpx.Client, shard: int) -> dict:
    """The replica of `shard` that answered GET /cluster this time: its pid, actor name and status."""
    return next(s for s in client.get("/cluster").json()["shards"] if s.get("shard") == shard)


def replica_pids(client: httpx.Client, shard: int, want: int, timeout: float = 30.0) -> set[int]:
    """The pids of `want` distinct replicas of `shard`, collected from GET /cluster (Serve spreads the calls)."""
    pids: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(pids) < want and time.monotonic() < deadline:
        pid = shard_replicas(client, shard).get("pid")
        if pid is not None:
            pids.add(pid)
    assert len(pids) == want, f"saw replicas {pids} of shard {shard}"
    return pids


def wait_for_new_replica(client: httpx.Client, shard: int, dead: int, timeout: float = 60.0) -> float:
    """Seconds until a replica other than `dead` answers for `shard` (Serve restarts a killed one)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        info = shard_replicas(client, shard)
        if info.get("status") == "ready" and info.get("pid") not in (None, dead):
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"shard {shard} did not come back within {timeout:g}s")


def deployed(cluster: dict, replicas: int) -> str:
    """The Serve application over the module's index with `replicas` per shard (deployed or replaced once
    per layout); its URL once ready."""
    from cluster.deploy import ClusterOptions, start
    from service.settings import Settings

    url = f"http://127.0.0.1:{cluster['port']}"
    if cluster.get("replicas") != replicas:
        settings = Settings(host="127.0.0.1", port=cluster["port"], insecure_writes=True)
        options = ClusterOptions(
            replicas=replicas, shard_cpus=0, retry_seconds=RETRY_SECONDS, shard_timeout_seconds=SHARD_TIMEOUT
        )
        start(cluster["index"], settings, options, address="auto")
        cluster["replicas"] = replicas
    wait_ready(url, timeout=60)
    return url


@pytest.fixture(scope="module")
def cluster(world: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from cluster import deploy
    from tests.cluster.conftest import shared_ray

    index = tmp_path_factory.mktemp("fault-index") / "index"
    build_index(world["corpus"], world["bundle"], index, SHARDS, batch_size=100)
    ray = shared_ray()  # labelled worker nodes: replicas=2 puts a copy on n0 and n1
    try:
        yield {"index": index, "port": ray.port, "local": ray.local}
    finally:
        deploy.stop()


def report(title: str, outcomes: list[Outcome], killed_at: float) -> dict[str, object]:
    """The figures of one run, printed for docs/cluster-faults.md: times are seconds after the kill."""
    refused = [o for o in outcomes if o.status == 503]
    searches = [o for o in outcomes if o.kind == "search"]
    answered = sorted(o.sent + o.took for o in searches if o.status == 200)
    figures: dict[str, object] = {
        # how long no search was answered with a ranking: the outage as a client saw it
        "longest_gap_between_200_searches_s": round(float(np.diff(answered).max(initial=0.0)), 2),
        "answers": dict(sorted(Counter(f"{o.kind} {o.status}" for o in outcomes).items())),
        "longest_search_s": round(max((o.took for o in searches), default=0.0), 2),
        "503s_answered_from_s": round(min(o.sent + o.took for o in refused) - killed_at, 2) if refused else None,
        "503s_answered_until_s": round(max(o.sent + o.took for o in refused) - killed_at, 2) if refused else None,
    }
    print(f"\n{title}: {figures}")
    return figures


def test_a_killed_shard_answers_503s_naming_it_and_loses_no_acknowledged_write(world: dict, cluster: dict) -> None:
    """SIGKILL of shard 1's only replica during writes and searches; Serve restarts it from its folder.

    Slow: waits, under a live workload, for Ray Serve to replace a killed shard replica."""
    url = deployed(cluster, replicas=1)
    docs = world["docs"]
    texts = [f"{needle_of(docs[i])} {needle_of(docs[i + 1])}" for i in range(0, 40, 2)]
    with httpx.Client(base_url=url, timeout=30, verify=TLS) as client:
        work = Workload(url, probe_queries(docs, 4, seed=5), texts, write=True).start()
        time.sleep(1.5)
        victim = shard_replicas(client, VICTIM)
        killed_at = work.now()
        os.kill(victim["pid"], signal.SIGKILL)
        restart_s = wait_for_new_replica(client, VICTIM, victim["pid"])
        time.sleep(1.0)  # some traffic after the restart
        outcomes = work.finish()
        report("one replica per shard, shard 1 killed", outcomes, killed_at)

        assert not [o for o in outcomes if o.status not in (200, 503)], "only successes and 503s"
        for o in outcomes:
            if o.status == 503:
                assert f"shard {VICTIM} did not answer" in o.detail, o
                assert "no partial ranking" in o.detail or o.kind == "write", o
        assert max(o.took for o in outcomes) < ANSWER_BOUND
        assert any(o.kind == "search" and o.status == 200 and o.sent > killed_at + restart_s for o in outcomes)

        acknowledged = [o for o in outcomes if o.kind == "write" and o.status == 200]
        on_victim = [o for o in acknowledged if shard_of(o.doc_id, SHARDS) == VICTIM]
        assert [o for o in on_victim if o.sent < killed_at], "writes to the killed shard were acknowledged before"
        found = {o.doc_id: client.get(f"/documents/{o.doc_id}") for o in outcomes if o.kind == "write"}
        missing = [o.doc_id for o in acknowledged if found[o.doc_id].status_code != 200]
        wrong = [
            o.doc_id
            for o in acknowledged
            if o.doc_id not in missing and found[o.doc_id].json()["title"] != title_of(o.doc_id)
        ]
        applied_anyway = [o for o in outcomes if o.kind == "write" and o.status == 503]
        applied_anyway = [o for o in applied_anyway if found[o.doc_id].status_code == 200]
        print(
            f"GET /cluster saw shard {VICTIM} back {restart_s:.2f}s after the kill; "
            f"acknowledged writes: {len(acknowledged)} ({len(on_victim)} to shard {VICTIM}), "
            f"missing after the restart: {len(missing)}; writes answered 503 but applied: {len(applied_anyway)}"
        )
        assert not missing and not wrong
        # The restarted shard's index holds them too (replayed from its write log), not only its store.
        text = texts[int(on_victim[-1].doc_id.rsplit("-", 1)[1]) % len(texts)]
        hits = client.post("/search", json={"query": text, "k": 100}).json()["hits"]
        same_text = [o.doc_id for o in acknowledged if found[o.doc_id].json()["text"] == text]
        assert on_victim[-1].doc_id in same_text and set(same_text) <= {h["id"] for h in hits}


def test_a_shard_that_cannot_come_back_is_a_bounded_503_naming_it(world: dict, cluster: dict, tmp_path: Path) -> None:
    """Shard 1's folder emptied (a volume not mounted) and its replica killed: Serve's restarts fail, every
    search is a 503 naming shard 1 within the shard timeout (no hang), /readyz names it; folder back, it serves.

    Slow: waits for Serve's restarts of a shard to fail, then for the shard to come back once its folder does."""
    from cluster.manifest import read_manifest

    url = deployed(cluster, replicas=1)
    folder = cluster["index"] / read_manifest(cluster["index"]).entries[VICTIM].folder
    query = probe_queries(world["docs"], 1, seed=8)[0]
    with httpx.Client(base_url=url, timeout=ANSWER_BOUND, verify=TLS) as client:
        expected = client.post("/search", json={"query": query, "k": 10}).json()["hits"]
        victim = shard_replicas(client, VICTIM)
        folder.rename(tmp_path / "away")
        folder.mkdir()
        os.kill(victim["pid"], signal.SIGKILL)
        answers = []
        while len(answers) < 2:  # each is given up after SHARD_TIMEOUT
            sent = time.monotonic()
            response = client.post("/search", json={"query": query, "k": 10})
            answers.append((response.status_code, time.monotonic() - sent, response.json()))
        ready = client.get("/readyz")
        folder.rmdir()
        (tmp_path / "away").rename(folder)
        back = wait_for_new_replica(client, VICTIM, victim["pid"], timeout=120)
        print(
            f"\nshard {VICTIM} without its store: {[(s, round(t, 2)) for s, t, _ in answers]}; back {back:.1f}s after"
        )
        assert answers[-1][0] == 503 and all(t < SHARD_TIMEOUT + 1 for _, t, _ in answers)
        assert all(f"shard {VICTIM} did not answer" in body["detail"] for s, _, body in answers if s == 503)
        assert ready.status_code == 503
        assert [s["status"] for s in ready.json()["shards"] if s["shard"] == VICTIM] == ["unavailable"]
        assert client.post("/search", json={"query": query, "k": 10}).json()["hits"] == expected


def test_with_two_replicas_searches_keep_answering_while_one_is_killed(world: dict, cluster: dict) -> None:
    """`replicas=2`: the router's retry goes to the other replica of the shard; no search sees a 503.

    Slow: a second Serve application with two replicas a shard, one killed under a live workload and replaced."""
    url = deployed(cluster, replicas=2)
    with httpx.Client(base_url=url, timeout=30, verify=TLS) as client:
        pids = replica_pids(client, VICTIM, 2)
        work = Workload(url, probe_queries(world["docs"], 4, seed=6), [], write=False).start(searchers=3)
        time.sleep(1.0)
        dead = min(pids)
        killed_at = work.now()
        os.kill(dead, signal.SIGKILL)
        time.sleep(3.0)
        outcomes = work.finish()
        report("two replicas per shard, one replica of shard 1 killed", outcomes, killed_at)
        after = [o for o in outcomes if o.sent > killed_at]
        assert after and all(o.status == 200 for o in outcomes), Counter(o.status for o in outcomes)
        assert max(o.took for o in outcomes) < ANSWER_BOUND
