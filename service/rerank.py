"""Exact top-k under a form's score f(q, d) = (A q)·e(d) + Σ_i w_i q_i d_i, from two candidate sources.

Bai et al., "Supervised Semantic Indexing" (CIKM 2009): f(q, d) = qᵀ(UᵀV + I)d. Every model form
(ssi.forms) splits its f this way: a semantic part s(d) = (A q)·e(d), with A the form's query map
and e(d) what the index stores (U and V d for SSI, U and V d + (V₃ d)∘(Y₃ d) for PSI-3), and a
diagonal part l(d) = Σ_i w_i q_i d_i with the form's lexical weights w.

The embedding index returns C, the K documents of highest s. Any document outside C has
s(d) ≤ s_K, the K-th best semantic score, so f(d) ≤ s_K + l⁺(d), where l⁺ is the diagonal sum over
the positive weights (l⁺ = l when w ≥ 0). With τ the `want`-th best exact f over C, a document
outside C can only enter the top `want` if l⁺(d) > τ − s_K, and l⁺(d) > 0 needs a word shared with q.
So scoring C plus the lexical rows above that threshold exactly, then sorting, gives the exact
top `want` for a flat index.

That argument also needs τ ≥ s_K, or a document outside C with no shared word (f ≤ s_K) could beat
τ. With w ≥ 0 it always holds (every c ∈ C has f(c) ≥ s(c) ≥ s_K). When a bundle has negative
weights it may fail; then K is doubled and the index searched again until it holds or C covers
every live document (the brute-force limit), so the result stays exact, only slower.

The larger K, the lower s_K and the higher the bar θ = τ − s_K, so the fewer lexical candidates:
on 1M short documents, K = 64 left a median of ~55k documents to score exactly, K = 1024 ~5k. A
flat or IVF scan costs the same for any K, so callers start those with a large pool, and K is
widened (×8) when the lexical candidates would still cost more to score than another scan.

Within C, only rows that can still reach the top `want` are scored: with w ≥ 0, τ is at least the
`want`-th best s in C, and l⁺ ≤ max_gain (LexicalQuery: Σ m_i, and max wᵢ⁺·‖q‖·max‖d‖ = max w⁺ for
unit tf-idf), so a pool row with s + max_gain below that cannot enter. For SSI's w = 1 the top
1,024 semantic scores of a collection usually lie within 1 of each other and little is cut; for
`noidentity` (w = 0) every pool row below the `want`-th is skipped.

A cosine form (`projection`, paper 003) fits the same split: e(d) = B d/‖B d‖ and the encoder's
A q/‖A q‖, so s(d) = cos(A q, B d) ∈ [−1, 1], and w = c ≥ 0 for every word (0 alone, the tf-idf weight
combined); nothing above depends on how s is scaled, so both bounds hold as they are.

Where s and l are both known for every row (a flat index's scan kept whole, `VectorIndex.every_score`, and the
dense lexical pass), no pool and no bound on the weights is needed: `every_row_top` takes the top `want` of f
over all live rows in one compiled pass (service.topk) and rescores the rows within float32 rounding of the
cut (or within their error bound of it, where s came from int8 codes, service.quantized). A long page's l of
every row leaves its common words out (service.lexical.RareSum: their lists are most of its postings, their
weights small), widening each row's interval by what they can add, and they are looked up for the rows kept.
The service takes it for every query whose l it would sum densely anyway (`prefers_dense`,
service.model_state): on 100k passages a pool of K = 1,024 cost 0.3 ms of FAISS heap over k = 10, and queries
of stop words brought ~1,300 rows beyond it to fetch and rescore (docs/performance/search.md, "Every row's
score").

With an approximate index (HNSW, IVF) s_K is not a true bound and the result is approximate; its
recall against this exact ranking is what `ssi bench` reports.

When the index scans the collection anyway (flat, IVF) and every weight is ≥ 0 (`_scanned_top`),
the pool is taken with FAISS's float32 scores as they are and only the rows within float32 rounding of
the `want`-th score are rescored in float64 from their embeddings. The rows beyond the pool come
from `LexicalQuery.above(θ)`, whose posting-list pruning (service.lexical) skips the long lists of
frequent words, or, where one pass over the query's posting lists into an array of every row is
cheap (a small collection, `DENSE_MAX_NS`), from that array: then a pool row's l is a lookup and the
rows with l > θ are one comparison. Earlier this path always summed every query word's posting
list into a dense array of all rows: on 1 M passages that was a median of 430k postings a query
(0.96 M for the load test's queries), and the lexical candidates and the rerank took 2.35 + 1.02 ms
a query (mean, wall) against 1.55 + 0.58 ms pruned (benchmarks.search_stages, IVF nprobe 384, one run of each).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from service import topk
from service.topk import EveryScore

SemanticSearch = Callable[[int], tuple[np.ndarray, np.ndarray]]
# The stored embeddings e(d) of the given rows (service.index.VectorIndex.vectors): read from the index,
# which holds the only copy of them.
RowVectors = Callable[[np.ndarray], np.ndarray]


class LexicalTerm(Protocol):
    """The diagonal term of one query (service.lexical.LexicalQuery)."""

    nonnegative: bool
    max_gain: float  # no row's l⁺ exceeds it

    def for_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def above(self, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def everywhere(self) -> np.ndarray: ...

    def dense_cost_ns(self) -> float: ...

    def every_row_cost_ns(self) -> float: ...

    def lookup_cost_ns(self, rows: int) -> float: ...


class EveryRowLexical(Protocol):
    """A query's l of every row, perhaps without its common words (service.lexical.RareSum)."""

    summed: np.ndarray  # l of every row over the words summed
    below: float  # what the words left out can add to a row's l: at least this (≤ 0)
    above: float  # and at most this (≥ 0)

    @property
    def complete(self) -> bool: ...

    def exact(self, rows: np.ndarray) -> np.ndarray: ...

    def lookups_pay(self, rows: int) -> bool: ...

    def whole(self) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class Ranked:
    """The best rows in order with their exact scores; `candidates` counts the rows scored exactly."""

    rows: np.ndarray
    scores: np.ndarray
    semantic: np.ndarray
    lexical: np.ndarray
    candidates: int
    searches: int

    @classmethod
    def best(
        cls, rows: np.ndarray, semantic: np.ndarray, lexical: np.ndarray, want: int, candidates: int, searches: int
    ) -> Ranked:
        """The `want` rows of highest f = semantic + lexical among `rows` (all scored exactly), ties by row."""
        scores = semantic + lexical
        order = np.lexsort((rows, -scores))[:want]
        return cls(rows[order], scores[order], semantic[order], lexical[order], candidates, searches)

    @classmethod
    def empty(cls) -> Ranked:
        nothing = np.zeros(0, dtype=np.float64)
        return cls(np.zeros(0, dtype=np.int64), nothing, nothing, nothing, 0, 0)


