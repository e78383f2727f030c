"""The exact top-k kernel (service.rerank) against brute force, with real FAISS and lexical indexes."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import scipy.sparse as sp

import service.index as index_module
import service.lexical as lexical_module
import service.rerank as rerank_module
from service import busy, int8_gemm
from service.index import IndexConfig, VectorIndex
from service.lexical import LexicalIndex
from service.open_lexical import OpenLexicalQuery
from service.quantized import QUANTIZED_QUERIES
from service.rerank import every_row_top, exact_top
from service.rows import RowTable


def random_collection(seed: int, n_docs: int = 600, n_words: int = 300, n_dims: int = 12):
    """Copies of one drawing per arguments: tests change theirs in place, and scipy's sampler is slow."""
    X, E = _drawn_collection(seed, n_docs, n_words, n_dims)
    return X.copy(), E.copy()


@functools.cache
def _drawn_collection(seed: int, n_docs: int, n_words: int, n_dims: int):
    rng = np.random.default_rng(seed)
    X = sp.random(n_docs, n_words, density=0.04, random_state=seed, format="csr", dtype=np.float32)
    X.data = np.abs(X.data) + 0.05
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).ravel()
    X = sp.csr_matrix(sp.diags(1 / np.maximum(norms, 1e-9)) @ X, dtype=np.float32)
    E = (rng.standard_normal((n_docs, n_dims)) * 0.3).astype(np.float32)
    return X, E


