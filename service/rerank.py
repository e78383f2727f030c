"""Exact top-k under the SSI score f(q, d) = (U q)·(V d) + Σ_i w_i q_i d_i, from two candidate sources.

Bai et al., "Supervised Semantic Indexing" (CIKM 2009): f(q, d) = qᵀ(UᵀV + I)d, exported by every
model kind as a semantic part s(d) = (U q)·(V d) and a diagonal part l(d) = Σ_i w_i q_i d_i.

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

With an approximate index (HNSW, IVF) s_K is not a true bound and the result is approximate; its
recall against this exact ranking is what `ssi bench` reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SemanticSearch = Callable[[int], tuple[np.ndarray, np.ndarray]]


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
    def empty(cls) -> Ranked:
        nothing = np.zeros(0, dtype=np.float64)
        return cls(np.zeros(0, dtype=np.int64), nothing, nothing, nothing, 0, 0)


def lookup(rows: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """values[rows == wanted[j]] for each j, 0 where `wanted[j]` is not in the sorted `rows`."""
    if rows.shape[0] == 0:
        return np.zeros(wanted.shape[0], dtype=np.float64)
    pos = np.searchsorted(rows, wanted)
    pos_clipped = np.minimum(pos, rows.shape[0] - 1)
    found = rows[pos_clipped] == wanted
    return np.where(found, values[pos_clipped], 0.0)


def exact_top(
    query_embedding: np.ndarray,
    want: int,
    search: SemanticSearch,
    lexical: tuple[np.ndarray, np.ndarray, np.ndarray],
    embeddings: np.ndarray,
    n_live: int,
    pool: int,
    nonnegative: bool,
) -> Ranked:
    """The `want` live rows of highest f, best first (ties broken by row number).

    `search(K)` returns (semantic scores, rows) of the K best live rows by (V d)·(U q), best first;
    `lexical` is (rows sorted, l, l⁺) for the live rows sharing a word with q; `embeddings[row]` is V d.
    """
    if want <= 0 or n_live == 0:
        return Ranked.empty()
    uq = np.asarray(query_embedding, dtype=np.float64)
    lex_rows, lex_vals, lex_upper = lexical
    K = min(max(pool, want), n_live)
    searches = 0
    while True:
        sem_found, found = search(K)
        searches += 1
        keep = found >= 0
        sem_found, found = sem_found[keep], found[keep]
        covered_all = found.shape[0] >= n_live
        f_found = embeddings[found].astype(np.float64) @ uq + lookup(lex_rows, lex_vals, found)
        tau = float(np.partition(f_found, -want)[-want]) if found.shape[0] >= want else -np.inf
        s_k = float(sem_found.min()) if found.shape[0] else np.inf
        if covered_all or nonnegative or tau >= s_k or K >= n_live:
            break
        K = min(2 * K, n_live)
    if covered_all:
        extra = np.zeros(0, dtype=np.int64)
    else:
        # FAISS sums in float32 in its own order: a little slack keeps a near-tie on the safe side.
        slack = 1e-5 * (1.0 + abs(tau) + abs(s_k)) if np.isfinite(tau) else 0.0
        threshold = tau - s_k - slack
        outside = ~np.isin(lex_rows, found, assume_unique=True)
        extra = lex_rows[outside & (lex_upper > threshold)]
    candidates = np.concatenate([found, extra]).astype(np.int64)
    semantic = embeddings[candidates].astype(np.float64) @ uq
    lexical_part = lookup(lex_rows, lex_vals, candidates)
    scores = semantic + lexical_part
    order = np.lexsort((candidates, -scores))[:want]
    return Ranked(
        rows=candidates[order],
        scores=scores[order],
        semantic=semantic[order],
        lexical=lexical_part[order],
        candidates=int(candidates.shape[0]),
        searches=searches,
    )
