"""The service's parts on their own: FAISS index types, the document store, snapshots, settings, encoder."""

from __future__ import annotations

import json
import mmap
from pathlib import Path

import faiss
import numpy as np
import pytest
import scipy.sparse as sp
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError

from service.encoder import QueryEncoder
from service.index import (
    OVERFETCH_DEAD_MAX,
    IndexConfig,
    IndexLoadError,
    VectorIndex,
    _bits_from,
    _live_first,
    auto_nlist,
    auto_nprobe,
)
from service.lexical import LexicalIndex
from service.quantized import Codes, quantize
from service.rows import RowTable
from service.settings import Settings
from service.snapshot import SnapshotData, SnapshotError, read_snapshot, snapshots, write_snapshot
from service.store import DocumentStore
from ssi.bundle import BundleError
from ssi.corpus import DataFileError
from ssi.encoder_io import DENSE_INPUT, OUTPUT
from ssi.records import Document
from training.encoder import build_encoder


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True)]))


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((4000, 32)).astype(np.float32)


def test_hnsw_ef_search_per_request_changes_recall(vectors: np.ndarray) -> None:
    queries = vectors[:200] + 0.5 * np.random.default_rng(1).standard_normal((200, 32)).astype(np.float32)
    exact = VectorIndex.build(IndexConfig("flat"), 32, vectors).search(queries, 10)[1]
    hnsw = VectorIndex.build(IndexConfig("hnsw", hnsw_m=16, hnsw_ef_construction=100, hnsw_ef_search=16), 32, vectors)
    low = recall(hnsw.search(queries, 10, ef_search=10)[1], exact)
    high = recall(hnsw.search(queries, 10, ef_search=400)[1], exact)
    assert high > low + 0.05
    assert high > 0.95


def test_hnsw_ranks_inner_products_of_vectors_with_very_different_norms(tmp_path: Path) -> None:
    """Norms spread over a decade, as in trained models: the MIPS-to-L2 reduction (SSI_HNSW_METRIC=l2) keeps
    recall high here, and its R is read back from a saved index."""
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((3000, 16)) * rng.uniform(0.3, 3.0, (3000, 1)) + 0.5
    queries = rng.standard_normal((100, 16)) + 0.5
    exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    reduced = IndexConfig("hnsw", hnsw_m=32, hnsw_ef_construction=200, hnsw_metric="l2")
    hnsw = VectorIndex.build(reduced, 16, vectors)
    assert hnsw.reduced
    scores, found = hnsw.search(queries, 10, ef_search=256)
    assert recall(found, exact) > 0.95
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ vectors.T, found, axis=1), rtol=1e-3, atol=1e-3)
    path = tmp_path / "hnsw.faiss"
    hnsw.serialize().tofile(path)
    loaded = VectorIndex.load(path, IndexConfig("hnsw", hnsw_m=32, hnsw_metric="l2"), 16)
    assert loaded.radius == pytest.approx(hnsw.radius, rel=1e-6)
    np.testing.assert_array_equal(loaded.search(queries, 10, ef_search=256)[1], found)
    loaded.add(vectors[:1] * 10)  # longer than R: stored clamped, and counted
    assert loaded.beyond_radius == 1 and loaded.ntotal == 3001


def test_hnsw_on_raw_inner_products_ranks_saves_and_refuses_the_other_metric(tmp_path: Path) -> None:
    """SSI_HNSW_METRIC=ip: the graph on raw inner products, exact scores, its own cache key, and a saved index
    of one metric is refused by a configuration of the other."""
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((3000, 16)) * rng.uniform(0.3, 3.0, (3000, 1)) + 0.5
    queries = rng.standard_normal((100, 16)) + 0.5
    exact = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    config = IndexConfig("hnsw", hnsw_m=32, hnsw_ef_construction=200, hnsw_metric="ip")
    assert config.tag() != IndexConfig("hnsw", hnsw_m=32, hnsw_ef_construction=200, hnsw_metric="l2").tag()
    hnsw = VectorIndex.build(config, 16, vectors)
    assert not hnsw.reduced
    scores, found = hnsw.search(queries, 10, ef_search=256)
    assert recall(found, exact) > 0.9
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ vectors.T, found, axis=1), rtol=1e-4, atol=1e-4)
    path = tmp_path / "hnsw-ip.faiss"
    hnsw.serialize().tofile(path)
    np.testing.assert_array_equal(VectorIndex.load(path, config, 16).search(queries, 10, ef_search=256)[1], found)
    with pytest.raises(IndexLoadError):
        VectorIndex.load(path, IndexConfig("hnsw", hnsw_m=32, hnsw_metric="l2"), 16)