def query_vector(rng: np.random.Generator, n_words: int, n_terms: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.sort(rng.choice(n_words, size=n_terms, replace=False))
    vals = rng.random(n_terms) + 0.1
    return ids, vals / np.linalg.norm(vals)


def brute(E, X, w, uq, ids, vals, live):
    q = np.zeros(X.shape[1])
    q[ids] = vals
    f = E.astype(np.float64) @ uq + X.astype(np.float64) @ (w * q)
    f[~live] = -np.inf
    return f


# The indexes of the arrays a test queries, built once for all its queries as the service builds them once for all
# its requests (the arrays kept with them, so that their ids stay theirs); emptied around every test, whose
# fixtures may change how they are built (`heads`).
_BUILT: dict[tuple[int, ...], tuple] = {}


@pytest.fixture(autouse=True)
def _indexes_of_this_test() -> Iterator[None]:
    _BUILT.clear()
    yield
    _BUILT.clear()


def indexes(E, X, w, live):
    """A real flat index over E and a lexical index over X, its last quarter appended as a delta."""
    key = (id(E), id(X), id(w), id(live))
    if key not in _BUILT:
        index = VectorIndex.build(IndexConfig("flat"), E.shape[1], E)
        split = E.shape[0] * 3 // 4  # rows in both the base matrix and the appended delta
        lexical = LexicalIndex(w, X[:split]).appended(X[split:])
        bits = RowTable([str(i) for i in range(E.shape[0])], live).live_bits()
        _BUILT[key] = (E, X, w, live, index, lexical, bits)
    return _BUILT[key][4:]


def run(E, X, w, uq, ids, vals, want, pool, live=None, scan=True, dense=None, wrap=None):
    """exact_top with a real flat index; `scan=False` applies the widening rule of an HNSW index, `dense`
    picks the lexical route of a scanning one (None: by cost); `wrap` replaces the query's lexical term (the
    open vocabulary's term around it)."""
    live = np.ones(E.shape[0], dtype=bool) if live is None else live
    index, lexical, bits = indexes(E, X, w, live)

    def search(k):
        scores, rows = index.search(uq[None, :].astype(np.float32), k, live_bits=bits)
        return scores[0], rows[0]

    n_live = int(live.sum())
    query = lexical.query(ids, vals)
    if wrap is not None:
        query = wrap(query)
    return exact_top(uq, want, search, query, index.vectors, live, n_live, pool, scan=scan, dense=dense)


@pytest.fixture(params=["no heads", "heads"])
def heads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Runs a test as it is, and with every posting list of 8 or more keeping a head (service.lexical)
    of a quarter of it and the scanned lists summed, not passed densely, so the small collections here
    take the impact-layered path of large ones."""
    if request.param == "heads":
        monkeypatch.setattr(lexical_module, "HEAD_MIN", 8)
        monkeypatch.setattr(lexical_module, "HEAD_SHARE", 4)
        monkeypatch.setattr(lexical_module, "DENSE_SHARE", 1)
    return request.param == "heads"


@pytest.mark.parametrize("route", ["general", "dense", "pruned"])
@pytest.mark.parametrize("negative_weights", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_top_equals_brute_force(seed: int, negative_weights: bool, route: str, heads: bool) -> None:
    X, E = random_collection(seed)
    rng = np.random.default_rng(100 + seed)
    w = rng.uniform(0.5, 3.0, X.shape[1])
    if negative_weights:
        w[rng.random(X.shape[1]) < 0.3] *= -1
    live = rng.random(E.shape[0]) > 0.1  # some deleted rows must never come back
    searched_again = 0
    for _ in range(25):
        ids, vals = query_vector(rng, X.shape[1], int(rng.integers(1, 8)))
        uq = rng.standard_normal(E.shape[1]) * 0.3
        for want, pool in ((10, 10), (25, 8), (1, 4)):
            ranked = run(E, X, w, uq, ids, vals, want, pool, live, scan=route != "general", dense=route == "dense")
            f = brute(E, X, w, uq, ids, vals, live)
            expected = np.lexsort((np.arange(f.shape[0]), -f))[:want]
            np.testing.assert_array_equal(ranked.rows, expected)
            np.testing.assert_allclose(ranked.scores, f[expected], atol=1e-6)  # float32 postings
            assert live[ranked.rows].all()
            searched_again += ranked.searches > 1
    assert searched_again > 0  # tiny pools leave many lexical candidates: a wider search is cheaper


@pytest.mark.parametrize("route", ["general", "dense", "pruned", "by cost"])
@pytest.mark.parametrize("negative_weights", [False, True])
def test_pages_of_a_thousand_words_get_the_brute_force_top(negative_weights: bool, route: str, heads: bool) -> None:
    """A web page as the query (/match): 1,000+ words, so every document shares several and the pruning bounds
    are loose; the compiled lookups and dense pass must still give the exact top, whichever route is taken."""
    X, E = random_collection(21, n_docs=1500, n_words=4000)
    rng = np.random.default_rng(22)
    w = rng.uniform(0.5, 2.0, X.shape[1])
    if negative_weights:
        w[rng.random(X.shape[1]) < 0.2] *= -1
    live = rng.random(E.shape[0]) > 0.05
    for n_terms in (1000, 2500):
        ids, vals = query_vector(rng, X.shape[1], n_terms)
        uq = rng.standard_normal(E.shape[1]) * 0.3
        for want, pool in ((10, 128), (30, 16)):
            dense = {"dense": True, "pruned": False}.get(route)
            ranked = run(E, X, w, uq, ids, vals, want, pool, live, scan=route != "general", dense=dense)
            f = brute(E, X, w, uq, ids, vals, live)
            expected = np.lexsort((np.arange(f.shape[0]), -f))[:want]
            np.testing.assert_array_equal(ranked.rows, expected)
            np.testing.assert_allclose(ranked.scores, f[expected], atol=1e-6)


@pytest.mark.parametrize("scan", [False, True])
def test_negative_weights_below_the_pool_make_the_pool_widen(scan: bool) -> None:
    """The pool's best documents all share a heavily negative word: τ < s_K, so K must grow to stay exact."""
    rng = np.random.default_rng(4)
    n_docs, n_words = 500, 50
    E = (rng.standard_normal((n_docs, 8)) * 0.3).astype(np.float32)
    uq = rng.standard_normal(8)
    best = np.argsort(-(E @ uq))[:6]
    X = sp.lil_matrix((n_docs, n_words), dtype=np.float32)
    X[np.arange(n_docs), 1 + np.arange(n_docs) % (n_words - 1)] = 1.0  # every document has some word
    X[best, 0] = 1.0
    X = sp.csr_matrix(X)
    w = np.ones(n_words)
    w[0] = -10.0
    ids, vals = np.array([0]), np.array([1.0])
    ranked = run(E, X, w, uq, ids, vals, want=3, pool=6, scan=scan)
    f = brute(E, X, w, uq, ids, vals, np.ones(n_docs, dtype=bool))
    np.testing.assert_array_equal(ranked.rows, np.argsort(-f)[:3])
    assert not set(ranked.rows.tolist()) & set(best.tolist())
    assert ranked.searches > 1


def test_lexical_term_decides_beyond_the_faiss_pool() -> None:
    """A document with a strong word match but a poor embedding score must still rank first."""
    X, E = random_collection(7)
    X = X.tolil()
    target, word = 123, 299
    X[:, word] = 0
    X[target, word] = 1.0
    X = sp.csr_matrix(X, dtype=np.float32)
    w = np.full(X.shape[1], 10.0)
    uq = np.random.default_rng(3).standard_normal(E.shape[1])
    E[target] = -np.sign(uq) * 0.3  # the worst possible semantic score
    ids, vals = np.array([word]), np.array([1.0])
    ranked = run(E, X, w, uq, ids, vals, want=5, pool=5)
    f = brute(E, X, w, uq, ids, vals, np.ones(E.shape[0], bool))
    assert ranked.rows[0] == target == int(np.argmax(f))
    semantic_rank = int((E @ uq > E[target] @ uq).sum())
    assert semantic_rank > 500  # far outside the 5 candidates FAISS returned


@pytest.mark.parametrize("scan", [False, True])
def test_a_new_words_term_keeps_a_pool_row_the_bundle_words_alone_would_drop(scan: bool) -> None:
    """The open term o (service.open_lexical) joins `max_gain`, which decides which rows of an HNSW index's pool
    are scored at all (`scan=False`); rows of the pool are not brought back by the lexical candidates. So a pool
    row with a low semantic score, no bundle word of the query, and an o that puts it first must still rank
    first (and does on a scanning index's path too)."""
    X, E = random_collection(11)
    rng = np.random.default_rng(5)
    uq = rng.standard_normal(E.shape[1])
    ids, vals = query_vector(rng, X.shape[1], 3)
    target = int(np.argsort(-(E @ uq))[30])  # in a pool of 50, well below its 5th semantic score
    X = X.tolil()
    X[target, :] = 0  # none of the query's bundle words: l = 0 there
    X = sp.csr_matrix(X, dtype=np.float32)
    w = np.full(X.shape[1], 0.01)  # a bundle-word term too small to lift any pool row past the 5th
    o = 5.0

    def wrap(query):
        return OpenLexicalQuery(query, np.array([target]), np.array([o]), o)

    ranked = run(E, X, w, uq, ids, vals, want=5, pool=50, scan=scan, wrap=wrap)
    f = brute(E, X, w, uq, ids, vals, np.ones(E.shape[0], bool))
    f[target] += o
    assert ranked.rows[0] == target == int(np.argmax(f))
    assert list(ranked.rows) == list(np.argsort(-f, kind="stable")[:5])


def test_lexical_scores_match_dense_product_both_paths() -> None:
    X, _ = random_collection(5, n_docs=2000)
    w = np.random.default_rng(0).uniform(-1, 2, X.shape[1])
    lexical = LexicalIndex(w, X[:1500]).appended(X[1500:])  # base and delta both hold rows
    for n_terms in (1, 40):  # few postings: sort path; many: dense path
        ids, vals = query_vector(np.random.default_rng(n_terms), X.shape[1], n_terms)
        q = np.zeros(X.shape[1])
        q[ids] = vals
        dense = X.astype(np.float64) @ (w * q)
        upper_dense = X.astype(np.float64) @ (np.maximum(w, 0) * q)
        rows, lex, upper = lexical.scores(ids, vals)
        assert np.all(np.diff(rows) > 0)
        shares_word = np.flatnonzero(np.asarray(X[:, ids].sum(axis=1)).ravel() > 0)
        np.testing.assert_array_equal(rows, shares_word)
        np.testing.assert_allclose(lex, dense[rows], atol=1e-6)
        np.testing.assert_allclose(upper, upper_dense[rows], atol=1e-6)
        merged = lexical.merged().scores(ids, vals)
        np.testing.assert_allclose(merged[1], lex, atol=1e-9)
        some = np.random.default_rng(1).choice(2000, 300, replace=False)
        by_row = lexical.query(ids, vals).for_rows(some)
        np.testing.assert_allclose(by_row[0], dense[some], atol=1e-6)
        np.testing.assert_allclose(by_row[1], upper_dense[some], atol=1e-6)


def test_pruned_lexical_candidates_hold_every_row_above_the_threshold() -> None:
    """MaxScore pruning may skip words, never a row whose l⁺ exceeds θ; and values stay exact."""
    X, _ = random_collection(9, n_docs=3000, n_words=200)
    X = X.tolil()
    X[:, 0] = 0.05  # a word in every document, with a small weight: the one pruning should skip
    X = sp.csr_matrix(X, dtype=np.float32)
    w = np.random.default_rng(2).uniform(0.2, 2.0, X.shape[1])
    lexical = LexicalIndex(w, X)
    ids, vals = np.array([0, 17, 42, 99]), np.array([0.7, 0.4, 0.4, 0.44])
    q = np.zeros(X.shape[1])
    q[ids] = vals
    dense = X.astype(np.float64) @ (w * q)
    query = lexical.query(ids, vals)
    for threshold in (0.0, 0.02, 0.05, 0.2, 1.0, 10.0):
        rows, lex, upper = query.above(threshold)
        must = set(np.flatnonzero(dense > threshold).tolist())
        assert must <= set(rows.tolist()), threshold
        np.testing.assert_allclose(lex, dense[rows], atol=1e-6)
        if threshold >= 0.2:  # the everywhere-word's bound (0.7 · w_0 · 0.05 ≤ 0.07) is below θ: skipped
            assert len(rows) < 3000
    assert len(query.above(10.0)[0]) == 0


@pytest.mark.parametrize("lookup", ["binary search", "dense pass"])
@pytest.mark.parametrize("negative_weights", [False, True])
def test_heads_let_a_common_word_be_skipped_without_losing_a_row(
    monkeypatch: pytest.MonkeyPatch, negative_weights: bool, lookup: str
) -> None:
    """A word in every document with one outlier value: its head holds the outlier, its tail bound is tiny,
    so above θ its long list is skipped (the head still scanned); no row whose l⁺ exceeds θ is lost,
    values stay exact, in the base and in appended rows, whichever way the low words are looked up."""
    monkeypatch.setattr(lexical_module, "HEAD_MIN", 64)
    monkeypatch.setattr(lexical_module, "DENSE_SHARE", 1)  # sum the scanned lists, as 1 M rows would
    if lookup == "dense pass":
        monkeypatch.setattr(lexical_module, "SEARCH_NS", 1e9)
    X, _ = random_collection(11, n_docs=3000, n_words=200)
    X = X.tolil()
    X[:, 0] = 0.02
    X[7, 0] = 0.9  # the outlier: the column max, hence m_0, is 45 × every other posting of word 0
    X = sp.csr_matrix(X, dtype=np.float32)
    w = np.random.default_rng(3).uniform(0.2, 2.0, X.shape[1])
    if negative_weights:
        w[[17, 99]] *= -1
    lexical = LexicalIndex(w, X[:2500]).appended(X[2500:])
    ids, vals = np.array([0, 17, 42, 99]), np.array([0.7, 0.4, 0.4, 0.44])
    q = np.zeros(X.shape[1])
    q[ids] = vals
    dense = X.astype(np.float64) @ (w * q)
    upper_dense = X.astype(np.float64) @ (np.maximum(w, 0) * q)
    reused = lexical.query(ids, vals)  # each threshold above the last reuses its scan
    assert reused.tail_bound[0] < 0.1 * reused.bound[0]
    for threshold in (0.0, 0.03, 0.1, 0.3, 0.6, 2.0):
        fresh = lexical.query(ids, vals)
        rows, lex, upper = fresh.above(threshold)
        assert np.all(np.diff(rows) > 0)
        must = set(np.flatnonzero(upper_dense > threshold).tolist())
        assert must <= set(rows.tolist()), threshold
        np.testing.assert_allclose(lex, dense[rows], atol=1e-6)
        np.testing.assert_allclose(upper, upper_dense[rows], atol=1e-6)
        again, again_lex, _ = reused.above(threshold)
        assert must <= set(again.tolist())
        np.testing.assert_allclose(again_lex, dense[again], atol=1e-6)
        if threshold >= 0.1:  # word 0's tail bound (0.7 · w_0 · 0.02 ≤ 0.03) is below θ: its list is skipped
            assert 0 in fresh.skipped_words().tolist()
    assert 7 in lexical.query(ids, vals).above(0.1)[0]  # l⁺ ≥ 0.7 · 0.2 · 0.9 from its head posting alone


SCANS = {  # (SSI_INT8_GEMM, queries a batch): every kind of scan every_score takes
    "int8 gemm, 2 queries": (True, 2),
    "int8 gemm, a batch": (True, QUANTIZED_QUERIES + 1),
    "numba int8": (False, 1),
    "numba int8 for a lone query": (True, 1),
    "blas": (False, QUANTIZED_QUERIES + 1),
}


@pytest.mark.parametrize("common", ["none", "looked up", "summed after all"])
@pytest.mark.parametrize("scan", list(SCANS))
@pytest.mark.parametrize("idle_cores", [0, 3])
@pytest.mark.parametrize("negative_weights", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_row_top_equals_brute_force(
    seed: int, negative_weights: bool, idle_cores: int, scan: str, common: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s and l of every row (a flat index's every_score, the dense lexical pass), any weights, dead rows, exact ties
    broken by row, the rows appended after the first part; with idle cores the scan's pieces are spread over other
    threads (service.busy) and must come back in their places. s comes from onnxruntime's integer product for the
    first rows and numba's int8 pass for the appended ones (service.int8_gemm), or without the former from numba's
    pass for a few queries and BLAS's float32 product for more; each int8 score within its stated bound. The query's
    common words are left out of the every-row l and bounded (service.lexical.RareSum), then looked up for the rows
    kept, or summed for every row after all where the lookups would cost more."""
    if common != "none":  # every word of more than 1 % of the rows is common here
        monkeypatch.setattr(lexical_module, "COMMON_SHARE", 0.01)
        monkeypatch.setattr(lexical_module, "COMMON_POSTINGS_PER_ROW", 0.0)
        monkeypatch.setattr(lexical_module, "SEARCH_NS", 0.0 if common == "looked up" else 1e12)
    monkeypatch.setattr(index_module, "SCAN_PIECE_ROWS", 70)  # several pieces in each part
    monkeypatch.setattr(busy, "_board", busy.Board(cores=1 + idle_cores))  # this search counted below
    X, E = random_collection(seed, n_docs=700)
    E[350:360] = E[340]  # ten rows share one embedding: equal s, and equal f where l is equal too
    rng = np.random.default_rng(200 + seed)
    w = rng.uniform(0.5, 3.0, X.shape[1])
    if negative_weights:
        w[rng.random(X.shape[1]) < 0.3] *= -1
    live = rng.random(E.shape[0]) > 0.1
    gemm, queries = SCANS[scan]
    index = VectorIndex.build(IndexConfig("flat", int8_gemm=gemm), E.shape[1], E[:500])
    index.add(E[500:])
    lexical = LexicalIndex(w, X[:500]).appended(X[500:])
    spread = []
    original = busy.Board.spread

    def counted(board: busy.Board, tasks: list) -> None:
        spread.append(min(board.idle_cores(), len(tasks) - 1))
        original(board, tasks)

    monkeypatch.setattr(busy.Board, "spread", counted)
    split: list[bool] = []
    for _ in range(20 // queries + 1):
        uqs = (rng.standard_normal((queries, E.shape[1])) * 0.3).astype(np.float32).astype(np.float64)
        with busy.board().searching():
            scanned = index.every_score(uqs.astype(np.float32))
        exact = uqs @ E.astype(np.float64).T
        if gemm or queries <= QUANTIZED_QUERIES:
            assert scanned.radius is not None and scanned.factor is not None
            bound = scanned.factor[:, None] * scanned.radius[None, :].astype(np.float64)
            assert (scanned.l1 is not None) == (gemm and queries >= int8_gemm.FROM_QUERIES)
            if scanned.l1 is not None and scanned.l1_factor is not None:
                bound += scanned.l1_factor[:, None] * scanned.l1[None, :].astype(np.float64)
            assert (np.abs(scanned.scores - exact) <= bound).all()
            assert np.abs(scanned.scores - exact).max() > 1e-5  # the int8 pass is approximate: the bound matters
        else:
            assert scanned.radius is None
            np.testing.assert_allclose(scanned.scores, exact, rtol=1e-5, atol=1e-5)
        for at, uq in enumerate(uqs[:3]):
            ids, vals = query_vector(rng, X.shape[1], int(rng.integers(1, 8)))
            summed = lexical.query(ids, vals).everywhere_but_common()
            split.append(not summed.complete)
            f = brute(E, X, w, uq, ids, vals, live)
            for want in (1, 10, 30, 800):
                ranked = every_row_top(uq, want, scanned, at, summed, index.vectors, live)
                expected = np.lexsort((np.arange(f.shape[0]), -f))[: min(want, int(live.sum()))]
                np.testing.assert_array_equal(ranked.rows, expected)
                np.testing.assert_allclose(ranked.scores, f[expected], atol=1e-6)
    assert set(spread) == {idle_cores}  # the scan went to the idle cores, and only to them
    assert any(split) == (common != "none")  # the common words were left out where the case says


def test_the_board_counts_the_searches_of_every_process_of_a_group() -> None:
    """Two workers' slots in one shared array: a search running in one leaves the other one core fewer idle,
    and a spread on a busy machine runs everything on the calling thread."""
    slots = busy.new_slots(2)
    first, second = busy.Board(slots, 0, cores=2), busy.Board(slots, 1, cores=2)
    assert first.idle_cores() == second.idle_cores() == 2
    with first.searching():
        assert second.idle_cores() == 1
        with second.searching():
            assert first.idle_cores() == 0
            threads: set[str] = set()
            second.spread([lambda: threads.add(threading.current_thread().name)] * 8)
            assert threads == {threading.current_thread().name}
        with first.borrowing(1):
            assert second.idle_cores() == 0
    assert first.idle_cores() == 2 and list(slots) == [0, 0]


def test_a_process_answering_requests_counts_one_core_busy_between_its_searches() -> None:
    """A worker parsing and answering requests uses a core even while none of its searches runs: counted on the
    board (at least one however many requests, its searches beyond that), so another worker's search does not
    spread its scan over it; an answered request leaves the board as it was."""
    slots = busy.new_slots(2)
    first, second = busy.Board(slots, 0, cores=3), busy.Board(slots, 1, cores=3)
    with first.handling(), first.handling():
        assert second.idle_cores() == 2  # two requests in one process: one core
        with first.searching():
            assert second.idle_cores() == 2  # its search runs on the core its requests were counted on
            with first.searching():
                assert second.idle_cores() == 1
    assert list(slots) == [0, 0]

    seen: list[int] = []

    async def app(scope: dict, receive: object, send: object) -> None:
        seen.append(second.idle_cores())

    async def call(scope_type: str) -> None:
        await busy.BusyMiddleware(app)({"type": scope_type}, None, None)  # type: ignore[arg-type]

    previous = busy.board()
    busy.use(first)
    try:
        asyncio.run(call("http"))
        asyncio.run(call("lifespan"))
    finally:
        busy.use(previous)
    assert seen == [2, 3] and list(slots) == [0, 0]


def test_a_long_texts_every_row_sum_is_priced_without_its_common_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """The every-row path reads a long text's common words only for the rows their bound keeps, so its cost
    estimate leaves their postings out, and a page the pool path would take goes every-row (service.rerank.
    prefers_dense); a short query with few common postings is priced as the plain dense pass."""
    monkeypatch.setattr(lexical_module, "COMMON_POSTINGS_PER_ROW", 4.0)
    rare, _ = random_collection(0, n_docs=5000, n_words=280)
    X = sp.hstack([sp.csr_matrix(np.full((5000, 20), 0.5, dtype=np.float32)), rare], format="csr")  # 20 stop words
    lexical = LexicalIndex(np.ones(300), X)
    page = lexical.query(np.arange(0, 300, 2), np.full(150, 0.1))  # 150 words, 10 stop words among them
    assert page.every_row_cost_ns() < 0.7 * page.dense_cost_ns()  # 90,000 of its ~143,000 ns left out
    split = page.everywhere_but_common()
    assert not split.complete and set(page.words[split.common].tolist()) == set(range(0, 20, 2))
    monkeypatch.setattr(rerank_module, "DENSE_MAX_NS", 0.0)
    pool = int(page.every_row_cost_ns() / (rerank_module.LONG_QUERY_LOOKUPS * 150 * lexical_module.SEARCH_NS)) + 1
    assert rerank_module.prefers_dense(page, pool, every_row=True)
    assert not rerank_module.prefers_dense(page, pool)
    short = lexical.query(np.array([0, 101, 203]), np.array([0.3, 0.5, 0.2]))  # one stop word: 5,000 postings
    assert short.everywhere_but_common().complete
    assert short.every_row_cost_ns() == short.dense_cost_ns()
