"""A hybrid bundle (ssi.hybrid: f + λ e(q)·e(d)) on the sharded index: each shard's documents are encoded by the index
build (the in-process build and the Ray Data job's task alike), the router's /search, /similar and /match are the
brute force of the whole f over every shard with the third part apart, and a document written through the router is
encoded on its shard. In process (cluster.fanout.LocalShards): Ray Serve adds nothing here that
tests/cluster/test_cluster_ray.py does not check for every bundle.

The encoder is a tiny random BERT (tests/training/sentence_testing.py), exported and checked by the trainer's code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cluster.index_job import build_index
from cluster.manifest import COLLECTION, read_manifest
from cluster.shard_settings import shard_settings
from cluster.sharding import shard_of
from service.sentence_cache import SentenceCache, encoder_key
from ssi.bundle import load_bundle
from ssi.records import Document
from ssi.sentence import SentenceEncoder, served_precision
from tests.cluster.conftest import jsonl_block
from tests.cluster.router_testing import Router, call
from tests.service.service_testing import (
    Oracle,
    assert_same_ranking,
    hybrid_world,
    probe_queries,
    write_adverts,
)

SHARDS = 3
K = 10
WEIGHT = 3.0  # large beside the random model's parts, so the third part changes rankings


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory) -> dict:
    world = hybrid_world(tmp_path_factory, "cluster-hybrid", 180, WEIGHT)
    world["index"] = world["root"] / "index"
    build_index(world["corpus"], world["bundle"], world["index"], SHARDS, batch_size=50, open_vocab=True)
    return world


def test_the_router_ranks_the_whole_hybrid_score_over_every_shard(hybrid: dict) -> None:
    """/search and /similar: the brute force's top k of f + λ e(q)·e(d) over all documents, each hit's third part
    apart; the third part changes some top k, and no shard encoded a document when it started (the build did)."""
    oracle, plain = Oracle(hybrid["bundle"], hybrid["docs"]), Oracle(hybrid["plain"], hybrid["docs"])
    queries = probe_queries(hybrid["docs"], 8, seed=4)
    assert any(oracle.top(q, K)[0] != plain.top(q, K)[0] for q in queries)
    router = Router(hybrid["index"])
    try:
        for server in router.servers:
            assert server.collection.ready_state().report.encoded == 0
        for query in queries:
            response = call(router, "POST", "/search", json={"query": query, "k": K})
            assert response.status_code == 200, response.text
            hits = response.json()["hits"]
            assert_same_ranking(hits, oracle, query, K)
            assert all(hit["sentence"] is not None for hit in hits)
        doc = hybrid["docs"][17]
        similar = call(router, "GET", f"/documents/{doc.id}/similar", params={"k": K}).json()["hits"]
        assert_same_ranking(similar, oracle, doc.full_text, K, exclude=doc.id)
    finally:
        router.close()


def test_a_document_written_through_the_router_is_encoded_on_its_shard(hybrid: dict, tmp_path: Path) -> None:
    """A document of words the bundle never saw, written through the router: its shard encodes it, and the ranking
    is the brute force's over the collection that holds it."""
    index = tmp_path / "index"
    build_index(hybrid["corpus"], hybrid["bundle"], index, SHARDS, batch_size=50, open_vocab=True)
    new = Document("new-music", "piano violin song", "music note piano song violin")
    router = Router(index, insecure_writes=True)
    try:
        put = call(router, "PUT", f"/documents/{new.id}", json={"title": new.title, "text": new.text})
        assert put.status_code in (200, 201), put.text
        query = "piano music"
        oracle = Oracle(hybrid["bundle"], [*hybrid["docs"], new])
        hits = call(router, "POST", "/search", json={"query": query, "k": 100}).json()["hits"]
        assert_same_ranking(hits, oracle, query, 100)
        assert new.id in oracle.top(query, 100)[0]
        assert next(hit for hit in hits if hit["id"] == new.id)["sentence"] is not None
    finally:
        router.close()


def test_the_ray_data_task_encodes_as_the_in_process_build(hybrid: dict) -> None:
    """The Ray Data job's embedding task (cluster.ray_index.embed_batch, called here without Ray) gives each document
    the vector the in-process build stored in its shard: [V d, λ e(d)]."""
    from cluster.ray_index import embed_batch
    from cluster.shard_build import Block

    rows = embed_batch(jsonl_block(hybrid["corpus"]), str(hybrid["bundle"]), SHARDS, lines=True)
    block = Block.from_columns(rows, vocab_size=load_bundle(hybrid["bundle"]).vocab.size)
    assert block.embeddings.shape == (len(hybrid["docs"]), 8 + 32)
    assert read_manifest(hybrid["index"]).documents == len(hybrid["docs"])
    router = Router(hybrid["index"])
    try:
        for shard, server in enumerate(router.servers):
            state = server.collection.ready_state()
            ids = state.table.doc_ids
            assert set(ids) == {block.ids[i] for i in np.flatnonzero(block.shards == shard)}
            at = np.array([block.ids.index(doc_id) for doc_id in ids])
            stored = state.index.vectors(np.arange(len(ids)))
            # The int8 encoder (the default where its graph passed its check) quantizes a batch's activations with
            # one scale, so a document's e(d) moves with the batch it was encoded in (here ~3e-5): the build and the
            # Ray task batch differently.
            assert np.allclose(stored, block.embeddings[at], atol=2e-4)
    finally:
        router.close()


