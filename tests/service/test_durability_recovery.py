"""Faults between the store and the index: a failed in-memory apply is recovered from the store, and a bundle
overwritten in place (not through a new folder) cannot crash the serving process."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import pytest
import yaml
from service_testing import (
    API_KEY,
    REPO,
    TLS,
    Oracle,
    ProcessServer,
    ThreadServer,
    assert_same_ranking,
    make_bundle,
    wait_ready,
)

from service.index import VectorIndex
from ssi.records import Document

KEY = {"X-API-Key": API_KEY}


def test_a_failed_index_apply_is_recovered_from_the_store(
    small_world: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs: list[Document] = list(small_world["docs"])
    written = [Document("new-1", "New", docs[7].text), Document(docs[8].id, "Replaced", docs[9].text)]
    with ThreadServer(
        bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path / "cache", api_key=API_KEY
    ) as server:
        client = server.client
        original = VectorIndex.add
        calls = {"n": 0}

        def fails_once(self: VectorIndex, vectors: np.ndarray) -> int:
            calls["n"] += 1
            if calls["n"] == 1:  # e.g. FAISS out of memory: after the rows were marked, before the vectors went in
                raise RuntimeError("injected: FAISS could not add the vectors")
            return original(self, vectors)

        monkeypatch.setattr(VectorIndex, "add", fails_once)
        body = {"documents": [{"id": d.id, "title": d.title, "text": d.text} for d in written]}
        response = client.post("/documents", json=body, headers=KEY)
        assert calls["n"] >= 1
        # The store committed the write; the answer says so, and the collection repairs its index.
        assert response.status_code == 503, response.text
        assert "committed" in response.json()["detail"]
        wait_ready(server.url, timeout=30)
        current = {d.id: d for d in docs}
        current.update({d.id: d for d in written})
        assert client.get("/documents/new-1").status_code == 200
        assert client.get("/model").json()["index"]["documents"] == len(current)
        oracle = Oracle(small_world["bundle"], list(current.values()))
        for doc in [*written, *docs[:5]]:
            query = doc.text[:60]
            hits = client.post("/search", json={"query": query, "k": 10}).json()["hits"]
            assert_same_ranking(hits, oracle, query, 10)
        # And it keeps taking writes.
        assert client.put("/documents/new-2", json={"text": docs[10].text}, headers=KEY).status_code == 200


def test_a_bundle_overwritten_in_place_does_not_crash_the_server(small_world: dict, tmp_path: Path) -> None:
    # The diagonal form reads its weights w at every query: the served arrays are touched after the load.
    bundle = make_bundle(tmp_path / "bundle", small_world["docs"], form="diagonal")
    env = {"SSI_CACHE_DIR": str(tmp_path / "cache"), "SSI_API_KEY": API_KEY}
    server = ProcessServer(tmp_path, env, ["--bundle", str(bundle), "--corpus", str(small_world["corpus"])]).start()
    try:
        # What `cp -r new/ served/` does to a served file: truncate, then write. Caught between the two:
        for array in bundle.glob("*.npy"):
            array.open("r+b").truncate(0)
        with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as client:
            for doc in small_world["docs"][:5]:
                assert client.post("/search", json={"query": doc.text[:60], "k": 10}).status_code == 200
            put = client.put("/documents/" + quote("after-copy"), json={"text": "words after the copy"}, headers=KEY)
            assert put.status_code == 200
            assert client.get("/healthz").status_code == 200
        assert server.process is not None and server.process.poll() is None
    finally:
        server.stop()
    assert "Bus error" not in server.log()


def test_compose_waits_for_the_graceful_shutdown_and_keeps_the_store_in_a_data_volume() -> None:
    spec = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
    service = spec["services"]["service"]
    grace = service["stop_grace_period"]
    seconds = float(grace.rstrip("s")) if grace.endswith("s") and not grace.endswith("ms") else None
    assert seconds is not None and seconds >= 35, "docker must wait longer than the 30 s graceful shutdown"
    data_dir = service["environment"]["SSI_DATA_DIR"]
    mounts = {v.split(":")[1]: v for v in service["volumes"]}
    volume = mounts[data_dir].split(":")[0]
    assert volume in spec["volumes"] and "cache" not in volume, "the document store is data, not cache"
    assert not mounts[data_dir].endswith(":ro")
    assert service["environment"]["SSI_CACHE_DIR"] != data_dir
