"""`ssi serve --workers N`: one server of several processes (service.workers), as real processes over HTTP."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
from service_testing import (
    API_KEY,
    REPO,
    Oracle,
    ProcessServer,
    assert_same_ranking,
    free_port,
    make_bundle,
    needle_of,
    polling_client,
    process_world,
)

from service.cores import serve_sizes, usable_cores
from ssi.records import Document

KEY = {"X-API-Key": API_KEY}


@functools.cache
def fresh() -> httpx.Client:
    """The module's one HTTP client (service_testing.polling_client): every request on a new connection, so that
    any worker may take it (the kernel spreads new connections over the workers' SO_REUSEPORT sockets). httpx.get
    and the like, which build a client and its TLS context per call (~40 ms of CPU), made most of this module's
    CPU over the ~1,500 requests it sent with them, and took a core from the servers it waited on."""
    return polling_client(timeout=30)


@pytest.fixture(scope="module", autouse=True)
def _close_client() -> Iterator[None]:
    yield
    if fresh.cache_info().currsize:
        fresh().close()
        fresh.cache_clear()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return process_world(tmp_path_factory.mktemp("workers"), 1500, seed=5)


def group(
    world: dict, cache: Path, workers: int = 2, bundle: Path | None = None, env: dict[str, str] | None = None
) -> ProcessServer:
    settings = {"SSI_CACHE_DIR": str(cache), "SSI_API_KEY": API_KEY, "SSI_WORKERS": str(workers), "SSI_THREADS": "1"}
    args = ["--bundle", str(bundle or world["bundle"]), "--corpus", str(world["corpus"])]
    return ProcessServer(world["root"], {**settings, **(env or {})}, args)


def answering(url: str, workers: int, timeout: float = 30.0) -> dict[int, dict]:
    """Each answering worker's /readyz collection "documents", by pid: asked on fresh connections until `workers`
    of them answered or `timeout` passed (the kernel picks the worker of a connection by a hash of its address)."""
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < workers and time.monotonic() < deadline:
        ready = fresh().get(f"{url}/readyz").json()
        if ready["pid"] in seen:
            time.sleep(0.02)  # a worker still missing (one loading) is waited for without taking its core
        seen[ready["pid"]] = ready["collections"]["documents"]
    return seen


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def fresh_search(url: str, query: str, k: int = 10) -> list[dict]:
    """A search on a new connection, so that any worker may take it."""
    response = fresh().post(f"{url}/search", json={"query": query, "k": k})
    assert response.status_code == 200, response.text
    return response.json()["hits"]


class Shared:
    """The module's one worker group over one cache folder, handed from test to test in the file's order (each
    leaves it serving, with `docs` what it holds and `bundle` the bundle it serves): a group start is the costly
    part of these tests (each worker imports the service and loads the model and its index), so the tests that
    only need a group running share it, and a new group is started only where a start is what is tested (from
    the snapshot of a stopped group; after the supervisor was killed, sized by the cores). Compaction and snapshots
    are eager (test_every_worker_compacts_its_own_dead_rows); the ranking must stay exact through them anyway."""

    def __init__(self, world: dict, cache: Path) -> None:
        self.world = world
        self.cache = cache
        self.docs: list[Document] = list(world["docs"])
        self.bundle: Path = world["bundle"]
        self.server: ProcessServer | None = None

    def start(self) -> ProcessServer:
        self.bundle = self.world["bundle"]  # a group starts with the command line's bundle, whatever was reloaded
        self.server = group(self.world, self.cache, env=COMPACTING).start()
        return self.server

    def running(self) -> ProcessServer:
        """The group the previous test left, or a new one if there is none (a test run alone, or -k)."""
        if self.server is None or self.server.process is None or self.server.process.poll() is not None:
            return self.start()
        return self.server

    def oracle(self) -> Oracle:
        return Oracle(self.bundle, self.docs)


COMPACTING = {"SSI_COMPACT_DEAD_FRACTION": "0.05", "SSI_SNAPSHOT_EVERY_WRITES": "100"}


@pytest.fixture(scope="module")
def shared(world: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    state = Shared(world, tmp_path_factory.mktemp("group") / "cache")
    yield state
    if state.server is not None:
        state.server.stop()


def test_workers_rank_exactly_and_each_sees_the_others_writes_at_once(shared: Shared) -> None:
    """Both workers rank exactly and see each other's writes at once; a stopped group saved its writes, and the next
    one loads them from its snapshot, each worker mapping the vectors (one copy in the page cache).

    Slow: a group of real worker processes, each loading the model and its index, written to through each other,
    stopped and started again from its snapshot (the group it leaves serves the module's next tests)."""
    docs: list[Document] = shared.world["docs"]
    server = shared.running()
    assert len(answering(server.url, 2)) == 2
    cores = usable_cores()
    assert f"2 worker processes × 1 thread (SSI_WORKERS, SSI_THREADS) on {cores.describe()}" in server.log()
    oracle = shared.oracle()
    for doc in docs[:8]:
        for _ in range(3):  # fresh connections: the same exact ranking whichever worker answers
            assert_same_ranking(fresh_search(server.url, doc.title), oracle, doc.title, 10)
    # Move documents under new ids: each write goes to one worker, every next search may go to the other.
    for doc in docs[20:30]:
        moved = Document(f"moved-{doc.id}", doc.title, doc.text)
        body = {"documents": [{"id": moved.id, "title": moved.title, "text": moved.text}]}
        assert fresh().post(f"{server.url}/documents", json=body, headers=KEY).status_code == 200
        assert fresh().delete(f"{server.url}/documents/{doc.id}", headers=KEY).status_code == 200
        shared.docs = [d for d in shared.docs if d.id != doc.id] + [moved]
        oracle = shared.oracle()
        for _ in range(4):
            assert_same_ranking(fresh_search(server.url, needle_of(doc)), oracle, needle_of(doc), 10)
    for doc in docs[15:35]:
        assert_same_ranking(fresh_search(server.url, doc.title), oracle, doc.title, 10)
    assert server.stop() == 0
    assert "Traceback" not in server.log()

    # The upkeep worker saved the writes at shutdown: the next group loads them from the cache.
    again = shared.start()
    info = again.ready["collections"]["documents"]
    assert info["loaded_from"] == "cache" and info["documents"] == len(docs)
    # Both workers loaded the snapshot: each maps its vectors (one copy in the page cache), not its own.
    answered = answering(again.url, 2)
    assert len(answered) == 2 and all(c["vectors_shared"] for c in answered.values()), answered
    for doc in docs[15:35]:
        assert_same_ranking(fresh_search(again.url, doc.title), oracle, doc.title, 10)


def test_every_worker_compacts_its_own_dead_rows(shared: Shared) -> None:
    """Replaced documents become dead rows in every worker's index (each replays the others' writes); each
    worker compacts its own, not only the one that keeps the snapshots (the other one's dead rows used to pile
    up for as long as the group served). The ranking stays exact after.

    Slow: a group of real worker processes, written to until each of them compacts."""
    server = shared.running()
    originals = [d for d in shared.docs if d.id.startswith("doc-")]
    written = {}
    for i in range(400):
        doc = originals[i % 300]
        written[doc.id] = Document(doc.id, doc.title, f"{doc.text} again {i}")
        body = {"title": doc.title, "text": written[doc.id].text}
        assert fresh().put(f"{server.url}/documents/{doc.id}", json=body, headers=KEY).status_code == 200
    shared.docs = [written.get(d.id, d) for d in shared.docs]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = answering(server.url, 2)
        # 400 replaced documents: a worker that never compacted would hold 400 dead rows; one that did holds
        # at most what came since its last compaction (one snapshot's 100 writes, or 5 % of its rows).
        if len(states) == 2 and all(c["dead_rows"] < 200 for c in states.values()):
            break
        time.sleep(0.2)
    assert len(states) == 2
    counts = {pid: (c["rows"], c["dead_rows"]) for pid, c in states.items()}
    assert all(c["dead_rows"] < 200 for c in states.values()), counts
    assert all(c["documents"] == len(shared.docs) for c in states.values())
    assert "compacted online" in server.log() and "Traceback" not in server.log()
    oracle = shared.oracle()
    for doc in originals[:6]:
        for _ in range(2):
            assert_same_ranking(fresh_search(server.url, needle_of(doc)), oracle, needle_of(doc), 10)


def served_hashes(url: str, workers: int = 2, timeout: float = 30.0) -> dict[int, str]:
    """The bundle content hash each answering worker serves (fresh connections until `workers` answered), by pid."""
    return {pid: c["content_hash"] for pid, c in answering(url, workers, timeout).items()}


def test_a_reload_reaches_every_worker_and_a_replaced_one(shared: Shared) -> None:
    """POST /admin/reload to a group answers once both workers serve the new bundle, and both rank with it exactly.
    A worker started again after a crash serves it too, and a restarted server the bundle it is started with:
    both checked in test_a_killed_worker_is_replaced_and_the_folder_stays_locked and the test after it, which kill a
    worker of the group this test reloaded, then the group, and start the next."""
    server = shared.running()
    first_hash = Oracle(shared.world["bundle"], shared.docs[:1]).bundle.content_hash
    other = make_bundle(shared.world["root"] / "bundle-reloaded", shared.world["docs"], n_dims=32, seed=9)
    assert set(served_hashes(server.url).values()) == {first_hash}
    response = fresh().post(f"{server.url}/admin/reload", json={"bundle": str(other)}, headers=KEY, timeout=120)
    assert response.status_code == 200, response.text
    shared.bundle = other
    oracle = shared.oracle()
    answer = response.json()
    assert answer["workers"] == {"serving": 2, "of": 2}
    assert answer["content_hash"] == oracle.bundle.content_hash != first_hash
    hashes = served_hashes(server.url)
    assert len(hashes) == 2 and set(hashes.values()) == {oracle.bundle.content_hash}
    for doc in shared.world["docs"][:6]:
        for _ in range(3):
            assert_same_ranking(fresh_search(server.url, doc.title), oracle, doc.title, 10)


def test_a_killed_worker_is_replaced_and_the_folder_stays_locked(shared: Shared) -> None:
    """A worker killed: the other takes the writes, and its replacement loads them and the bundle the group serves
    (the one test_a_reload_reaches_every_worker_and_a_replaced_one reloaded, when run after it), not the command
    line's. A second server over the same folders is refused. The supervisor killed: its workers die with it (the
    next group, which finds every acknowledged write and serves the bundle it is started with, is
    test_ssi_serve_sizes_its_workers_by_the_cores_it_may_use's, over these folders).

    Slow: a group of real worker processes, one killed and its replacement waited for, a second server refused
    and the supervisor killed."""
    docs: list[Document] = shared.world["docs"]
    server = shared.running()
    served_hash = shared.oracle().bundle.content_hash
    before = set(answering(server.url, 2))
    assert len(before) == 2
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    # A write while one worker is down: the other takes it; the replacement must load it.
    written = Document("after-kill", "After", docs[3].text)
    body = {"documents": [{"id": written.id, "title": written.title, "text": written.text}]}
    for _ in range(5):
        try:
            response = fresh().post(f"{server.url}/documents", json=body, headers=KEY)
            break
        except httpx.HTTPError:  # a connection the dead worker had accepted
            continue
    assert response.status_code == 200
    shared.docs = [*shared.docs, written]
    deadline = time.monotonic() + 60
    hashes: dict[int, str] = {}
    while time.monotonic() < deadline:
        try:
            hashes = served_hashes(server.url, timeout=1.0)
        except httpx.HTTPError:
            continue
        if len(hashes) == 2 and victim not in hashes:
            break
        time.sleep(0.1)
    assert len(hashes) == 2 and victim not in hashes, (before, hashes)
    assert set(hashes.values()) == {served_hash}  # what the group serves, not the command line's bundle
    assert "exited with -9: starting another" in server.log()
    oracle = shared.oracle()
    for _ in range(10):
        assert_same_ranking(fresh_search(server.url, needle_of(docs[3])), oracle, needle_of(docs[3]), 10)
    # A second server over the same folders is refused while the group holds them.
    other = subprocess.run(
        [sys.executable, "-m", "service", "serve", "--bundle", str(shared.world["bundle"]),
         "--corpus", str(shared.world["corpus"])],
        env={**os.environ, "SSI_CACHE_DIR": str(shared.cache), "SSI_PORT": str(free_port())},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )  # fmt: skip
    assert other.returncode != 0 and "already served by another process" in other.stderr + other.stdout
    # The supervisor killed outright: its workers die with it (they would otherwise serve and write on
    # with the folders unlocked), and the next server finds every acknowledged write.
    workers = set(answering(server.url, 2))
    assert len(workers) == 2
    server.kill()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers)
    shared.server = None


def test_ssi_serve_sizes_its_workers_by_the_cores_it_may_use(shared: Shared) -> None:
    """No SSI_WORKERS, no SSI_THREADS: `ssi serve` chooses from the cores (a worker each on this machine's),
    says so at start, and the group it starts answers exactly. It starts over the folders of the group
    test_a_killed_worker_is_replaced_and_the_folder_stays_locked killed (its supervisor SIGKILLed, after a reload):
    it finds every write that group acknowledged and serves the bundle it is started with.

    Slow: a group of real worker processes, as many as cores, started over the killed group's folders."""
    if shared.server is not None:  # the group of the tests before, when the one that kills it did not run
        shared.server.stop()
        shared.server = None
    cores = usable_cores()
    workers, threads = serve_sizes(cores.usable, None, None)
    env = {"SSI_CACHE_DIR": str(shared.cache), "SSI_WORKERS": None, "SSI_THREADS": None}
    args = ["--bundle", str(shared.world["bundle"]), "--corpus", str(shared.world["corpus"])]
    server = ProcessServer(shared.world["root"], env, args).start()
    shared.bundle = shared.world["bundle"]  # the command line's, whatever the killed group had reloaded
    try:
        processes = f"{workers} worker process{'es' if workers > 1 else ''}"
        line = f"{processes} × {threads} thread{'s' if threads > 1 else ''} (SSI_WORKERS, SSI_THREADS)"
        assert f"{line} on {cores.describe()}" in server.log()
        assert "busy threads on" not in server.log()  # never more busy threads than cores
        # Ready only once every worker listens: connections opened from then on reach all of them.
        assert server.ready["collections"]["documents"].get("workers_loaded", 1) == workers
        answered = answering(server.url, workers)
        assert len(answered) == workers
        first_hash = Oracle(shared.world["bundle"], shared.docs[:1]).bundle.content_hash
        assert {c["content_hash"] for c in answered.values()} == {first_hash}
        assert all(c["documents"] == len(shared.docs) for c in answered.values())
        # Every acknowledged write: the documents moved, added and replaced by the tests before (when run).
        originals = {doc.id: doc for doc in shared.world["docs"]}
        for doc in [d for d in shared.docs if d.id not in originals]:
            assert fresh().get(f"{server.url}/documents/{doc.id}").status_code == 200, doc.id
        oracle = shared.oracle()  # the replaced texts too: documents 9 to 11 were replaced when the tests ran
        queries = [doc.title for doc in shared.docs[:3]] + [needle_of(d) for d in shared.docs[9:12] + shared.docs[-3:]]
        for query in queries:
            assert_same_ranking(fresh_search(server.url, query), oracle, query, 10)
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log()


def test_a_worker_that_cannot_load_stops_the_whole_server(world: dict, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt-bundle"
    shutil.copytree(world["bundle"], corrupt)
    np.save(corrupt / "V.npy", np.load(corrupt / "V.npy") + 1)
    server = group(world, tmp_path / "cache", bundle=corrupt).start(wait=False)
    assert server.process is not None
    assert server.process.wait(timeout=120) == 1
    assert "V.npy: contents do not match the manifest's hash" in server.log()
    assert "could not load its collections: stopping the server" in server.log()
