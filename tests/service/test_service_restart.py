"""The service as a real process: cache reuse on restart, SIGKILL during writes, damaged caches, bad bundles."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from service_testing import (
    API_KEY,
    REPO,
    TLS,
    Oracle,
    ProcessServer,
    assert_same_ranking,
    needle_of,
    process_world,
)

from ssi.records import Document

KEY = {"X-API-Key": API_KEY}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return process_world(tmp_path_factory.mktemp("proc"), 2000, seed=3)


def server_for(world: dict, cache: Path, **env: str) -> ProcessServer:
    settings = {"SSI_CACHE_DIR": str(cache), "SSI_API_KEY": API_KEY, **env}
    return ProcessServer(world["root"], settings, ["--bundle", str(world["bundle"]), "--corpus", str(world["corpus"])])


def load_info(server: ProcessServer) -> dict:
    return httpx.get(f"{server.url}/readyz", verify=TLS).json()["collections"]["documents"]


def search_ids(url: str, queries: list[str], k: int = 10) -> list[list[str]]:
    with httpx.Client(timeout=30, verify=TLS) as client:
        responses = [client.post(f"{url}/search", json={"query": query, "k": k}) for query in queries]
    for response in responses:
        assert response.status_code == 200, response.text
    return [[h["id"] for h in response.json()["hits"]] for response in responses]


def test_restart_loads_the_cache_and_survives_a_damaged_snapshot(world: dict, tmp_path: Path) -> None:
    """Slow: a real server process started three times over one cache (one of them over a damaged snapshot)."""
    cache = tmp_path / "cache"
    docs: list[Document] = world["docs"]
    queries = [d.title for d in docs[:20]]
    first = server_for(world, cache).start()
    try:
        info = load_info(first)
        assert info["loaded_from"] == "computed" and info["embedded_on_load"] == len(docs)
        before = search_ids(first.url, queries)
        added = httpx.put(f"{first.url}/documents/late", json={"text": docs[5].text}, headers=KEY, verify=TLS)
        assert added.status_code == 200
    finally:
        # A graceful stop (uvicorn re-raises the SIGTERM after it) snapshots the unsaved write.
        assert first.stop() in (0, -15)
    assert f"snapshot at write {len(docs) + 1} saved" in first.log()

    second = server_for(world, cache).start()
    try:
        info2 = load_info(second)
        assert info2["loaded_from"] == "cache"
        assert info2["embedded_on_load"] == 0 and info2["replayed_on_load"] == 0
        assert info2["documents"] == len(docs) + 1
        assert search_ids(second.url, queries) == before
        assert httpx.get(f"{second.url}/documents/late", verify=TLS).status_code == 200
        extra = {"id": "extra", "title": "Extra", "text": docs[9].text}
        assert (
            httpx.post(f"{second.url}/documents", json={"documents": [extra]}, headers=KEY, verify=TLS).status_code
            == 200
        )
    finally:
        assert second.stop() in (0, -15)

    # A torn or corrupt newest snapshot: the older one loads and the write log brings it up to date.
    snaps = sorted(cache.glob("index/documents/*/snap-*"))
    assert [p.name[-4:] for p in snaps] == [str(len(docs) + 1)[-4:], str(len(docs) + 2)[-4:]]
    (snaps[-1] / "index.faiss").write_bytes(b"\0" * 100)
    third = server_for(world, cache).start()
    try:
        info3 = load_info(third)
        assert info3["loaded_from"] == "cache" and info3["replayed_on_load"] == 1
        assert info3["documents"] == len(docs) + 2
        assert "ignoring snapshot" in third.log()
        current = [*docs, Document("late", "", docs[5].text), Document("extra", "Extra", docs[9].text)]
        oracle = Oracle(world["bundle"], current)
        with httpx.Client(base_url=third.url, timeout=30, verify=TLS) as client:
            for doc in docs[:10]:
                hits = client.post("/search", json={"query": doc.title, "k": 10}).json()["hits"]
                assert_same_ranking(hits, oracle, doc.title, 10)
    finally:
        third.stop()


class Writer(threading.Thread):
    """Writes (and sometimes deletes) as fast as it can, remembering what the server acknowledged."""

    def __init__(self, url: str, docs: list[Document], start: int, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.url, self.docs, self.i, self.rng = url, docs, start, rng
        self.acked: dict[str, Document] = {}
        self.deleted: set[str] = set()
        self.in_flight: set[str] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30, verify=TLS) as client:
            while not self.stop.is_set():
                self.i += 1
                a, b = self.docs[self.i % len(self.docs)], self.docs[(7 * self.i) % len(self.docs)]
                try:
                    if self.i % 5 == 0:
                        victim = self.docs[self.i % len(self.docs)].id
                        self.in_flight = {victim}
                        response = client.delete("/documents/" + quote(victim, safe=""), headers=KEY)
                        if response.status_code in (200, 404):
                            self.deleted.add(victim)
                            self.acked.pop(victim, None)
                    elif self.i % 7 == 0:
                        body = {
                            "documents": [
                                {"id": f"w-{self.i}-{j}", "title": f"W {j}", "text": f"{needle_of(a)} {b.title} {j}"}
                                for j in range(3)
                            ]
                        }
                        self.in_flight = {d["id"] for d in body["documents"]}
                        if client.post("/documents", json=body, headers=KEY).status_code == 200:
                            for d in body["documents"]:
                                self.acked[d["id"]] = Document(d["id"], d["title"], d["text"])
                    else:
                        doc = Document(f"w-{self.i}", "Written", f"{needle_of(a)} {needle_of(b)} {b.title}")
                        self.in_flight = {doc.id}
                        if client.put(
                            f"/documents/{doc.id}", json={"title": doc.title, "text": doc.text}, headers=KEY
                        ).is_success:
                            self.acked[doc.id] = doc
                            self.deleted.discard(doc.id)
                    self.in_flight = set()
                except httpx.TransportError:
                    return  # the server was killed


def test_sigkill_during_writes_loses_no_acknowledged_write(world: dict, tmp_path: Path) -> None:
    """A server killed during writes, with snapshots every 4 writes so the kill may land in one, keeps every
    acknowledged write and an index that agrees with its store. One kill, not two: the second killed a server that
    had itself recovered from a kill, which test_durability_crash_loop does in each of its cases (and
    scripts/crash-loop.sh fifty).

    Slow: a real server process killed during writes and started again on its folder."""
    cache = tmp_path / "cache"
    docs: list[Document] = world["docs"]
    rng = random.Random(7)
    acked: dict[str, Document] = {}
    deleted: set[str] = set()
    uncertain: set[str] = set()
    # Frequent snapshots, so kills land before, during and after snapshot writes.
    env = {"SSI_SNAPSHOT_EVERY_WRITES": "4", "SSI_SNAPSHOT_INTERVAL": "0.2"}
    position = 0
    for round_number in range(1):
        server = server_for(world, cache, **env).start()
        writer = Writer(server.url, docs, position, rng)
        writer.start()
        time.sleep(rng.uniform(0.6, 1.5))
        server.kill()
        writer.stop.set()
        writer.join(timeout=30)
        position = writer.i
        for doc_id, doc in writer.acked.items():
            acked[doc_id] = doc
            deleted.discard(doc_id)
        for doc_id in writer.deleted:
            deleted.add(doc_id)
            acked.pop(doc_id, None)
        uncertain |= writer.in_flight
        assert len(writer.acked) + len(writer.deleted) > 5, f"round {round_number}: too few writes to mean anything"

    server = server_for(world, cache, **env).start()
    try:
        client = httpx.Client(base_url=server.url, timeout=30, verify=TLS)
        for doc_id, doc in acked.items():
            got = client.get("/documents/" + quote(doc_id, safe=""))
            assert got.status_code == 200, f"acknowledged write of {doc_id!r} lost"
            assert got.json()["text"] == doc.text
        for doc_id in deleted - uncertain:
            assert client.get("/documents/" + quote(doc_id, safe="")).status_code == 404, f"{doc_id!r} came back"
        # The index agrees with the store: searches equal brute force over what the store now holds.
        current = {d.id: d for d in docs if d.id not in deleted}
        current.update(acked)
        for doc_id in uncertain:  # an unacknowledged write may or may not have been committed
            got = client.get("/documents/" + quote(doc_id, safe=""))
            if got.status_code == 200:
                body = got.json()
                current[doc_id] = Document(doc_id, body["title"], body["text"])
            else:
                current.pop(doc_id, None)
        assert client.get("/model").json()["index"]["documents"] == len(current)
        oracle = Oracle(world["bundle"], list(current.values()))
        sample = list(acked.values())[:15] + docs[:5]
        for doc in sample:
            query = doc.text[:80]
            hits = client.post("/search", json={"query": query, "k": 10}).json()["hits"]
            assert_same_ranking(hits, oracle, query, 10)
        client.close()
    finally:
        server.stop()


def run_serve(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    import os

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SSI_")} | {"SSI_WORKERS": "1"} | env
    return subprocess.run(
        [sys.executable, "-m", "service", "serve", *args],
        env=full_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_bad_bundles_and_settings_stop_the_server_with_a_reason(world: dict, tmp_path: Path) -> None:
    import shutil

    port = {"SSI_PORT": "1", "SSI_CACHE_DIR": str(tmp_path / "cache")}
    missing = run_serve(["--bundle", str(tmp_path / "nope")], port)
    assert missing.returncode == 2 and "not a bundle folder" in missing.stderr
    short_key = run_serve(["--bundle", str(world["bundle"])], {**port, "SSI_API_KEY": "abc"})
    assert short_key.returncode == 2 and "at least 16 characters" in short_key.stderr
    public = run_serve(["--bundle", str(world["bundle"]), "--host", "0.0.0.0", "--insecure-writes"], port)
    assert public.returncode == 2 and "refusing unauthenticated writes" in public.stderr

    corrupt = tmp_path / "corrupt-bundle"
    shutil.copytree(world["bundle"], corrupt)
    V = np.load(corrupt / "V.npy")
    np.save(corrupt / "V.npy", V + 1)
    free = ProcessServer(tmp_path, {"SSI_CACHE_DIR": str(tmp_path / "cache")}, []).port
    result = run_serve(
        ["--bundle", str(corrupt), "--corpus", str(world["corpus"]), "--port", str(free)],
        {"SSI_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.returncode == 1
    assert "V.npy: contents do not match the manifest's hash" in result.stderr