def test_ivf_nprobe_per_request_changes_recall(vectors: np.ndarray) -> None:
    queries = vectors[:200]
    exact = VectorIndex.build(IndexConfig("flat"), 32, vectors).search(queries, 10)[1]
    ivf = VectorIndex.build(IndexConfig("ivf", ivf_nlist=64), 32, vectors)
    assert ivf.nlist == 64
    low = recall(ivf.search(queries, 10, nprobe=1)[1], exact)
    full = recall(ivf.search(queries, 10, nprobe=64)[1], exact)
    assert full == pytest.approx(1.0)
    assert low < 0.9


def test_ivf_defaults_scale_lists_and_probes_with_the_collection(vectors: np.ndarray) -> None:
    """Unset, an IVF index gets about 4·√n lists (≥ 39 points each) and probes 6·√nlist of them; a request's
    nprobe still overrides."""
    assert auto_nlist(1_000_000) == 4000 and auto_nlist(100_000) == 1264 and auto_nlist(50) == 1
    assert auto_nprobe(4000) == 379 and auto_nprobe(16) == 16
    ivf = VectorIndex.build(IndexConfig("ivf"), 32, vectors)
    assert ivf.nlist == auto_nlist(4000) == 102 and ivf.nprobe == auto_nprobe(102) == 61
    assert IndexConfig("ivf").tag() != "ivf-nlistauto"  # caches of the earlier √n default are rebuilt
    queries = vectors[:200]
    exact = VectorIndex.build(IndexConfig("flat"), 32, vectors).search(queries, 10)[1]
    assert recall(ivf.search(queries, 10)[1], exact) > recall(ivf.search(queries, 10, nprobe=4)[1], exact)
    assert VectorIndex.build(IndexConfig("flat"), 32, vectors).nprobe is None


def test_a_single_ivf_query_split_over_threads_finds_what_a_batch_finds(vectors: np.ndarray, tmp_path: Path) -> None:
    """With 2 threads one IVF query is searched by a view over the same lists that splits its probes: the
    same rows and scores as the query in a batch, dead rows skipped, after appends and after a reload."""
    config = IndexConfig("ivf", ivf_nlist=32, ivf_nprobe=8, threads=2)
    index = VectorIndex.build(config, 32, vectors[:3000])
    index.add(vectors[3000:])
    assert index._probes_split is not None
    table = RowTable([str(i) for i in range(4000)])
    for row in range(0, 4000, 5):
        table.kill(str(row))
    bits = table.live_bits()
    path = tmp_path / "index.faiss"
    index.serialize().tofile(path)
    for searched in (index, VectorIndex.load(path, config, 32)):
        batch_scores, batch_rows = searched.search(vectors[:40], 50, live_bits=bits)
        for i in range(40):
            scores, rows = searched.search(vectors[i : i + 1], 50, live_bits=bits)
            np.testing.assert_array_equal(rows[0], batch_rows[i])
            np.testing.assert_allclose(scores[0], batch_scores[i], rtol=1e-6)
        assert (batch_rows % 5 != 0).all() and (batch_rows >= 3000).any()


