"""Approximate indexes over HTTP: HNSW and IVF give sensible results, and their knobs work per request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from service_testing import API_KEY, Oracle, ThreadServer, make_bundle, make_corpus, write_corpus

from ssi.records import Document

KEY = {"X-API-Key": API_KEY}


def recall_at_10(server: ThreadServer, oracle: Oracle, queries: list[str], **knobs: int) -> float:
    found = []
    for query in queries:
        response = server.client.post("/search", json={"query": query, "k": 10, **knobs})
        assert response.status_code == 200, response.text
        ids = {h["id"] for h in response.json()["hits"]}
        found.append(len(ids & set(oracle.top(query, 10)[0])) / 10)
    return float(np.mean(found))


def test_hnsw_is_sensible_and_ef_search_works_per_request(small_world: dict, tmp_path: Path) -> None:
    settings = dict(index_type="hnsw", hnsw_m=8, hnsw_ef_construction=64)
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path, **settings) as s:
        queries = [d.text[:60] for d in small_world["docs"][:40]]
        assert s.client.get("/model").json()["index"]["index_type"] == "hnsw"
        # Lexical candidates and the exact rerank come on top of HNSW's: close to the exact ranking.
        assert recall_at_10(s, small_world["oracle"], queries) >= 0.95
        for bad, message in (({"ef_search": 0}, "ef_search"), ({"nprobe": 4}, "nprobe applies to an ivf index")):
            response = s.client.post("/search", json={"query": "baba", **bad})
            assert response.status_code == 422 and message in response.json()["detail"]


@pytest.fixture(scope="module")
def semantic_only(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A "without identity" model (w = 0): every candidate comes from the embedding index alone."""
    root = tmp_path_factory.mktemp("semantic")
    docs = make_corpus(2500, seed=11, vocab_words=2000)
    corpus = write_corpus(root / "corpus.jsonl", docs)
    bundle = make_bundle(root / "bundle", docs, n_dims=16, form="noidentity")
    return {"docs": docs, "corpus": corpus, "bundle": bundle, "oracle": Oracle(bundle, docs)}


def test_per_request_ef_search_reaches_faiss(semantic_only: dict, tmp_path: Path) -> None:
    # A deliberately weak graph (few links, the L2 reduction), so that the per-request efSearch visibly
    # changes what FAISS finds; on raw inner products this graph is already near 0.9 at efSearch 10.
    settings = dict(
        index_type="hnsw", hnsw_m=8, hnsw_ef_construction=40, hnsw_ef_search=10, candidate_pool=10, hnsw_metric="l2"
    )
    world = semantic_only
    with ThreadServer(bundle=world["bundle"], corpus=world["corpus"], cache_dir=tmp_path, **settings) as s:
        queries = [d.title for d in world["docs"][:60]]
        low = recall_at_10(s, world["oracle"], queries)
        high = recall_at_10(s, world["oracle"], queries, ef_search=800)
        assert high >= 0.95 and high > low + 0.2, (low, high)


def test_ivf_nprobe_works_per_request(semantic_only: dict, tmp_path: Path) -> None:
    world = semantic_only
    settings = dict(index_type="ivf", ivf_nlist=32, ivf_nprobe=1, scan_pool=10)
    with ThreadServer(bundle=world["bundle"], corpus=world["corpus"], cache_dir=tmp_path, **settings) as s:
        assert s.client.get("/model").json()["index"]["nlist"] == 32
        queries = [d.title for d in world["docs"][:60]]
        one = recall_at_10(s, world["oracle"], queries)
        every = recall_at_10(s, world["oracle"], queries, nprobe=32)
        assert every == pytest.approx(1.0) and one < 0.9, (one, every)


@pytest.mark.parametrize("index_type", ["hnsw", "ivf"])
def test_written_rows_are_reranked_from_the_index_and_a_restart_reads_them_back(
    small_world: dict, tmp_path: Path, index_type: str
) -> None:
    """HNSW and IVF hold the only copy of the embeddings (the rerank reads rows back from them): writes,
    a snapshot of the index alone (no embeddings.npy beside it) and a restart from it rank as before."""
    docs = small_world["docs"]
    settings = dict(
        bundle=small_world["bundle"],
        corpus=small_world["corpus"],
        cache_dir=tmp_path,
        api_key=API_KEY,
        index_type=index_type,
        ivf_nlist=8,
        ivf_nprobe=8,
        hnsw_ef_search=400,
        snapshot_every_writes=1,
    )
    fresh = Document("fresh", "Fresh", docs[5].text + " " + docs[6].text)
    queries = [d.text[:60] for d in docs[:30]] + [fresh.text]
    with ThreadServer(**settings) as s:
        written = s.client.post(
            "/documents", json={"documents": [{"id": fresh.id, "title": fresh.title, "text": fresh.text}]}, headers=KEY
        )
        assert written.status_code == 200, written.text
        assert s.client.delete(f"/documents/{docs[7].id}", headers=KEY).status_code == 200
        before = [s.client.post("/search", json={"query": q, "k": 10}).json()["hits"] for q in queries]
    assert all(docs[7].id not in {h["id"] for h in hits} for hits in before)
    assert "fresh" in {h["id"] for h in before[-1]}
    snaps = sorted(p for p in (tmp_path / "index").rglob("snap-*") if p.is_dir())
    assert snaps and (snaps[-1] / "index.faiss").is_file() and not (snaps[-1] / "embeddings.npy").exists()
    with ThreadServer(**settings) as s:
        assert s.ready["collections"]["documents"]["loaded_from"] == "cache"
        # IVF maps the snapshot's lists: shared by the processes that load it, and never written to.
        assert s.client.get("/model").json()["index"]["vectors_shared"] == (index_type == "ivf")
        after = [s.client.post("/search", json={"query": q, "k": 10}).json()["hits"] for q in queries]
        # A write after the load (beside the mapped lists), saved by the next snapshot with the rest.
        late = Document("late", "Late", docs[8].text + " " + docs[9].text)
        body = {"documents": [{"id": late.id, "title": late.title, "text": late.text}]}
        assert s.client.post("/documents", json=body, headers=KEY).status_code == 200
        with_late = [s.client.post("/search", json={"query": q, "k": 10}).json()["hits"] for q in [*queries, late.text]]
    assert [[(h["id"], h["score"]) for h in hits] for hits in after] == [
        [(h["id"], h["score"]) for h in hits] for hits in before
    ]
    assert "late" in {h["id"] for h in with_late[-1]}
    with ThreadServer(**settings) as s:
        assert s.ready["collections"]["documents"]["replayed_on_load"] == 0  # the snapshot holds the late write
        again = [s.client.post("/search", json={"query": q, "k": 10}).json()["hits"] for q in [*queries, late.text]]
    # The same ranking; a score may move in its last float64 bits (a row's l summed in float32 when it came
    # from the posting lists, in float64 when from the pool, and the pools of an HNSW search can differ).
    assert [[h["id"] for h in hits] for hits in again] == [[h["id"] for h in hits] for hits in with_late]
    assert [h["score"] for hits in again for h in hits] == pytest.approx(
        [h["score"] for hits in with_late for h in hits], rel=1e-7
    )
