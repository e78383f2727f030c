"""Admission control, compaction of deleted rows, and a collection that starts empty."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from service_testing import API_KEY, Oracle, ThreadServer, assert_same_ranking, needle_of

from service.admission import Limiter
from service.collection import Collection
from service.errors import Overloaded, Unavailable
from service.metrics import Metrics
from service.settings import CollectionSpec, Settings
from ssi.records import Document


def test_limiter_turns_requests_away_with_429_when_the_queue_is_full_and_503_after_the_timeout() -> None:
    release = threading.Event()
    rejected: list[int] = []

    async def scenario() -> list[object]:
        limiter = Limiter("search", slots=1, queue=1, timeout=0.2, on_reject=lambda _, status: rejected.append(status))
        running = asyncio.create_task(limiter.run(release.wait, 10))
        await asyncio.sleep(0.05)  # the slot is taken
        waiting = asyncio.create_task(limiter.run(lambda: "late"))
        await asyncio.sleep(0.05)  # the queue is full
        with pytest.raises(Overloaded, match="server busy"):
            await limiter.run(lambda: "no room")
        with pytest.raises(Unavailable, match="no capacity"):
            await waiting  # waited 0.2 s without a slot
        release.set()
        assert await running is True
        return [await limiter.run(lambda: "after"), limiter.running, limiter.waiting]

    assert asyncio.run(scenario()) == ["after", 0, 0]
    assert rejected == [429, 503]


def test_snapshot_with_many_deleted_rows_is_compacted_on_load(small_world: dict, tmp_path: Path) -> None:
    docs: list[Document] = small_world["docs"]
    settings = Settings(
        bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path, api_key=API_KEY,
        compact_dead_fraction=0.2,
    )  # fmt: skip
    spec = CollectionSpec(bundle=small_world["bundle"], corpus=small_world["corpus"])
    first = Collection("documents", spec, settings, Metrics())
    first.load()
    for doc in docs[:100]:
        first.delete(doc.id)
    first.put([Document(d.id, "Again", d.text) for d in docs[100:150]])  # replaced: 50 more dead rows
    first.close()  # snapshots: 550 rows, 150 dead

    second = Collection("documents", spec, settings, Metrics())
    second.load()
    try:
        info = second.describe()
        assert info["compacted_on_load"] and info["rows"] == info["documents"] == 300 and info["dead_rows"] == 0
        current = [Document(d.id, "Again", d.text) for d in docs[100:150]] + docs[150:]
        oracle = Oracle(small_world["bundle"], current)
        for doc in docs[:5] + docs[100:105]:
            query = f"{needle_of(doc)} {doc.title}"
            (result,) = second.search([query], 10, 0)
            hits = [
                {"id": i, "score": s, "semantic": se, "lexical": le}
                for i, s, se, le in zip(result.doc_ids, result.scores, result.semantic, result.lexical, strict=True)
            ]
            assert_same_ranking(hits, oracle, query, 10)
    finally:
        second.close()


def test_collection_without_corpus_starts_empty_and_grows(small_world: dict, tmp_path: Path) -> None:
    with ThreadServer(bundle=small_world["bundle"], cache_dir=tmp_path, api_key=API_KEY) as server:
        client = server.client
        assert client.get("/model").json()["index"]["documents"] == 0
        assert client.post("/search", json={"query": "baba"}).json()["hits"] == []
        docs = small_world["docs"][:30]
        body = {"documents": [{"id": d.id, "title": d.title, "text": d.text} for d in docs]}
        assert client.post("/documents", json=body, headers={"X-API-Key": API_KEY}).status_code == 200
        oracle = Oracle(small_world["bundle"], docs)
        for doc in docs[:5]:
            hits = client.post("/search", json={"query": doc.title, "k": 10}).json()["hits"]
            assert_same_ranking(hits, oracle, doc.title, 10)