@pytest.mark.parametrize("dead", ["none", "few", "most"])  # few: over-fetched past; most: the bitmap filter
def test_a_flat_batch_finds_the_brute_force_top_of_the_live_rows(
    vectors: np.ndarray, dead: str, tmp_path: Path
) -> None:
    """A batch of ≥ 4 queries takes FAISS's matrix-product scan (which filters no rows): over few dead rows it
    asks for k + dead and drops them, over many it filters with the bitmap; either way each query gets the
    top k live rows by inner product, the rows a lone query gets, padded as FAISS pads when fewer are live.
    The index starts from a mapped file (a snapshot's) of 3,001 rows, the rest appended: two parts, the
    second starting inside a byte of the live bitmap."""
    np.save(tmp_path / "embeddings.npy", vectors[:3001])
    mapped = np.load(tmp_path / "embeddings.npy", mmap_mode="r")
    index = VectorIndex.build(IndexConfig("flat"), 32, mapped)
    assert index.shared_vectors and index.add(vectors[3001:]) == 3001 and index.shared_vectors
    assert [first for _, first in index._rows.parts()] == [0, 3001]
    np.testing.assert_array_equal(index.all_vectors(), vectors)
    picked = np.array([3000, 3001, 5, 3999, 0])
    np.testing.assert_array_equal(index.vectors(picked), vectors[picked])
    table = RowTable([str(i) for i in range(4000)])
    for row in range(4000):
        if (dead == "few" and row % 97 in (0, 3)) or (dead == "most" and row % 4):
            table.kill(str(row))
    assert (dead == "most") == (table.n_dead > OVERFETCH_DEAD_MAX)
    queries = vectors[:24] + 0.3 * np.random.default_rng(2).standard_normal((24, 32)).astype(np.float32)
    exact = queries.astype(np.float64) @ vectors.T.astype(np.float64)
    exact[:, ~table.live] = -np.inf
    scores, rows = index.search(queries, 50, live_bits=table.live_bits())
    for i in range(queries.shape[0]):
        best = np.argsort(-exact[i], kind="stable")[:50]
        np.testing.assert_allclose(scores[i], exact[i, rows[i]], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.sort(scores[i]), np.sort(exact[i, best]), rtol=1e-5, atol=1e-5)
        assert table.live[rows[i]].all()
        lone_scores, lone_rows = index.search(queries[i : i + 1], 50, live_bits=table.live_bits())
        assert set(lone_rows[0]) == set(rows[i])
    few = RowTable([str(i) for i in range(4000)])
    for row in range(4000):
        if row % 1000:
            few.kill(str(row))  # 4 live rows, 3,996 dead: the bitmap filter, and k beyond the live rows
    scores, rows = index.search(queries[:8], 6, live_bits=few.live_bits())
    assert (np.sort(rows[:, :4], axis=1) == [0, 1000, 2000, 3000]).all() and (rows[:, 4:] == -1).all()
    assert (scores[:, 4:] == np.finfo(np.float32).min).all()  # FAISS's own padding


def test_an_ivf_index_loaded_mapped_takes_appends_beside_its_lists_and_saves_them_together(
    vectors: np.ndarray, tmp_path: Path
) -> None:
    """An IVF index read from a snapshot keeps its lists mapped (FAISS cannot add to them): rows appended
    go to a second IVF over the same quantizer, searched with it. The answers, the vectors read back and
    a saved copy are those of the same index held in memory with the same rows added."""
    config = IndexConfig("ivf", ivf_nlist=32, ivf_nprobe=8, threads=2)
    memory = VectorIndex.build(config, 32, vectors[:3000])
    path = tmp_path / "index.faiss"
    memory.serialize().tofile(path)
    mapped = VectorIndex.load(path, config, 32)
    assert mapped.shared_vectors and not memory.shared_vectors
    for index in (memory, mapped):
        assert index.add(vectors[3000:3500]) == 3000 and index.add(vectors[3500:]) == 3500
    assert mapped._index.ntotal == 3000 and mapped.ntotal == 4000  # the mapped lists were never added to
    table = RowTable([str(i) for i in range(4000)])
    for row in range(0, 4000, 9):
        table.kill(str(row))
    picked = np.array([3999, 0, 3000, 2999, 1234])
    np.testing.assert_array_equal(mapped.vectors(picked), vectors[picked])
    np.testing.assert_array_equal(mapped.all_vectors(), vectors)
    saved = tmp_path / "again.faiss"
    mapped.serialize().tofile(saved)
    again = VectorIndex.load(saved, config, 32)
    assert again.ntotal == 4000
    for bits in (None, table.live_bits()):
        expected = memory.search(vectors[:40], 25, live_bits=bits)
        for index in (mapped, again):
            scores, rows = index.search(vectors[:40], 25, live_bits=bits)
            np.testing.assert_array_equal(rows, expected[1])
            np.testing.assert_array_equal(scores, expected[0])
            lone = index.search(vectors[3003:3004], 25, live_bits=bits)  # a lone query: the split probes
            np.testing.assert_array_equal(lone[1], memory.search(vectors[3003:3004], 25, live_bits=bits)[1])
            assert bits is None or table.live[rows[rows >= 0]].all()
    assert (expected[1] >= 3000).any()


