"""A hybrid bundle served (ssi.hybrid: f + λ e(q)·e(d)): exact against brute force, the third part shown apart,
written documents encoded on write, and a bundle without an encoder served as before.

The encoder is a tiny random BERT in sentence-transformers' layout (tests/training/sentence_testing.py),
exported and checked by the trainer's own code (training.sentence_export), run by onnxruntime in a real server.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from service_testing import (
    CUT_DIMS,
    Oracle,
    ThreadServer,
    assert_same_ranking,
    hybrid_world,
    make_bundle,
    make_sentence_encoder,
    probe_queries,
    write_adverts,
    write_corpus,
)

import ssi.sentence
from service.catalog import Catalog
from service.embedding import Embedder
from service.metrics import Metrics
from service.query_vectors import DEFAULT_SIZE, QueryCacheCollector, QueryVectorCache
from service.server import preflight
from service.settings import Settings
from service.state_builder import index_config, keyed_precision
from ssi.bundle import load_bundle
from ssi.sentence import (
    INT8_MODEL_FILE,
    PRECISIONS,
    SPEC_FILE,
    SentenceEncoder,
    SentenceError,
    available_devices,
    read_spec,
)

K = 10
POOL = 16
KEY = "hybrid-test-key-0123"
WEIGHT = 3.0  # large beside the random model's parts, so the third part changes rankings


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return hybrid_world(tmp_path_factory, "hybrid", 240, WEIGHT)


@pytest.mark.parametrize("scan_pool", [POOL, 1024])
def test_a_hybrid_bundle_is_served_exactly_with_its_third_part_apart(world: dict, tmp_path: Path, scan_pool: int):
    """Both routes of the exact ranking (a FAISS pool smaller than the collection, and every row), /search and
    /similar, and filtered searches (service.fields: the index with a selector for a broad filter, an exact scan
    for a narrow one); the sentence part must change some top k, or the test would not test it."""
    oracle, plain = Oracle(world["bundle"], world["docs"]), Oracle(world["plain"], world["docs"])
    queries = probe_queries(world["docs"], 10, seed=4)
    assert any(oracle.top(q, K)[0] != plain.top(q, K)[0] for q in queries)
    # The same documents with fields (never featurized): their scores are the oracle's.
    fielded = [replace(d, fields={"bucket": i % 25}) for i, d in enumerate(world["docs"])]
    corpus = write_corpus(tmp_path / "fielded.jsonl", fielded)
    settings = {"bundle": world["bundle"], "corpus": corpus, "cache_dir": tmp_path / "cache"}
    plan = {"filter_exact_docs": 0, "filter_exact_fraction": 0.05}
    with ThreadServer(**settings, scan_pool=scan_pool, **plan) as server:
        model = server.client.get("/model").json()
        assert model["index_dims"] == 8 + 32
        for query in queries:
            response = server.client.post("/search", json={"query": query, "k": K})
            assert response.status_code == 200, response.text
            hits = response.json()["hits"]
            assert_same_ranking(hits, oracle, query, K)
            assert all(0.0 < abs(hit["sentence"]) <= WEIGHT + 1e-4 for hit in hits)
        for low in (12, 24):  # about half of the documents, then 4 %
            among = {d.id for d in fielded if d.fields and d.fields["bucket"] >= low}
            for query in queries[:4]:
                body = {"query": query, "k": K, "filter": {"range": {"bucket": {"gte": low}}}}
                response = server.client.post("/search", json=body)
                assert response.status_code == 200, response.text
                assert_same_ranking(response.json()["hits"], oracle, query, K, among=among)
        for doc in world["docs"][::40]:
            response = server.client.get("/documents/" + quote(doc.id, safe="") + "/similar", params={"k": K})
            assert response.status_code == 200, response.text
            assert_same_ranking(response.json()["hits"], oracle, doc.full_text, K, exclude=doc.id)


def test_a_bundle_with_its_vectors_cut_is_served_exactly_by_them(world: dict, tmp_path: Path) -> None:
    """`ssi train --sentence-dims` (ssi.sentence.Projection): the index holds the cut vectors (8 of the tiny encoder's
    32), queries are cut alike, and /search and /similar are the brute force of the bundle's score, which differs
    from the whole vectors'."""
    cut, whole = Oracle(world["cut"], world["docs"]), Oracle(world["bundle"], world["docs"])
    queries = probe_queries(world["docs"], 8, seed=11)
    assert any(cut.top(q, K)[0] != whole.top(q, K)[0] for q in queries)
    with ThreadServer(bundle=world["cut"], corpus=world["corpus"], cache_dir=tmp_path / "cache") as server:
        assert server.client.get("/model").json()["index_dims"] == 8 + CUT_DIMS
        for query in queries:
            response = server.client.post("/search", json={"query": query, "k": K})
            assert response.status_code == 200, response.text
            assert_same_ranking(response.json()["hits"], cut, query, K)
        for doc in world["docs"][::60]:
            response = server.client.get("/documents/" + quote(doc.id, safe="") + "/similar", params={"k": K})
            assert response.status_code == 200, response.text
            assert_same_ranking(response.json()["hits"], cut, doc.full_text, K, exclude=doc.id)


