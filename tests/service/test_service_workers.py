"""`ssi serve --workers N`: one server of several processes (service.workers), as real processes over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
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
    process_world,
    worker_pids,
)

from service.cores import serve_sizes, usable_cores
from ssi.records import Document

KEY = {"X-API-Key": API_KEY}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return process_world(tmp_path_factory.mktemp("workers"), 1500, seed=5)


def group(world: dict, cache: Path, workers: int = 2, bundle: Path | None = None) -> ProcessServer:
    env = {"SSI_CACHE_DIR": str(cache), "SSI_API_KEY": API_KEY, "SSI_WORKERS": str(workers), "SSI_THREADS": "1"}
    args = ["--bundle", str(bundle or world["bundle"]), "--corpus", str(world["corpus"])]
    return ProcessServer(world["root"], env, args)


def pids(url: str, tries: int = 80) -> set[int]:
    """The worker pids that answer fresh connections (each call opens its own)."""
    return {httpx.get(f"{url}/readyz", timeout=30).json()["pid"] for _ in range(tries)}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def fresh_search(url: str, query: str, k: int = 10) -> list[dict]:
    """A search on a new connection, so that any worker may take it."""
    response = httpx.post(f"{url}/search", json={"query": query, "k": k}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["hits"]


def test_workers_rank_exactly_and_each_sees_the_others_writes_at_once(world: dict, tmp_path: Path) -> None:
    """Slow: a group of real worker processes, each loading the model and its index, written to through each other."""
    docs: list[Document] = world["docs"]
    server = group(world, tmp_path / "cache").start()
    try:
        assert len(worker_pids(server.url, 2)) == 2
        cores = usable_cores()
        assert f"2 worker processes × 1 thread (SSI_WORKERS, SSI_THREADS) on {cores.describe()}" in server.log()
        oracle = Oracle(world["bundle"], docs)
        for doc in docs[:8]:
            for _ in range(3):  # fresh connections: the same exact ranking whichever worker answers
                assert_same_ranking(fresh_search(server.url, doc.title), oracle, doc.title, 10)
        # Move documents under new ids: each write goes to one worker, every next search may go to the other.
        current = list(docs)
        for doc in docs[20:30]:
            moved = Document(f"moved-{doc.id}", doc.title, doc.text)
            body = {"documents": [{"id": moved.id, "title": moved.title, "text": moved.text}]}
            assert httpx.post(f"{server.url}/documents", json=body, headers=KEY).status_code == 200
            assert httpx.delete(f"{server.url}/documents/{doc.id}", headers=KEY).status_code == 200
            current = [d for d in current if d.id != doc.id] + [moved]
            oracle = Oracle(world["bundle"], current)
            for _ in range(4):
                assert_same_ranking(fresh_search(server.url, needle_of(doc)), oracle, needle_of(doc), 10)
        for doc in docs[15:35]:
            assert_same_ranking(fresh_search(server.url, doc.title), oracle, doc.title, 10)
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log()

    # The upkeep worker saved the writes at shutdown: the next group loads them from the cache.
    again = group(world, tmp_path / "cache").start()
    try:
        info = httpx.get(f"{again.url}/readyz").json()["collections"]["documents"]
        assert info["loaded_from"] == "cache" and info["documents"] == len(docs)
        # Both workers loaded the snapshot: each maps its vectors (one copy in the page cache), not its own.
        answered = {}
        for _ in range(80):
            ready = httpx.get(f"{again.url}/readyz", timeout=30).json()
            answered[ready["pid"]] = ready["collections"]["documents"]["vectors_shared"]
        assert len(answered) == 2 and all(answered.values())
        for doc in docs[15:35]:
            assert_same_ranking(fresh_search(again.url, doc.title), oracle, doc.title, 10)
    finally:
        assert again.stop() == 0


def served_hashes(url: str, tries: int = 80) -> dict[int, str]:
    """The bundle content hash each answering worker serves (fresh connections), by pid."""
    hashes: dict[int, str] = {}
    for _ in range(tries):
        ready = httpx.get(f"{url}/readyz", timeout=30).json()
        hashes[ready["pid"]] = ready["collections"]["documents"]["content_hash"]
    return hashes


def test_a_reload_reaches_every_worker_and_a_replaced_one(world: dict, tmp_path: Path) -> None:
    """POST /admin/reload to a group answers once both workers serve the new bundle; a worker started again
    after a crash serves it too; a restarted server serves the bundle it is started with.

    Slow: a group of real worker processes (each loads the model and its index), a reload on each, and one killed
    and replaced."""
    docs: list[Document] = world["docs"]
    other = make_bundle(world["root"] / "bundle-reloaded", docs, n_dims=32, seed=9)
    first_hash = Oracle(world["bundle"], docs[:1]).bundle.content_hash
    oracle = Oracle(other, docs)
    server = group(world, tmp_path / "cache").start()
    try:
        assert set(served_hashes(server.url).values()) == {first_hash}
        response = httpx.post(f"{server.url}/admin/reload", json={"bundle": str(other)}, headers=KEY, timeout=120)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["workers"] == {"serving": 2, "of": 2}
        assert answer["content_hash"] == oracle.bundle.content_hash != first_hash
        hashes = served_hashes(server.url)
        assert len(hashes) == 2 and set(hashes.values()) == {oracle.bundle.content_hash}
        for doc in docs[:6]:
            for _ in range(3):
                assert_same_ranking(fresh_search(server.url, doc.title), oracle, doc.title, 10)
        # A worker killed and started again loads what the group serves, not the command line's bundle.
        victim = min(hashes)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                hashes = served_hashes(server.url, tries=20)
            except httpx.HTTPError:
                continue
            if len(hashes) == 2 and victim not in hashes:
                break
        assert len(hashes) == 2 and victim not in hashes
        assert set(hashes.values()) == {oracle.bundle.content_hash}
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log()
    again = group(world, tmp_path / "cache").start()
    try:
        assert set(served_hashes(again.url, tries=20).values()) == {first_hash}
    finally:
        assert again.stop() == 0


def test_ssi_serve_sizes_its_workers_by_the_cores_it_may_use(world: dict, tmp_path: Path) -> None:
    """No SSI_WORKERS, no SSI_THREADS: `ssi serve` chooses from the cores (a worker each on this machine's),
    says so at start, and the group it starts answers exactly."""
    cores = usable_cores()
    workers, threads = serve_sizes(cores.usable, None, None)
    env = {"SSI_CACHE_DIR": str(tmp_path / "cache"), "SSI_WORKERS": None, "SSI_THREADS": None}
    args = ["--bundle", str(world["bundle"]), "--corpus", str(world["corpus"])]
    server = ProcessServer(world["root"], env, args).start()
    try:
        processes = f"{workers} worker process{'es' if workers > 1 else ''}"
        line = f"{processes} × {threads} thread{'s' if threads > 1 else ''} (SSI_WORKERS, SSI_THREADS)"
        assert f"{line} on {cores.describe()}" in server.log()
        assert "busy threads on" not in server.log()  # never more busy threads than cores
        # Ready only once every worker listens: connections opened from then on reach all of them.
        assert server.ready["collections"]["documents"].get("workers_loaded", 1) == workers
        assert len(worker_pids(server.url, workers)) == workers
        oracle = Oracle(world["bundle"], world["docs"])
        for doc in world["docs"][:5]:
            assert_same_ranking(fresh_search(server.url, doc.title), oracle, doc.title, 10)
    finally:
        assert server.stop() == 0


def test_every_worker_compacts_its_own_dead_rows(world: dict, tmp_path: Path) -> None:
    """Replaced documents become dead rows in every worker's index (each replays the others' writes); each
    worker compacts its own, not only the one that keeps the snapshots (the other one's dead rows used to pile
    up for as long as the group served).

    Slow: a group of real worker processes, written to until each of them compacts."""
    docs: list[Document] = [d for d in world["docs"] if d.id.startswith("doc-")]
    env = {
        "SSI_CACHE_DIR": str(tmp_path / "cache"),
        "SSI_API_KEY": API_KEY,
        "SSI_WORKERS": "2",
        "SSI_THREADS": "1",
        "SSI_COMPACT_DEAD_FRACTION": "0.05",
        "SSI_SNAPSHOT_EVERY_WRITES": "100",
    }
    args = ["--bundle", str(world["bundle"]), "--corpus", str(world["corpus"])]
    server = ProcessServer(world["root"], env, args).start()
    try:
        for i in range(400):
            doc = docs[i % 300]
            body = {"title": doc.title, "text": f"{doc.text} again {i}"}
            assert httpx.put(f"{server.url}/documents/{doc.id}", json=body, headers=KEY).status_code == 200
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = {}
            for _ in range(40):
                ready = httpx.get(f"{server.url}/readyz", timeout=30).json()
                states[ready["pid"]] = ready["collections"]["documents"]
            # 400 replaced documents: a worker that never compacted would hold 400 dead rows; one that did holds
            # at most what came since its last compaction (one snapshot's 100 writes, or 5 % of its rows).
            if len(states) == 2 and all(c["dead_rows"] < 200 for c in states.values()):
                break
            time.sleep(0.5)
        assert len(states) == 2
        counts = {pid: (c["rows"], c["dead_rows"]) for pid, c in states.items()}
        assert all(c["dead_rows"] < 200 for c in states.values()), counts
        assert all(c["documents"] == len(world["docs"]) for c in states.values())
        assert "compacted online" in server.log() and "Traceback" not in server.log()
    finally:
        assert server.stop() == 0


def test_a_killed_worker_is_replaced_and_the_folder_stays_locked(world: dict, tmp_path: Path) -> None:
    """Slow: a group of real worker processes, one killed and its replacement waited for."""
    docs: list[Document] = world["docs"]
    server = group(world, tmp_path / "cache").start()
    try:
        before = pids(server.url)
        assert len(before) == 2
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        # A write while one worker is down: the other takes it; the replacement must load it.
        written = Document("after-kill", "After", docs[3].text)
        body = {"documents": [{"id": written.id, "title": written.title, "text": written.text}]}
        for _ in range(5):
            try:
                response = httpx.post(f"{server.url}/documents", json=body, headers=KEY)
                break
            except httpx.HTTPError:  # a connection the dead worker had accepted
                continue
        assert response.status_code == 200
        deadline = time.monotonic() + 60
        now: set[int] = set()
        while time.monotonic() < deadline:
            try:
                now = pids(server.url, tries=20)
            except httpx.HTTPError:
                continue
            if len(now) == 2 and victim not in now:
                break
        assert len(now) == 2 and victim not in now, (before, now)
        assert "exited with -9: starting another" in server.log()
        oracle = Oracle(world["bundle"], [*docs, written])
        for _ in range(10):
            assert_same_ranking(fresh_search(server.url, needle_of(docs[3])), oracle, needle_of(docs[3]), 10)
        # A second server over the same folders is refused while the group holds them.
        other = subprocess.run(
            [
                sys.executable,
                "-m",
                "service",
                "serve",
                "--bundle",
                str(world["bundle"]),
                "--corpus",
                str(world["corpus"]),
            ],
            env={**os.environ, "SSI_CACHE_DIR": str(tmp_path / "cache"), "SSI_PORT": str(free_port())},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert other.returncode != 0 and "already served by another process" in other.stderr + other.stdout
        # The supervisor killed outright: its workers die with it (they would otherwise serve and write on
        # with the folders unlocked), and the next server finds every acknowledged write.
        workers = pids(server.url, tries=20)
        server.kill()
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(pid) for pid in workers)
    finally:
        server.stop()
    again = group(world, tmp_path / "cache").start()
    try:
        assert httpx.get(f"{again.url}/documents/after-kill").status_code == 200
        assert_same_ranking(fresh_search(again.url, needle_of(docs[3])), oracle, needle_of(docs[3]), 10)
    finally:
        assert again.stop() == 0


def test_a_worker_that_cannot_load_stops_the_whole_server(world: dict, tmp_path: Path) -> None:
    import shutil

    import numpy as np

    corrupt = tmp_path / "corrupt-bundle"
    shutil.copytree(world["bundle"], corrupt)
    np.save(corrupt / "V.npy", np.load(corrupt / "V.npy") + 1)
    server = group(world, tmp_path / "cache", bundle=corrupt).start(wait=False)
    assert server.process is not None
    assert server.process.wait(timeout=120) == 1
    assert "V.npy: contents do not match the manifest's hash" in server.log()
    assert "could not load its collections: stopping the server" in server.log()