def test_live_first_keeps_each_querys_live_rows_in_order() -> None:
    """The over-fetch's filter alone: dead and missing (-1) rows dropped, order kept, padding at the end."""
    table = RowTable([str(i) for i in range(16)])
    for row in (3, 5, 9):
        table.kill(str(row))
    rows = np.array([[3, 1, 5, 2, 7], [9, -1, 4, 3, 5]], dtype=np.int64)
    scores = np.array([[5, 4, 3, 2, 1], [9, 8, 7, 6, 5]], dtype=np.float32)
    kept_scores, kept_rows = _live_first(scores, rows, table.live_bits(), 3)
    np.testing.assert_array_equal(kept_rows, [[1, 2, 7], [4, -1, -1]])
    lowest = np.finfo(np.float32).min
    np.testing.assert_array_equal(kept_scores, np.array([[4, 2, 1], [7, lowest, lowest]], dtype=np.float32))


@pytest.mark.parametrize("index_type", ["flat", "hnsw", "ivf"])
def test_dead_rows_are_never_returned_and_index_round_trips(
    index_type: str, vectors: np.ndarray, tmp_path: Path
) -> None:
    config = IndexConfig(index_type, ivf_nlist=16, ivf_nprobe=16, hnsw_ef_search=200)
    index = VectorIndex.build(config, 32, vectors[:3000])
    assert index.add(vectors[3000:]) == 3000
    table = RowTable([str(i) for i in range(4000)])
    for row in range(0, 4000, 3):
        table.kill(str(row))
    scores, rows = index.search(vectors[:50], 20, live_bits=table.live_bits())
    assert (rows >= 0).all() and (rows % 3 != 0).all()
    # The rerank reads rows' vectors from the index itself: exactly the vectors stored.
    picked = np.array([0, 2999, 3000, 3999, 17])
    np.testing.assert_array_equal(index.vectors(picked), vectors[picked])
    np.testing.assert_array_equal(index.all_vectors(), vectors)
    if index_type == "flat":  # a flat index is its vectors: a snapshot saves them, and a load rebuilds from them
        assert index.serialize() is None
        loaded = VectorIndex.build(config, 32, index.all_vectors())
    else:
        path = tmp_path / "index.faiss"
        index.serialize().tofile(path)
        loaded = VectorIndex.load(path, config, 32)
        with pytest.raises(IndexLoadError, match="expected"):
            VectorIndex.load(path, IndexConfig("hnsw" if index_type != "hnsw" else "ivf"), 32)
    assert loaded.ntotal == 4000
    np.testing.assert_array_equal(loaded.search(vectors[:50], 20, live_bits=table.live_bits())[1], rows)
    np.testing.assert_array_equal(loaded.vectors(picked), vectors[picked])