def test_a_written_document_is_encoded_on_write_and_a_restart_reuses_the_index(world: dict, tmp_path: Path):
    """PUT a document whose words no query shares: only its sentence vector can find it, and its score is the
    brute force's over the collection with it; after a restart the index is loaded, not recomputed."""
    settings = {"bundle": world["bundle"], "corpus": world["corpus"], "cache_dir": tmp_path / "cache", "api_key": KEY}
    new = {"title": "piano violin song", "text": "music note piano song violin"}
    with ThreadServer(**settings) as server:
        put = server.client.put("/documents/new-music", json=new, headers={"X-API-Key": KEY})
        assert put.status_code in (200, 201), put.text
        hits = server.client.post("/search", json={"query": "piano music", "k": 100}).json()["hits"]
        found = {hit["id"]: hit for hit in hits}
        assert "new-music" in found and found["new-music"]["sentence"] is not None
        # Asked again (spelt otherwise, the same to the tokenizer): e(q) from the query cache, the same answer.
        again = server.client.post("/search", json={"query": " Piano  MUSIC", "k": 100}).json()["hits"]
        assert again == hits
        metrics = server.client.get("/metrics").text
        assert "ssi_query_cache_hits_total 1.0" in metrics and "ssi_query_cache_misses_total 1.0" in metrics
    from ssi.records import Document

    oracle = Oracle(world["bundle"], [*world["docs"], Document(id="new-music", **new)])
    expected = oracle.scores("piano music")[-1]
    assert found["new-music"]["score"] == pytest.approx(expected, abs=1e-4 * max(1.0, abs(expected)))
    with ThreadServer(**settings) as server:
        loaded = server.client.get("/readyz").json()["collections"]["documents"]
        assert loaded["embedded_on_load"] == 0
        again = server.client.post("/search", json={"query": "piano music", "k": 100}).json()["hits"]
        assert {hit["id"]: hit["score"] for hit in again}["new-music"] == pytest.approx(found["new-music"]["score"])


def test_a_bundle_without_an_encoder_answers_as_before(world: dict, tmp_path: Path) -> None:
    with ThreadServer(bundle=world["plain"], corpus=world["corpus"], cache_dir=tmp_path / "cache") as server:
        hits = server.client.post("/search", json={"query": world["docs"][0].title, "k": 5}).json()["hits"]
    assert hits and all(hit["sentence"] is None for hit in hits)
    manifest = (world["plain"] / "manifest.json").read_text(encoding="utf-8")
    assert '"sentence"' not in manifest and not (world["plain"] / "sentence").exists()
    assert np.isfinite([hit["score"] for hit in hits]).all()


@pytest.fixture(scope="module")
def query_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's query model for the tiny encoder (made and exported once per run, shared with the training tests)."""
    from tests.training.sentence_testing import exported_query_model

    return exported_query_model(tmp_path_factory)


