"""Documents' sentence vectors kept across hybrid bundles with the same encoder (service.sentence_cache).

A reload to another hybrid bundle with the same encoder (another λ, another form: a promotion of the click-learning
loop) encodes no document and ranks as brute force does; another encoder's vectors, or a damaged file, are never
used. The servers run the tiny random BERT of tests/training/sentence_testing.py; the unit tests a fake encoder.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from service_testing import (
    API_KEY,
    CUT_DIMS,
    Oracle,
    ThreadServer,
    assert_same_ranking,
    make_bundle,
    make_corpus,
    make_sentence_encoder,
    probe_queries,
    write_corpus,
)

from service.sentence_cache import (
    FANOUT,
    KEEP_ENCODERS,
    SentenceCache,
    Uncut,
    encoder_key,
    read_segment,
    text_digests,
)
from service.snapshot import SENTENCE_CACHE_DIR
from ssi.bundle import load_bundle
from ssi.records import Document
from ssi.sentence import (
    INT8_MODEL_FILE,
    MODEL_FILE,
    SentenceEncoder,
    project,
    read_spec,
    served_precision,
    write_spec,
)
from training.sentence_export import quantize_encoder
from training.sentence_projection import add_projection

K = 10
POOL = 16
KEY = {"X-API-Key": API_KEY}
NEW = Document(id="new-music", title="piano violin song", text="music note piano song violin")


def _reweighed(encoder: Path, folder: Path, weight: float) -> Path:
    """The same encoder's files with another λ (sentence.json differs: so does the bundle's content hash)."""
    shutil.copytree(encoder, folder)
    write_spec(folder, read_spec(folder).with_weight(weight, "test"))
    return folder


def _other_weights(encoder: Path, folder: Path) -> Path:
    """Another encoder e: the same files with every weight of the graph moved by noise of its own scale (another
    graph file, so another sha256; other vectors), and its int8 graph quantized again, without a second export."""
    import onnx
    from onnx import numpy_helper

    shutil.copytree(encoder, folder)
    graph_file = folder / MODEL_FILE
    model = onnx.load(graph_file)
    rng = np.random.default_rng(1)
    for init in model.graph.initializer:
        weights = numpy_helper.to_array(init)
        if weights.dtype == np.float32 and weights.size > 1:
            moved = weights + rng.standard_normal(weights.shape).astype(np.float32) * 0.5 * float(weights.std())
            init.CopyFrom(numpy_helper.from_array(moved, init.name))
    graph_file.chmod(0o644)
    onnx.save(model, graph_file)
    (folder / INT8_MODEL_FILE).chmod(0o644)
    write_spec(folder, read_spec(folder).model_copy(update={"int8": quantize_encoder(folder)}))  # its int8 graph too
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("sentence-cache")
    docs = make_corpus(240, seed=5, vocab_words=300)
    encoder = make_sentence_encoder(tmp_path_factory, root, "sentence-a", 3.0)
    bundles = root / "bundles"
    first = make_bundle(bundles / "first", docs, n_dims=8, seed=2, lexical="bm25", sentence=encoder)
    reweighed = _reweighed(encoder, root / "sentence-a-half", 1.5)
    second = make_bundle(bundles / "second", docs, n_dims=12, seed=7, lexical="bm25", sentence=reweighed)
    cut_encoder = _reweighed(encoder, root / "sentence-a-cut", 2.0)  # `ssi train --sentence-dims` of the same graph
    add_projection(cut_encoder, [d.full_text for d in docs], CUT_DIMS)
    cut = make_bundle(bundles / "cut", docs, n_dims=8, seed=3, lexical="bm25", sentence=cut_encoder)
    return {"root": root, "docs": docs, "corpus": write_corpus(root / "corpus.jsonl", docs), "bundles": bundles,
            "first": first, "second": second, "cut": cut}  # fmt: skip


def _loaded(server: ThreadServer) -> dict:
    return server.client.get("/readyz").json()["collections"]["documents"]


def _check(server: ThreadServer, oracle: Oracle, queries: list[str]) -> None:
    for query in queries:
        response = server.client.post("/search", json={"query": query, "k": K})
        assert response.status_code == 200, response.text
        assert_same_ranking(response.json()["hits"], oracle, query, K)


def _key(bundle: Path) -> str:
    """The encoder key of the graph a server on this machine serves from `bundle` (ssi.sentence.served_precision)."""
    loaded = load_bundle(bundle)
    assert loaded.sentence is not None
    return encoder_key(loaded, served_precision(loaded.sentence_path, loaded.sentence, None))


def _segments(cache_dir: Path, bundle: Path) -> list[Path]:
    folder = cache_dir / "index" / "documents" / SENTENCE_CACHE_DIR / _key(bundle)[:16]
    return sorted(folder.glob("seg-*.vec"))


def test_a_reload_to_another_bundle_with_the_same_encoder_encodes_no_document(world: dict, tmp_path: Path) -> None:
    """First bundle: every document encoded, and a written one; the second (another λ and form): none encoded, its
    ranking the brute force's over them all, λ e(d) with its own λ. Then a bundle whose encoder is the same graph with
    its vectors cut (`ssi train --sentence-dims`): none encoded either, the kept vectors cut as the encoder cuts its
    own (ranking the cut bundle's brute force, which encodes all 241 in other batches than the server did: a text's
    vector does not depend on its batch, training.token_quantization); its own folder then holds them cut, and the
    folders of the whole vectors are left as they were. One server for the three, to spare a first start."""
    cache = tmp_path / "cache"
    settings = {"bundle": world["first"], "corpus": world["corpus"], "cache_dir": cache}
    docs = [*world["docs"], NEW]
    queries = [*probe_queries(world["docs"], 8, seed=4), "piano music"]
    with ThreadServer(**settings, api_key=API_KEY, scan_pool=POOL) as server:
        first = _loaded(server)
        assert (first["encoded_on_load"], first["sentence_cached_on_load"]) == (240, 0)
        put = server.client.put(f"/documents/{NEW.id}", json={"title": NEW.title, "text": NEW.text}, headers=KEY)
        assert put.status_code in (200, 201), put.text
        response = server.client.post("/admin/reload", json={"bundle": str(world["second"])}, headers=KEY)
        assert response.status_code == 200, response.text
        assert response.json()["loaded_from"] == "computed"  # no snapshot of the second bundle: its own V d
        second = _loaded(server)
        assert (second["encoded_on_load"], second["sentence_cached_on_load"]) == (0, 241)
        assert second["content_hash"] == load_bundle(world["second"]).content_hash
        _check(server, Oracle(world["second"], docs), queries)
        # The build left one segment: exactly its documents.
        (segment,) = _segments(cache, world["second"])
        assert segment.name.startswith("seg-0000000241-")
        whole = {path.name: path.stat().st_mtime_ns for path in cache.rglob("seg-*.vec")}
        response = server.client.post("/admin/reload", json={"bundle": str(world["cut"])}, headers=KEY)
        assert response.status_code == 200, response.text
        cut = _loaded(server)
        assert (cut["encoded_on_load"], cut["sentence_cached_on_load"]) == (0, 241)
        _check(server, Oracle(world["cut"], docs), probe_queries(world["docs"], 8, seed=6))
    (segment,) = _segments(cache, world["cut"])
    assert {path.name: path.stat().st_mtime_ns for path in cache.rglob("seg-*.vec") if path != segment} == whole
    kept = read_segment(segment, _key(world["cut"]), CUT_DIMS)
    encoder = SentenceEncoder(load_bundle(world["cut"]).sentence_path)
    texts = [d.full_text for d in docs]
    order = np.argsort(text_digests(texts), kind="stable")  # the segment's sorted keys are the texts' digests
    np.testing.assert_allclose(kept.vectors[kept.order], encoder.encode(texts)[order], atol=1e-5)


def test_another_encoders_vectors_are_not_used(
    world: dict, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """An encoder with other files has its own folder; even another encoder's file put into that folder is refused
    (its trailer names its encoder), and every document is encoded by the new one: the ranking is exact.

    Slow: two servers, one after the other, each encoding every document with its own encoder."""
    cache = tmp_path / "cache"
    with ThreadServer(bundle=world["first"], corpus=world["corpus"], cache_dir=cache) as server:
        assert _loaded(server)["encoded_on_load"] == 240
    other = make_bundle(
        world["bundles"] / "other-encoder", world["docs"], n_dims=8, seed=2, lexical="bm25",
        sentence=_other_weights(make_sentence_encoder(tmp_path_factory, tmp_path, "sentence-a", 3.0), tmp_path / "b"),
    )  # fmt: skip
    assert _key(other) != _key(world["first"])
    (foreign,) = _segments(cache, world["first"])
    planted = cache / "index" / "documents" / SENTENCE_CACHE_DIR / _key(other)[:16] / foreign.name
    planted.parent.mkdir(parents=True)
    shutil.copyfile(foreign, planted)
    with caplog.at_level(logging.WARNING, logger="service.sentence_cache"):
        with ThreadServer(bundle=other, corpus=world["corpus"], cache_dir=cache) as server:
            loaded = _loaded(server)
            assert (loaded["encoded_on_load"], loaded["sentence_cached_on_load"]) == (240, 0)
            _check(server, Oracle(other, world["docs"]), probe_queries(world["docs"], 8, seed=6))
    assert any("another encoder's vectors" in r.getMessage() for r in caplog.records)
    assert not planted.exists() and foreign.exists()  # the first encoder's own stays (KEEP_ENCODERS)


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
def test_a_damaged_cache_file_is_ignored(
    world: dict, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A byte of a vector changed (the trailer intact) or the file cut short: logged, removed, every document
    encoded again, the ranking exact."""
    cache = tmp_path / "cache"
    with ThreadServer(bundle=world["first"], corpus=world["corpus"], cache_dir=cache):
        pass
    (segment,) = _segments(cache, world["first"])
    data = bytearray(segment.read_bytes())
    if damage == "flipped":
        data[100] ^= 0x40  # in the first row's vector
    else:
        del data[len(data) // 2 :]
    damaged = segment.with_name("damaged")
    damaged.write_bytes(bytes(data))
    damaged.replace(segment)  # a new file: the first server's mapping of the old one stays whole
    with caplog.at_level(logging.WARNING, logger="service.sentence_cache"):
        with ThreadServer(bundle=world["second"], corpus=world["corpus"], cache_dir=cache, scan_pool=POOL) as server:
            loaded = _loaded(server)
            assert (loaded["encoded_on_load"], loaded["sentence_cached_on_load"]) == (240, 0)
            _check(server, Oracle(world["second"], world["docs"]), probe_queries(world["docs"], 6, seed=8))
    why = "do not match the sha256" if damage == "flipped" else "no segment trailer"
    assert any(f"ignoring sentence cache file {segment}" in r.getMessage() and why in r.getMessage()
               for r in caplog.records)  # fmt: skip
    assert not segment.exists() and len(_segments(cache, world["second"])) == 1


def test_a_bundle_without_an_encoder_leaves_the_cache_alone(world: dict, tmp_path: Path) -> None:
    plain = make_bundle(world["bundles"] / "plain", world["docs"], n_dims=8, seed=2, lexical="bm25")
    cache = tmp_path / "cache"
    with ThreadServer(bundle=world["first"], corpus=world["corpus"], cache_dir=cache):
        pass
    before = {p: p.stat().st_mtime_ns for p in (cache / "index" / "documents" / SENTENCE_CACHE_DIR).rglob("*")}
    with ThreadServer(bundle=plain, corpus=world["corpus"], cache_dir=cache) as server:
        loaded = _loaded(server)
        assert "encoded_on_load" not in loaded and loaded["embedded_on_load"] == 240
    after = {p: p.stat().st_mtime_ns for p in (cache / "index" / "documents" / SENTENCE_CACHE_DIR).rglob("*")}
    assert after == before


# -- the cache alone, with a fake encoder ------------------------------------------------------------------------

DIMS = 4


class FakeEncoder:
    """e(text): a vector from the text's hash; counts the texts it was asked for."""

    def __init__(self, salt: str = "") -> None:
        self.salt = salt
        self.asked: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.asked.extend(texts)
        seeds = [int.from_bytes(hashlib.sha256((self.salt + t).encode()).digest()[:8], "little") for t in texts]
        return np.array([np.random.default_rng(s).standard_normal(DIMS) for s in seeds], dtype=np.float32)


def _cache(root: Path, encode: FakeEncoder, key: str = "a" * 64) -> SentenceCache:
    return SentenceCache(root, key, DIMS, encode)


def test_vectors_are_kept_on_disk_and_read_back_exactly(tmp_path: Path) -> None:
    texts = [f"text {i}" for i in range(50)]
    encode = FakeEncoder()
    with _cache(tmp_path, encode).build() as build:
        first = np.vstack([build.vectors(texts[:30]), build.vectors(texts[30:])])
    again = FakeEncoder()
    reopened = _cache(tmp_path, again)  # another process, or the next bundle's state
    np.testing.assert_array_equal(reopened.vectors([*texts[::-1], "new"])[:-1], first[::-1])
    assert again.asked == ["new"] and (reopened.counts.encoded, reopened.counts.cached) == (1, 50)
    # A third cache sees the written one too; a cache of another key sees nothing.
    assert _cache(tmp_path, FakeEncoder()).vectors(["new"]) == pytest.approx(again(["new"]))
    other = FakeEncoder("other")
    _cache(tmp_path, other, key="b" * 64).vectors(texts[:3])
    assert other.asked == texts[:3]


def test_writes_keep_a_logarithmic_number_of_segments_and_a_build_replaces_them(tmp_path: Path) -> None:
    encode = FakeEncoder()
    cache = _cache(tmp_path, encode)
    for i in range(120):  # one document a write
        cache.vectors([f"written {i}"])
    files = sorted(cache.folder.glob("seg-*.vec"))
    assert len(files) <= (FANOUT - 1) * 4  # tiers of 1, 4, 16 and 64 rows
    assert sum(read_segment(f, cache.key, DIMS).rows for f in files) == 120
    fresh = FakeEncoder()
    with _cache(tmp_path, fresh).build() as build:
        build.vectors([f"written {i}" for i in range(0, 120, 2)])  # the other half was replaced or deleted since
    (only,) = cache.folder.glob("seg-*.vec")
    assert read_segment(only, cache.key, DIMS).rows == 60 and fresh.asked == []


def test_only_the_latest_encoders_folders_are_kept(tmp_path: Path) -> None:
    for n, key in enumerate("abcd"):
        with _cache(tmp_path, FakeEncoder(key), key=key * 64).build() as build:
            build.vectors([f"text {n}"])
    kept = sorted(p.name for p in (tmp_path / SENTENCE_CACHE_DIR).iterdir())
    assert kept == ["c" * 16, "d" * 16][-KEEP_ENCODERS:]


def test_a_cut_cache_cuts_the_whole_vectors_it_lacks_and_keeps_their_folder(tmp_path: Path) -> None:
    """A cut bundle's cache (SentenceCache.of gives it the same graph's whole vectors as `uncut`): what the whole
    folder holds is cut, not encoded; the rest encoded; and its build keeps the whole folder over one built later."""
    texts = [f"text {n}" for n in range(6)]
    whole_encoder = FakeEncoder("whole")
    with _cache(tmp_path, whole_encoder, key="w" * 64).build() as build:
        build.vectors(texts[:4])
    with _cache(tmp_path, FakeEncoder("other"), key="o" * 64).build() as build:  # another encoder, built after it
        build.vectors(texts)
    projection = np.random.default_rng(3).standard_normal((DIMS + 1, DIMS)).astype(np.float32)
    never = FakeEncoder("never")
    source = SentenceCache(tmp_path, "w" * 64, DIMS, never)
    cut_encoder = FakeEncoder("cut")
    cut = SentenceCache(tmp_path, "c" * 64, DIMS, cut_encoder, Uncut(source, projection))
    with cut.build() as build:
        got = build.vectors(texts)
    np.testing.assert_allclose(got[:4], project(projection, whole_encoder(texts[:4])), rtol=1e-6)
    np.testing.assert_array_equal(got[4:], cut_encoder(texts[4:]))
    assert cut_encoder.asked[:2] == texts[4:] and (cut.counts.encoded, cut.counts.cached) == (2, 4)
    assert never.asked == []
    assert sorted(p.name for p in (tmp_path / SENTENCE_CACHE_DIR).iterdir()) == ["c" * 16, "w" * 16]