@pytest.mark.parametrize("index_type", ["hnsw", "ivf"])
def test_an_index_saved_in_an_id_map_by_older_snapshots_still_loads(
    index_type: str, vectors: np.ndarray, tmp_path: Path
) -> None:
    """Snapshots before format 3 wrapped HNSW and IVF in an IndexIDMap2 with ids = rows: unwrapped on load."""
    config = IndexConfig(index_type, ivf_nlist=16, ivf_nprobe=16, hnsw_ef_search=200)
    if index_type == "hnsw":
        inner = faiss.IndexHNSWFlat(32, 16, faiss.METRIC_INNER_PRODUCT)
    else:
        inner = faiss.IndexIVFFlat(faiss.IndexFlatIP(32), 32, 16, faiss.METRIC_INNER_PRODUCT)
        inner.train(vectors)
    wrapped = faiss.IndexIDMap2(inner)
    wrapped.add_with_ids(vectors, np.arange(4000, dtype=np.int64))
    path = tmp_path / "old.faiss"
    faiss.write_index(wrapped, str(path))
    loaded = VectorIndex.load(path, config, 32)
    assert loaded.ntotal == 4000
    np.testing.assert_array_equal(loaded.vectors(np.array([5, 3999])), vectors[[5, 3999]])
    params = faiss.SearchParametersIVF(nprobe=16) if index_type == "ivf" else faiss.SearchParametersHNSW(efSearch=200)
    expected = wrapped.search(vectors[:20], 10, params=params)[1]
    np.testing.assert_array_equal(loaded.search(vectors[:20], 10)[1], expected)
    assert loaded.add(vectors[:3]) == 4000 and loaded.ntotal == 4003
    shuffled = faiss.IndexIDMap2(faiss.IndexHNSWFlat(32, 16, faiss.METRIC_INNER_PRODUCT))
    shuffled.add_with_ids(vectors[:10], np.arange(10, 0, -1, dtype=np.int64))
    faiss.write_index(shuffled, str(path))
    with pytest.raises(IndexLoadError, match="not the row numbers"):
        VectorIndex.load(path, IndexConfig("hnsw"), 32)


def test_ivf_on_tiny_collection_is_exhaustive() -> None:
    vectors = np.random.default_rng(2).standard_normal((10, 8)).astype(np.float32)
    ivf = VectorIndex.build(IndexConfig("ivf"), 8, vectors)
    assert ivf.nlist == 1
    exact = np.argsort(-(vectors @ vectors[0]))[:5]
    np.testing.assert_array_equal(ivf.search(vectors[:1], 5)[1][0], exact)


def test_store_sequence_log_and_consistent_view(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "text": "one"}\n{"id": "b", "title": "B", "text": "two"}\n', encoding="utf-8")
    store = DocumentStore.open_for_corpus(tmp_path / "stores", "docs", corpus)
    assert store.last_seq == 2 and store.count() == 2
    with store.view() as view:
        seqs = store.put([Document("c", "", "three"), Document("a", "A", "one again")])
        assert seqs == [3, 4]
        assert store.delete("b") == 5
        assert store.delete("b") is None  # nothing to delete: nothing logged
        # The view still sees the store as it was when it started.
        assert view.last_seq == 2 and view.count == 2 and view.changed_since(0) == []
    with store.view() as view:
        assert view.last_seq == 5
        assert sorted(view.changed_since(2)) == ["a", "b", "c"]
        assert sorted(view.get_many(["a", "b", "c"])) == ["a", "c"]
    assert store.get("a").title == "A" and store.get("a").seq == 4
    uuid = store.uuid
    store.close()
    # Reopening with the same corpus finds the same store, writes included, without re-importing.
    again = DocumentStore.open_for_corpus(tmp_path / "stores", "docs", corpus)
    assert again.uuid == uuid and again.last_seq == 5 and again.get("c") is not None
    again.close()


def test_store_refuses_duplicate_ids_in_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "dup.jsonl"
    corpus.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', encoding="utf-8")
    with pytest.raises(DataFileError, match="duplicate document id"):
        DocumentStore.open_for_corpus(tmp_path / "stores", "docs", corpus)