@pytest.fixture(scope="module")
def static_query_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A static query graph for the tiny encoder (training.static_query), distilled on texts of its words."""
    from tests.training.sentence_testing import WORDS, exported_tiny_encoder
    from training.static_query import static_query_model as distil

    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 9)))) for _ in range(300)]
    out = tmp_path_factory.mktemp("static-queries") / "model"
    distil(exported_tiny_encoder(tmp_path_factory).model, out, texts, epochs=3, threads=1)
    return out


@pytest.mark.parametrize("kind", ["first layer", "static"])
def test_a_query_graph_encodes_the_queries_and_the_encoder_the_documents(
    world: dict, kind: str, request: pytest.FixtureRequest, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A bundle with a query graph (`ssi train --query-model`: the encoder's first layer, or a static table,
    training.static_query): /search is the brute force's with e(q) by the query graph and e(d) by the encoder, each
    hit's third part λ e_query(q)·e(d); SSI_QUERY_GRAPH=document serves the encoder's e(q) from the same bundle and
    index."""
    from training.sentence_export import add_query_graph

    folder = make_sentence_encoder(tmp_path_factory, tmp_path, "sentence", WEIGHT)
    add_query_graph(folder, request.getfixturevalue("query_model" if kind == "first layer" else "static_query_model"))
    bundle = make_bundle(tmp_path / "bundle", world["docs"], n_dims=8, seed=2, lexical="bm25", sentence=folder)
    by_query = Oracle(bundle, world["docs"])
    by_document = Oracle(bundle, world["docs"], query_graph="document")
    queries = probe_queries(world["docs"], 6, seed=7)
    assert any(not np.allclose(by_query.scores(q), by_document.scores(q), atol=1e-4) for q in queries)
    settings = {"bundle": bundle, "corpus": world["corpus"], "cache_dir": tmp_path / "cache"}
    for graph, oracle in (("query", by_query), ("document", by_document)):
        with ThreadServer(**settings, query_graph=graph) as server:
            for query in queries:
                response = server.client.post("/search", json={"query": query, "k": K})
                assert response.status_code == 200, response.text
                assert_same_ranking(response.json()["hits"], oracle, query, K)
            loaded = server.client.get("/readyz").json()["collections"]["documents"]
            assert loaded["embedded_on_load"] == (len(world["docs"]) if graph == "query" else 0)  # one index for both


def test_match_on_a_hybrid_adverts_collection_is_exact_with_its_third_part_apart(world: dict, tmp_path: Path):
    """An adverts collection served with a hybrid bundle (it answered 500 before: the explanation multiplied the
    index rows [V d, λ e(d)] by the query map of V d alone): each page's adverts are the brute force's top k of the
    whole f, and each hit's parts, the third one included, add up to its score."""

    from service.settings import CollectionSpec

    ads = write_adverts(world["root"] / "ads.jsonl", world["docs"])
    spec = CollectionSpec(bundle=world["bundle"], corpus=ads, type="adverts")
    oracle = Oracle(world["bundle"], world["docs"])
    pages = [" ".join(doc.full_text for doc in world["docs"][i : i + 3]) for i in (0, 50, 100)]
    settings = {"bundle": world["bundle"], "corpus": world["corpus"], "cache_dir": tmp_path / "cache"}
    with ThreadServer(**settings, api_key=KEY, collections={"ads": spec}) as server:
        response = server.client.post("/collections/ads/match", json={"pages": pages, "k": K})
        assert response.status_code == 200, response.text
        for page, result in zip(pages, response.json()["results"], strict=True):
            assert_same_ranking(result["ads"], oracle, page, K)
            assert all(hit["sentence"] is not None for hit in result["ads"])