def test_match_on_a_hybrid_adverts_index_is_the_brute_force_over_every_shard(hybrid: dict, tmp_path: Path) -> None:
    """/match on the router over an adverts index built with the hybrid bundle: each page's adverts are the brute
    force's top k of the whole f, with their third part."""
    ads = write_adverts(tmp_path / "ads.jsonl", hybrid["docs"])
    index = tmp_path / "ads-index"
    build_index(ads, hybrid["bundle"], index, SHARDS, batch_size=50, collection_type="adverts", open_vocab=True)
    oracle = Oracle(hybrid["bundle"], hybrid["docs"])
    pages = [" ".join(doc.full_text for doc in hybrid["docs"][i : i + 3]) for i in (0, 60, 120)]
    router = Router(index)
    try:
        response = call(router, "POST", "/match", json={"pages": pages, "k": K})
        assert response.status_code == 200, response.text
        for page, result in zip(pages, response.json()["results"], strict=True):
            assert_same_ranking(result["ads"], oracle, page, K)
            assert all(hit["sentence"] is not None for hit in result["ads"])
    finally:
        router.close()


def test_the_graph_asked_of_the_index_job_encodes_every_shard_and_keys_its_snapshot(
    hybrid: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ssi index --encoder-precision` (SSI_ENCODER_PRECISION): the job and its Ray task encode with the graph asked
    (here the one this machine would not serve by default), the manifest's tag names it, and shards served with the
    same setting start from the job's snapshots, encoding nothing."""
    from cluster.ray_index import embed_batch
    from cluster.shard_build import Block

    bundle = load_bundle(hybrid["bundle"])
    assert bundle.sentence is not None
    default = served_precision(bundle.sentence_path, bundle.sentence, None)
    asked = "int8" if default == "fp32" else "fp32"
    index = tmp_path / "index"
    manifest = build_index(
        hybrid["corpus"], hybrid["bundle"], index, SHARDS, batch_size=50, open_vocab=True, precision=asked
    )
    assert manifest.index_tag == ("flat" if asked == bundle.sentence.precision else f"flat-sentence{asked}")
    blocks = {
        p: Block.from_columns(
            embed_batch(jsonl_block(hybrid["corpus"]), str(hybrid["bundle"]), SHARDS, lines=True, precision=p),
            vocab_size=bundle.vocab.size,
        )
        for p in (asked, default)
    }
    # int8 gives a batch's activations one scale, so e(d) moves with the batch (~3e-4 here, times λ): far less than
    # the distance between the two graphs' vectors, which the last assertion requires.
    tolerance = WEIGHT * 1e-3
    # Each shard's sentence cache holds e(d) of its documents, from the job's vectors: a later build there (a reload
    # to another bundle with this encoder) encodes none of them.
    encoder = SentenceEncoder(bundle.sentence_path, 1, asked)
    for entry in manifest.entries:
        folder = shard_settings(index / entry.folder, hybrid["bundle"]).index_dir / COLLECTION
        cache = SentenceCache(folder, encoder_key(bundle, asked), encoder.dims, _never)
        docs = [d for d in hybrid["docs"] if shard_of(d.id, SHARDS) == entry.shard]
        texts = [d.full_text for d in docs]
        kept = cache.vectors(texts)
        assert cache.counts.encoded == 0 and len(texts) == entry.documents > 0
        assert np.abs(kept - encoder.encode(texts)).max() < 1e-3
    monkeypatch.setenv("SSI_ENCODER_PRECISION", asked)
    router = Router(index)
    try:
        for server in router.servers:
            state = server.collection.ready_state()
            assert state.report.encoded == 0 and state.report.source == "cache"
            at = np.array([blocks[asked].ids.index(doc_id) for doc_id in state.table.doc_ids])
            stored = state.index.vectors(np.arange(len(at)))
            assert np.abs(stored - blocks[asked].embeddings[at]).max() < tolerance
            assert np.abs(stored - blocks[default].embeddings[at]).max() > tolerance
    finally:
        router.close()


def _never(texts: list[str]) -> np.ndarray:
    raise AssertionError(f"{len(texts)} texts encoded: the sentence cache should have held them")