def _snapshot(seq: int, rows: int = 5) -> SnapshotData:
    vectors = np.random.default_rng(seq).standard_normal((rows, 4)).astype(np.float32)
    return SnapshotData(
        seq=seq,
        store_uuid="store",
        bundle_hash="hash",
        index_tag="flat",
        index_blob=None,
        embeddings=vectors,
        dims=4,
        tfidf=sp.random(rows, 7, density=0.3, format="csc", dtype=np.float32, random_state=seq),
        doc_ids=[f"d{i}" for i in range(rows)],
        live=np.ones(rows, dtype=bool),
    )


@pytest.mark.parametrize("blocks", [[3, 2], [0, 5], [0]])
def test_a_flat_index_saved_in_blocks_reads_back_as_one_mapped_array(tmp_path: Path, blocks: list[int]) -> None:
    """A flat index's vectors are saved from its parts (mapped base, appended tail) without joining them."""
    whole = _snapshot(4, rows=sum(blocks))
    expected = whole.embeddings
    starts = np.cumsum([0, *blocks])
    whole.embeddings = [expected[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]
    whole.codes = [quantize(block) for block in whole.embeddings]
    saved = write_snapshot(tmp_path / "cache", whole)
    args = dict(bundle_hash="hash", store_uuid="store", index_tag="flat", index_dims=4, vocab_size=7)
    data = read_snapshot(saved, **args)
    assert isinstance(data.embeddings, np.memmap) or isinstance(data.embeddings.base, np.memmap)
    np.testing.assert_array_equal(data.embeddings, expected)
    # The int8 codes come back mapped too (one copy for every worker), equal to the codes of the whole.
    assert isinstance(data.codes, Codes)
    fresh = quantize(expected)
    for got, want in zip(
        (data.codes.codes, data.codes.scales, data.codes.radius), (fresh.codes, fresh.scales, fresh.radius), strict=True
    ):
        assert isinstance(got, np.memmap) or isinstance(got.base, np.memmap)
        np.testing.assert_array_equal(got, want)


def test_a_snapshot_without_int8_codes_has_them_computed(tmp_path: Path) -> None:
    """Snapshots written before the int8 codes load as they are: the index computes the codes; codes that
    disagree with the rows are refused as damage."""
    written = _snapshot(6, rows=40)
    saved = write_snapshot(tmp_path / "cache", written)
    args = dict(bundle_hash="hash", store_uuid="store", index_tag="flat", index_dims=4, vocab_size=7)
    data = read_snapshot(saved, **args)
    assert data.codes is None
    index = VectorIndex.build(IndexConfig("flat"), 4, data.embeddings, data.codes)
    (codes,) = index.code_parts()
    np.testing.assert_array_equal(codes.codes, quantize(written.embeddings).codes)
    written.codes = quantize(written.embeddings[:39])
    with pytest.raises(ValueError, match="codes of"):
        VectorIndex.build(IndexConfig("flat"), 4, written.embeddings, written.codes)
    saved = write_snapshot(tmp_path / "other", written)
    with pytest.raises(SnapshotError, match="int8 codes disagree"):
        read_snapshot(saved, **args)


def test_bits_from_takes_any_rows_of_a_bitmap() -> None:
    live = np.random.default_rng(5).random(203) > 0.3
    bits = np.packbits(np.concatenate([live, np.ones(29, dtype=bool)]), bitorder="little")  # set bits past the rows
    for first, n in ((0, 203), (0, 200), (0, 0), (8, 100), (3, 1), (3, 200), (197, 6), (13, 77)):
        part = _bits_from(bits, first, n)
        assert part.shape[0] == (n + 7) // 8
        np.testing.assert_array_equal(np.unpackbits(part, bitorder="little")[:n], live[first : first + n])
        assert not np.unpackbits(part, bitorder="little")[n:].any()  # nothing past the part's rows


def test_snapshots_are_atomic_newest_first_and_checked(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    for seq in (3, 9, 12):
        write_snapshot(folder, _snapshot(seq))
    found = list(snapshots(folder))
    assert [p.name for p in found] == ["snap-000000000000012", "snap-000000000000009"]  # older ones pruned
    args = dict(bundle_hash="hash", store_uuid="store", index_tag="flat", index_dims=4, vocab_size=7)
    data = read_snapshot(found[0], **args)
    assert data.seq == 12 and data.doc_ids[0] == "d0" and data.tfidf.shape == (5, 7)
    with pytest.raises(SnapshotError, match="bundle_hash"):
        read_snapshot(found[0], **{**args, "bundle_hash": "other"})
    (found[0] / "embeddings.npy").write_bytes(b"truncated")
    with pytest.raises(SnapshotError, match="damaged"):
        read_snapshot(found[0], **args)
    meta = json.loads((found[1] / "meta.json").read_text())
    assert meta["seq"] == 9


def test_settings_refuse_unsafe_configurations() -> None:
    with pytest.raises(ValidationError, match="refusing unauthenticated writes"):
        Settings(bundle=Path("b"), host="0.0.0.0", insecure_writes=True)
    with pytest.raises(ValidationError, match="at least 16 characters"):
        Settings(bundle=Path("b"), api_key="short")
    with pytest.raises(ValidationError, match="index_type"):
        Settings(bundle=Path("b"), index_type="annoy")
    with pytest.raises(ValueError, match="nothing to serve"):
        Settings().collection_specs()
    ok = Settings(bundle=Path("b"), host="127.0.0.1", insecure_writes=True)
    assert ok.writes_enabled and not Settings(bundle=Path("b")).writes_enabled


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSI_BUNDLE", "/models/b")
    monkeypatch.setenv("SSI_INDEX_TYPE", "hnsw")
    monkeypatch.setenv("SSI_MAX_K", "50")
    monkeypatch.setenv("SSI_COLLECTIONS", '{"adverts": {"bundle": "/models/ads", "corpus": "/data/ads.jsonl"}}')
    settings = Settings(port=9000)  # a flag overrides the environment
    assert settings.index_type == "hnsw" and settings.max_k == 50 and settings.port == 9000
    assert list(settings.collection_specs()) == ["documents", "adverts"]


def test_settings_still_read_the_deprecated_index_kind_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSI_INDEX_KIND", "ivf")
    assert Settings(bundle=Path("b")).index_type == "ivf"
    monkeypatch.setenv("SSI_INDEX_TYPE", "hnsw")  # the current name wins
    assert Settings(bundle=Path("b")).index_type == "hnsw"


def test_encoder_that_disagrees_with_U_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    U = rng.standard_normal((4, 30)).astype(np.float32)
    path = tmp_path / "encoder.onnx"
    path.write_bytes(build_encoder(U))
    encoder = QueryEncoder(path, vocab_size=30, index_dims=4, threads=1)
    x = np.zeros((1, 30), dtype=np.float32)
    x[0, [1, 5]] = [0.6, 0.8]
    np.testing.assert_allclose(encoder.encode(sp.csr_matrix(x)), x @ U.T, rtol=1e-5)
    encoder.check_against(U)
    with pytest.raises(BundleError, match="does not match the form.s query map"):
        encoder.check_against(U * 1.5)
    # A graph holding fewer words than the vocabulary: its Gather fails on the last word's id.
    wider = QueryEncoder(path, vocab_size=31, index_dims=4, threads=1)
    with pytest.raises(BundleError, match="fails on the vocabulary's words"):
        wider.check_against(np.hstack([U, np.ones((4, 1), dtype=np.float32)]))
    with pytest.raises(BundleError, match="expected one output"):
        QueryEncoder(path, vocab_size=30, index_dims=5, threads=1)
    path.write_bytes(b"not an onnx graph")
    with pytest.raises(BundleError, match="cannot load"):
        QueryEncoder(path, vocab_size=30, index_dims=4, threads=1)


def _dense_encoder(U: np.ndarray) -> bytes:
    """The format-1 graph bundles made before the sparse encoder: one MatMul of a dense [batch, D] input."""
    weight = numpy_helper.from_array(np.ascontiguousarray(U.T, dtype=np.float32), name="U_transposed")
    graph = helper.make_graph(
        [helper.make_node("MatMul", [DENSE_INPUT, "U_transposed"], [OUTPUT])],
        "old_encoder",
        [helper.make_tensor_value_info(DENSE_INPUT, TensorProto.FLOAT, ["batch", U.shape[1]])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", U.shape[0]])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_an_encoder_of_the_older_dense_format_still_runs(tmp_path: Path) -> None:
    """Bundles exported before the sparse graph keep working: same output, same checks."""
    rng = np.random.default_rng(1)
    U = rng.standard_normal((4, 30)).astype(np.float32)
    (tmp_path / "old.onnx").write_bytes(_dense_encoder(U))
    (tmp_path / "new.onnx").write_bytes(build_encoder(U))
    old = QueryEncoder(tmp_path / "old.onnx", vocab_size=30, index_dims=4, threads=1)
    new = QueryEncoder(tmp_path / "new.onnx", vocab_size=30, index_dims=4, threads=1)
    assert not old.sparse and new.sparse
    x = sp.random(7, 30, density=0.2, format="csr", random_state=2, dtype=np.float32)
    np.testing.assert_allclose(old.encode(x), x.toarray() @ U.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new.encode(x), old.encode(x), rtol=1e-5, atol=1e-6)
    old.check_against(U)
    with pytest.raises(BundleError, match="expected inputs"):
        QueryEncoder(tmp_path / "old.onnx", vocab_size=31, index_dims=4, threads=1)


def test_a_snapshots_tfidf_rows_are_mapped_and_serve_like_a_copy(tmp_path: Path) -> None:
    """The tf-idf rows of a snapshot are memory-mapped read-only (shared by the workers that load it); the
    lexical index over them scores as over an in-memory copy, and appends and merges make new arrays."""
    written = _snapshot(4, rows=50)
    path = write_snapshot(tmp_path / "cache", written)
    data = read_snapshot(path, bundle_hash="hash", store_uuid="store", index_tag="flat", index_dims=4, vocab_size=7)
    for array in (data.tfidf.data, data.tfidf.indices):
        owner = array
        while owner is not None and not isinstance(owner, np.memmap | mmap.mmap):
            owner = getattr(owner, "base", None)
        assert owner is not None and not array.flags.writeable
    weights = np.linspace(0.5, 1.5, 7).astype(np.float32)
    mapped = LexicalIndex(weights, data.tfidf)
    copied = LexicalIndex(weights, sp.csc_matrix(written.tfidf.toarray()))
    words, values = np.array([1, 3, 6]), np.array([0.5, 0.7, 0.2])
    for got, want in zip(mapped.scores(words, values), copied.scores(words, values), strict=True):
        np.testing.assert_array_equal(got, want)
    extra = sp.random(3, 7, density=0.5, format="csr", dtype=np.float32, random_state=9)
    merged = mapped.appended(extra).merged()
    assert merged.rows == 53
    expected = copied.appended(extra).merged().scores(words, values)
    for got, want in zip(merged.scores(words, values), expected, strict=True):
        np.testing.assert_allclose(got, want)


def test_a_long_load_reports_its_progress_with_the_rate(caplog: pytest.LogCaptureFixture) -> None:
    """Without a terminal a long load logs every tenth done, each line with the items a second (a first start over a
    large collection is judged by it); the last line says everything was done."""
    import logging

    from service.progress import progress

    with caplog.at_level(logging.INFO, logger="service.progress"), progress("embedding documents", 20) as advance:
        for _ in range(10):
            advance(2)
    lines = [r.getMessage() for r in caplog.records if r.name == "service.progress"]
    assert len(lines) == 10 and lines[-1].startswith("embedding documents: 20/20, ")
    assert all(line.endswith(" documents/s") and float(line.split(", ")[1].split()[0]) > 0 for line in lines)