def test_the_start_up_encoder_gives_the_serving_encoders_vectors(world: dict) -> None:
    """A first load encodes the documents with every core (Embedder.start_up_encoder), the serving encoder with
    SSI_THREADS: the vectors must be the same, or the index would not rank what a write's encoding ranks."""
    embedder = Embedder(load_bundle(world["bundle"]), 1)
    assert embedder.sentence is not None
    texts = [d.full_text for d in world["docs"][:40]]
    np.testing.assert_allclose(embedder.start_up_encoder(2)(texts), embedder.sentence.encode(texts), atol=1e-5)
    assert embedder.start_up_encoder(1) == embedder.sentence.encode  # no second encoder where it adds no thread
    with pytest.raises(RuntimeError, match="no e\\(d\\)"):
        Embedder(load_bundle(world["plain"]), 1).start_up_encoder(2)


def _old_bundle(world: dict, folder: Path) -> Path:
    """The world's hybrid bundle as one written before int8 graphs: no int8 graph, no `precision` or `int8` keys in its
    sentence.json or its manifest."""
    sentence = shutil.copytree(
        load_bundle(world["bundle"]).sentence_path, folder / "sentence", copy_function=shutil.copyfile
    )
    (sentence / INT8_MODEL_FILE).unlink()
    (sentence / SPEC_FILE).write_text(read_spec(sentence).model_dump_json(indent=2, exclude={"precision", "int8"}))
    old = make_bundle(folder / "bundle", world["docs"], n_dims=8, seed=2, lexical="bm25", sentence=sentence)
    manifest = json.loads((old / "manifest.json").read_text(encoding="utf-8"))
    for key in ("precision", "int8"):
        del manifest["sentence"][key]
    (old / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return old


def test_the_precision_asked_is_served_and_an_old_bundle_serves_fp32_and_says_so(
    world: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSI_ENCODER_PRECISION picks the graph (default: the bundle's, int8 as the export chose), and keys the sentence
    and query caches and the index snapshots apart where it is not the bundle's own; a bundle written before int8
    graphs loads, and int8 asked of it serves fp32 with a warning naming why."""
    monkeypatch.setattr(ssi.sentence, "int8_instructions", lambda: "avx512_vnni")  # a CPU where int8 pays
    bundle = load_bundle(world["bundle"])
    texts = [d.full_text for d in world["docs"][:8]]
    default, fp32 = Embedder(bundle, 1), Embedder(bundle, 1, precision="fp32")
    assert default.sentence is not None and fp32.sentence is not None
    assert (default.sentence.precision, fp32.sentence.precision) == ("int8", "fp32")
    by_fp32 = fp32.sentence.encode(texts)
    np.testing.assert_array_equal(by_fp32, SentenceEncoder(bundle.sentence_path, 1, "fp32").encode(texts))
    assert not np.array_equal(by_fp32, default.sentence.encode(texts))
    assert fp32.sentence_key != default.sentence_key
    settings = Settings(bundle=world["bundle"], cache_dir=tmp_path / "cache")
    tags = {p: index_config(settings, keyed_precision(Embedder(bundle, 1, precision=p))).tag() for p in PRECISIONS}
    # int8 asked is the bundle's own graph: the default's snapshots (no second index of the same vectors)
    assert tags == {"fp32": "flat-sentencefp32", "int8": "flat"} and keyed_precision(default) is None
    old = load_bundle(_old_bundle(world, tmp_path))
    with caplog.at_level(logging.WARNING, logger="ssi.sentence"):
        fallen = Embedder(old, 1, precision="int8")
    assert fallen.sentence is not None and fallen.sentence.precision == "fp32"
    assert "int8 asked, but this encoder has no int8 graph" in caplog.text and "serving fp32" in caplog.text
    np.testing.assert_array_equal(fallen.sentence.encode(texts), by_fp32)


def test_a_cpu_without_fast_int8_serves_fp32_unless_int8_is_asked(
    world: dict, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the CPU has none of the instructions int8 products are fast with, the bundle's int8 serves as fp32 and
    the start says so (its snapshots keyed apart: another machine may serve int8 from the same bundle); int8 asked
    is served, with a warning that it may be no faster."""
    monkeypatch.setattr(ssi.sentence, "int8_instructions", lambda: None)
    bundle = load_bundle(world["bundle"])
    with caplog.at_level(logging.WARNING, logger="ssi.sentence"):
        default = Embedder(bundle, 1)
    assert default.sentence is not None and default.sentence.precision == "fp32"
    assert "serving the fp32 graph" in caplog.text and keyed_precision(default) == "fp32"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ssi.sentence"):
        asked = Embedder(bundle, 1, precision="int8")
    assert asked.sentence is not None and asked.sentence.precision == "int8" and keyed_precision(asked) is None
    assert "int8 may be no faster" in caplog.text


def test_the_query_cache_gives_the_encoders_vectors_counts_and_keeps_its_bound(world: dict, tmp_path: Path) -> None:
    """A hit is the very vector a miss encodes; texts the tokenizer reads alike share an entry, another encoder's key
    does not; the least recently used entry goes first; /metrics reads its counts; SSI_QUERY_CACHE_SIZE=0: no cache."""
    cache = QueryVectorCache(2)
    embedder = Embedder(load_bundle(world["bundle"]), 1, query_cache=cache)
    assert embedder.sentence is not None
    key, encoder = embedder.sentence_key, embedder.sentence
    texts = ["piano song", "the star", "bread oven"]
    want = encoder.encode(texts)
    np.testing.assert_array_equal(cache.vectors(key, encoder, texts), want)
    assert (cache.counts.hits, cache.counts.misses, len(cache)) == (0, 3, 2)  # "piano song" went out first
    np.testing.assert_array_equal(cache.vectors(key, encoder, ["bread oven", " The  STAR"]), want[[2, 1]])
    assert (cache.counts.hits, cache.counts.misses) == (2, 3)
    cache.vectors("another encoder", encoder, ["bread oven"])
    rows = embedder.featurize_queries(["the star"])
    np.testing.assert_array_equal(embedder.embed_queries(rows, ["the star"])[0, -encoder.dims :], want[1])
    assert (cache.counts.hits, cache.counts.misses, cache.counts.entries) == (3, 4, 2)
    assert 0 < cache.counts.bytes <= 2 * 1000
    registry = CollectorRegistry()
    registry.register(QueryCacheCollector(cache))
    scraped = generate_latest(registry).decode()
    assert "ssi_query_cache_hits_total 3.0" in scraped and "ssi_query_cache_entries 2.0" in scraped
    settings = {"bundle": world["bundle"], "corpus": world["corpus"], "cache_dir": tmp_path / "cache"}
    assert Catalog(Settings(**settings), Metrics()).query_cache.size == DEFAULT_SIZE  # type: ignore[union-attr]
    metrics = Metrics()
    assert Catalog(Settings(**settings, query_cache_size=0), metrics).query_cache is None
    assert "ssi_query_cache" not in generate_latest(metrics.registry).decode()


def test_documents_are_encoded_on_the_device_asked_and_cuda_without_its_provider_is_refused(world: dict) -> None:
    """SSI_ENCODE_DEVICE: auto encodes a first build's e(d) on a GPU where onnxruntime has its CUDA provider, else on
    the CPU, with the vectors the serving encoder gives; cuda asked where there is none is refused before the server
    starts, naming what to install."""
    bundle = load_bundle(world["bundle"])
    embedder = Embedder(bundle, 1)
    assert embedder.sentence is not None
    texts = [d.full_text for d in world["docs"][:6]]
    encode = embedder.start_up_encoder(2, "auto")
    assert encode is not embedder.sentence.encode  # its own encoder, loaded at its first call
    assert np.allclose(encode(texts), embedder.sentence.encode(texts), atol=1e-5)
    auto = SentenceEncoder(bundle.sentence_path, 1, device="auto")
    assert auto.device == ("cuda" if "cuda" in available_devices() else "cpu")
    if "cuda" in available_devices():
        pytest.skip("this onnxruntime has a CUDA provider: cuda is not refused here")
    with pytest.raises(SentenceError, match="onnxruntime-gpu"):
        SentenceEncoder(bundle.sentence_path, 1, device="cuda")
    with pytest.raises(ValueError, match="SSI_ENCODE_DEVICE=cuda"):
        preflight(Settings(bundle=world["bundle"], encode_device="cuda"))