# service.topk keeps the rows within this share of the cut (a looser bound than 2 × `_float_slack`'s), which
# `every_row_top` then filters.
TOPK_MARGIN = 1e-4


def _float_slack(*scores: float) -> float:
    """How far FAISS's float32 sums (in its own order) may sit from the float64 scores: a near-tie
    within it is kept on the safe side."""
    return 1e-5 * (1.0 + sum(abs(x) for x in scores if np.isfinite(x)))


def _worth_scoring(sem_found: np.ndarray, want: int, lexical: LexicalTerm) -> np.ndarray:
    """The pool rows that can still be in the top `want`: with w ≥ 0, f ≥ s, so τ is at least the
    `want`-th best semantic score s_w of the pool, and a pool row with s + max l⁺ < s_w cannot reach
    it (its lexical part is bounded by LexicalQuery.max_gain). With negative weights, every row."""
    keep = np.ones(sem_found.shape[0], dtype=bool)
    if not lexical.nonnegative or sem_found.shape[0] <= want:
        return keep
    s_want = float(np.partition(sem_found, -want)[-want])
    slack = _float_slack(s_want, lexical.max_gain)
    return sem_found.astype(np.float64) + lexical.max_gain >= s_want - slack


def exact_top(
    query_embedding: np.ndarray,
    want: int,
    search: SemanticSearch,
    lexical: LexicalTerm,
    vectors: RowVectors,
    live: np.ndarray,
    n_live: int,
    pool: int,
    scan: bool = True,
    dense: bool | None = None,
) -> Ranked:
    """The `want` live rows of highest f, best first (ties broken by row number).

    `search(K)` returns (semantic scores, rows) of the K best live rows by e(d)·(A q), best first;
    `lexical` gives l and l⁺ of rows; `vectors(rows)` gives e(d) of rows; `live[row]` is False for deleted rows.
    `scan`: the index's cost is a scan of the collection (flat, IVF), whatever K; otherwise (HNSW) it
    grows with K, so K is widened for fewer candidates only up to 16 × the pool.
    `dense` (scanning indexes): as in `_scanned_top`.
    """
    if want <= 0 or n_live == 0:
        return Ranked.empty()
    uq = np.asarray(query_embedding, dtype=np.float64)
    if scan and lexical.nonnegative:
        return _scanned_top(uq, want, search, lexical, vectors, live, n_live, pool, dense)
    K = min(max(pool, want), n_live)
    searches = 0
    extra = np.zeros(0, dtype=np.int64)
    extra_lexical = np.zeros(0, dtype=np.float64)
    while True:
        sem_found, found = search(K)
        searches += 1
        keep = found >= 0
        sem_found, found = sem_found[keep], found[keep].astype(np.int64)
        covered_all = found.shape[0] >= n_live
        scored = _worth_scoring(sem_found, want, lexical)
        pool_rows = found[scored]
        lexical_found, _ = lexical.for_rows(pool_rows)
        semantic_found = vectors(pool_rows).astype(np.float64) @ uq
        f_found = semantic_found + lexical_found
        tau = float(np.partition(f_found, -want)[-want]) if pool_rows.shape[0] >= want else -np.inf
        s_k = float(sem_found.min()) if found.shape[0] else np.inf
        if covered_all:
            break
        if not lexical.nonnegative and tau < s_k and K < n_live:
            K = min(2 * K, n_live)  # τ < s_K: documents with no shared word could still beat τ
            continue
        slack = _float_slack(tau, s_k) if np.isfinite(tau) else 0.0
        threshold = tau - s_k - slack
        rows, lexical_rows, chosen = _beyond_pool(lexical, threshold, found, live)
        budget = max(8 * K, n_live // 8) if scan else 8 * K
        widest = n_live if scan else min(n_live, 16 * max(pool, want))
        if K < widest and int(chosen.sum()) > budget:
            K = min(8 * K, widest)  # scoring them would cost more than a wider search
            continue
        extra, extra_lexical = rows[chosen], lexical_rows[chosen]
        break
    candidates = np.concatenate([pool_rows, extra])
    semantic = np.concatenate([semantic_found, vectors(extra).astype(np.float64) @ uq])
    lexical_part = np.concatenate([lexical_found, extra_lexical])
    return Ranked.best(candidates, semantic, lexical_part, want, int(candidates.shape[0]), searches)


# Lexical candidates + rerank, median (mean) a query, `python -m benchmarks.search_stages --clock wall
# --rerank dense|pruned`: 100k passages, flat, dense 0.39 (0.44) ms against pruned 0.56 (0.62); 1 M, IVF
# 4,000 / 384, dense 2.21 (3.23) against pruned 1.20 (1.65). Below this estimated cost of the dense pass
# (about 0.3 ms at 100k, several ms at 1 M), it is taken.
DENSE_MAX_NS = 1.0e6
# A long text (a web page to /match: ~1,000 words) pays on the pruned path the pool's lookups (words × K) and
# then, its lists covering most of the collection, a dense pass in `above` anyway: so the dense pass is taken
# whenever it costs less than twice the lookups. On 100k passages and 20 kB pages the pruned path took about
# 4 ms of lookups + 4 ms of dense pass, the dense path 4 ms alone. A short query (5 words) never gets near it.
LONG_QUERY_LOOKUPS = 2.0


def prefers_dense(lexical: LexicalTerm, pool: int, every_row: bool = False) -> bool:
    """Whether the query's l is best summed for every row at once: cheap (DENSE_MAX_NS), or cheaper than the
    pruned path's lookups of a `pool` for a long text (LONG_QUERY_LOOKUPS). `every_row`: for `every_row_top`,
    whose sum leaves a long text's common words out (service.lexical.RareSum) and so costs less."""
    cost = lexical.every_row_cost_ns() if every_row else lexical.dense_cost_ns()
    return cost <= max(DENSE_MAX_NS, LONG_QUERY_LOOKUPS * lexical.lookup_cost_ns(pool))


def every_row_top(
    uq: np.ndarray,
    want: int,
    every: EveryScore,
    query: int,
    lexical: EveryRowLexical,
    vectors: RowVectors,
    live: np.ndarray,
) -> Ranked:
    """The exact top `want` when s and l are known for every row (`every`, a flat index's scan, of which this
    is query number `query`, and the dense lexical pass): no pool, no bound on the weights and no rows beyond
    it, so any weights, negative ones included.

    s came from float32 sums, or from the rows' int8 codes (and the queries' 7-bit ones, service.int8_gemm); l may
    leave the query's common words out (service.lexical.RareSum, within known bounds). So every row whose f may
    reach the `want`-th best (service.topk) is kept, its l completed by looking its common words up, its s rescored
    in float64 from its embedding, and those are ordered by that exact f (ties by row). Where the bounds keep so
    many rows that the lookups would cost more than the common words' lists, those are summed for every row and the
    pass runs again on the whole l."""
    factor = 0.0 if every.factor is None else float(every.factor[query])
    l1_factor = 0.0 if every.l1_factor is None else float(every.l1_factor[query])
    scores = every.scores[query]

    def kept(l_all: np.ndarray, below: float, above: float) -> np.ndarray:
        rows, upper, cut = topk.best(
            scores, l_all, live, want, TOPK_MARGIN, every.radius, factor, below, above, every.l1, l1_factor
        )
        return rows[upper >= cut - 2 * _float_slack(cut)] if np.isfinite(cut) else rows

    rows = kept(lexical.summed, lexical.below, lexical.above)
    if lexical.complete or lexical.lookups_pay(rows.shape[0]):
        lexical_rows = lexical.exact(rows)
    else:
        whole = lexical.whole()
        rows = kept(whole, 0.0, 0.0)
        lexical_rows = whole[rows]
    semantic = vectors(rows).astype(np.float64) @ uq
    return Ranked.best(rows, semantic, lexical_rows, want, int(rows.shape[0]), searches=1)


def _beyond_pool(
    lexical: LexicalTerm, threshold: float, found: np.ndarray, live: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows listed by `lexical.above(threshold)` with their l, and which of them are live, outside the
    pool `found` and have l⁺ > threshold: the documents the index missed that may still be in the top."""
    rows, lexical_rows, upper = lexical.above(threshold)
    chosen = live[rows] & (upper > threshold)
    if rows.shape[0] and found.shape[0]:  # drop rows already in the pool (rows are sorted)
        at = np.minimum(np.searchsorted(rows, found), rows.shape[0] - 1)
        chosen[at[rows[at] == found]] = False
    return rows, lexical_rows, chosen


def _scanned_top(
    uq: np.ndarray,
    want: int,
    search: SemanticSearch,
    lexical: LexicalTerm,
    vectors: RowVectors,
    live: np.ndarray,
    n_live: int,
    pool: int,
    dense: bool | None = None,
) -> Ranked:
    """`exact_top` for a scanning index and weights ≥ 0 (see the module docstring). `dense`: l of every row
    from one pass over the query's posting lists (cheap on a small collection), else the pruned scan;
    None chooses by their estimated costs."""
    K = min(max(pool, want), n_live)
    if dense is None:
        dense = prefers_dense(lexical, K)
    l_all = lexical.everywhere() if dense else None
    searches = 0
    while True:
        sem_found, found = search(K)
        searches += 1
        keep = found >= 0
        sem_found, found = sem_found[keep].astype(np.float64), found[keep].astype(np.int64)
        l_found = l_all[found] if l_all is not None else lexical.for_rows(found)[0]
        f_found = sem_found + l_found
        extra, l_extra = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        if found.shape[0] >= n_live:
            break
        tau = float(np.partition(f_found, -want)[-want]) if found.shape[0] >= want else -np.inf
        s_k = float(sem_found.min()) if found.shape[0] else np.inf
        # τ ≥ s_K with weights ≥ 0, so θ ≥ 0 up to rounding; a row sharing no word (l = 0) has f ≤ s_K.
        theta = max(tau - s_k - _float_slack(tau, s_k), 0.0) if np.isfinite(tau) else 0.0
        if l_all is not None:
            wanted = (l_all > theta) & live
            wanted[found] = False
            extra = np.flatnonzero(wanted)
            l_extra = l_all[extra]
        else:
            rows, l_rows, chosen = _beyond_pool(lexical, theta, found, live)
            extra, l_extra = rows[chosen], l_rows[chosen]
        if K < n_live and extra.shape[0] > max(8 * K, n_live // 8):
            K = min(8 * K, n_live)  # scoring them would cost more than a wider search
            continue
        break
    rows = np.concatenate([found, extra])
    semantic = np.concatenate([sem_found, vectors(extra).astype(np.float64) @ uq])
    lexical_part = np.concatenate([l_found, l_extra])
    scores = semantic + lexical_part
    # The pool's s came from FAISS in float32: rescore in float64 every row that may still be in the top.
    if rows.shape[0] > want:
        cut = float(np.partition(scores, -want)[-want])
        near = np.flatnonzero(scores >= cut - 2 * _float_slack(cut))
    else:
        near = np.arange(rows.shape[0])
    near = near[near < found.shape[0]]  # the extra rows were scored in float64 already
    semantic[near] = vectors(rows[near]).astype(np.float64) @ uq
    return Ranked.best(rows, semantic, lexical_part, want, int(near.shape[0] + extra.shape[0]), searches)
