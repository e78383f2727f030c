"""Per-query ranking metrics from dense score matrices, with the filtered setting applied.

A ranking of query q orders its candidates — every document except `excluded(q)` — by score,
highest first, ties broken by corpus position (lower first), the same rule `ssi rank` uses.

- MAP, P@10, NDCG@10 come from ranx (`block_metrics`), fed the exact full-depth ranking;
- rank loss is computed here, vectorized: the share of (relevant, non-relevant) candidate pairs
  ordered wrongly, a tie counting half,

      RL(q) = Σ_{r ∈ R(q)} ( #{n ∈ N(q): s_n > s_r} + ½ #{n ∈ N(q): s_n = s_r} ) / (|R(q)| · |N(q)|);

- `quick_metrics` / `quick_map` give the same MAP, P@10 and NDCG@10 from the ranks of the relevant
  documents alone, in numpy (no sort of the candidates): the trainer's per-epoch validation.
  With 1-based ranks r_1 < … < r_R of the relevant documents,

      AP = (1/R) Σ_i i / r_i,     P@k = #{r_i ≤ k} / k,
      NDCG@k = Σ_{r_i ≤ k} 1/log2(1 + r_i) / Σ_{i ≤ min(R,k)} 1/log2(1 + i).

Means come with their standard error over queries, std(ddof=1) / √n.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from training.evaluate.tasks import RetrievalTask

MAP = "map"
P10 = "p@10"
NDCG10 = "ndcg@10"
RANK_LOSS = "rank_loss"
METRICS = (MAP, P10, NDCG10, RANK_LOSS)
LABELS = {MAP: "MAP", P10: "P@10", NDCG10: "NDCG@10", RANK_LOSS: "rank loss"}
_RANX_NAMES = {MAP: "map", P10: "precision@10", NDCG10: "ndcg@10"}
CUTOFF = 10
# Bound the temporary [relevant entries, n_docs] comparison arrays to about this many cells.
_CHUNK_CELLS = 1 << 24


@dataclass(frozen=True)
class MetricSummary:
    mean: float
    stderr: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.4f} ± {self.stderr:.4f}"


def summarize(values: np.ndarray) -> MetricSummary:
    """Mean and its standard error, std(ddof=1)/√n (0 with fewer than two values)."""
    values = np.asarray(values, dtype=np.float64)
    n = int(values.shape[0])
    if n == 0:
        return MetricSummary(float("nan"), float("nan"), 0)
    stderr = float(values.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    return MetricSummary(float(values.mean()), stderr, n)


def _check(scores: np.ndarray, relevant: sp.csr_matrix, excluded: sp.csr_matrix) -> None:
    if scores.ndim != 2 or scores.shape != relevant.shape or scores.shape != excluded.shape:
        raise ValueError(f"scores {scores.shape} do not match judgments {relevant.shape} / exclusions {excluded.shape}")
    if not np.isfinite(scores).all():
        raise ValueError("scores contain NaN or infinite values")


def masked_scores(scores: np.ndarray, excluded: sp.csr_matrix) -> np.ndarray:
    """A float64 copy of the scores with excluded documents at −∞ (below every candidate)."""
    masked = np.array(scores, dtype=np.float64)
    rows, cols = excluded.nonzero()
    masked[rows, cols] = -np.inf
    return masked


@dataclass(frozen=True)
class RelevantRanks:
    """One entry per (query, relevant document), in CSR order of the judgments."""

    rows: np.ndarray  # query row of the entry
    ranks: np.ndarray  # 1-based rank among the query's candidates
    wrong: np.ndarray  # non-relevant candidates above it, ties counting half
    n_relevant: np.ndarray  # per query
    n_candidates: np.ndarray  # per query: n_docs − |excluded|


def relevant_ranks(scores: np.ndarray, relevant: sp.csr_matrix, excluded: sp.csr_matrix) -> RelevantRanks:
    """Rank of every relevant document, rank = 1 + #{s_j > s_r} + #{s_j = s_r, j < r} over candidates."""
    _check(scores, relevant, excluded)
    n_queries, n_docs = scores.shape
    relevant = sp.csr_matrix(relevant, dtype=bool)
    relevant.sort_indices()
    masked = masked_scores(scores, excluded)
    n_rel = np.diff(relevant.indptr)
    rows = np.repeat(np.arange(n_queries), n_rel)
    cols = relevant.indices.astype(np.int64)
    if np.isneginf(masked[rows, cols]).any():
        raise ValueError("a relevant document is also excluded from its query's ranking")
    ranks = np.empty(rows.shape[0], dtype=np.int64)
    wrong = np.empty(rows.shape[0], dtype=np.float64)
    position = np.arange(n_docs)
    chunk = max(1, _CHUNK_CELLS // max(1, n_docs))
    for start in range(0, rows.shape[0], chunk):
        r, c = rows[start : start + chunk], cols[start : start + chunk]
        M = masked[r]
        s = M[np.arange(r.shape[0]), c][:, None]
        is_rel = relevant[r].toarray()
        above = M > s
        tied = M == s
        ranks[start : start + chunk] = 1 + above.sum(1) + (tied & (position < c[:, None])).sum(1)
        wrong[start : start + chunk] = (above & ~is_rel).sum(1) + 0.5 * (tied & ~is_rel).sum(1)
    n_candidates = n_docs - np.diff(sp.csr_matrix(excluded).indptr)
    return RelevantRanks(rows, ranks, wrong, n_rel, n_candidates)


def _sorted_by_rank(rr: RelevantRanks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entries ordered by (query, rank), with each entry's 1-based position among its query's."""
    order = np.lexsort((rr.ranks, rr.rows))
    rows, ranks = rr.rows[order], rr.ranks[order]
    starts = np.concatenate([[0], np.cumsum(rr.n_relevant)[:-1]])
    position = np.arange(rows.shape[0]) - starts[rows] + 1
    return rows, ranks, position


def average_precision(rr: RelevantRanks) -> np.ndarray:
    """AP per query = (1/R) Σ_i i / r_i over the sorted relevant ranks r_i."""
    rows, ranks, position = _sorted_by_rank(rr)
    total = np.bincount(rows, weights=position / ranks, minlength=rr.n_relevant.shape[0])
    return np.divide(total, rr.n_relevant, out=np.zeros_like(total), where=rr.n_relevant > 0)


def precision_at(rr: RelevantRanks, k: int = CUTOFF) -> np.ndarray:
    """P@k = #{relevant in the top k} / k (k shrinks to the number of candidates, as in ranx)."""
    hits = np.bincount(rr.rows, weights=(rr.ranks <= k).astype(np.float64), minlength=rr.n_relevant.shape[0])
    return hits / np.minimum(k, np.maximum(rr.n_candidates, 1))


def ndcg_at(rr: RelevantRanks, k: int = CUTOFF) -> np.ndarray:
    """Binary NDCG@k = Σ_{r_i ≤ k} 1/log2(1 + r_i) / Σ_{i ≤ min(R, k)} 1/log2(1 + i)."""
    gains = np.where(rr.ranks <= k, 1.0 / np.log2(1.0 + rr.ranks), 0.0)
    dcg = np.bincount(rr.rows, weights=gains, minlength=rr.n_relevant.shape[0])
    discounts = np.concatenate([[0.0], np.cumsum(1.0 / np.log2(2.0 + np.arange(k)))])
    ideal = discounts[np.minimum(rr.n_relevant, k)]
    return np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)


def rank_loss(rr: RelevantRanks) -> np.ndarray:
    """Share of (relevant, non-relevant) candidate pairs ordered wrongly, ties counting half."""
    wrong = np.bincount(rr.rows, weights=rr.wrong, minlength=rr.n_relevant.shape[0])
    pairs = rr.n_relevant * (rr.n_candidates - rr.n_relevant)
    return np.divide(wrong, pairs, out=np.zeros_like(wrong), where=pairs > 0)


def quick_metrics(scores: np.ndarray, relevant: sp.csr_matrix, excluded: sp.csr_matrix) -> dict[str, np.ndarray]:
    """All four metrics per query, in numpy only (no candidate sort)."""
    rr = relevant_ranks(scores, relevant, excluded)
    return {MAP: average_precision(rr), P10: precision_at(rr), NDCG10: ndcg_at(rr), RANK_LOSS: rank_loss(rr)}


def quick_map(task: RetrievalTask, scores: np.ndarray) -> float:
    """Mean average precision of `scores` [task.n_queries, task.n_docs] on the task, numpy only."""
    rr = relevant_ranks(scores, task.relevant_matrix, task.excluded_matrix)
    return float(average_precision(rr).mean())


def ranked_runs(scores: np.ndarray, excluded: sp.csr_matrix) -> list[np.ndarray]:
    """Per query, the full candidate ranking as ranx's [[doc position, score], …] float64 array."""
    masked = masked_scores(scores, excluded)
    order = np.argsort(-masked, axis=1, kind="stable")
    n_candidates = scores.shape[1] - np.diff(sp.csr_matrix(excluded).indptr)
    runs = []
    for row in range(scores.shape[0]):
        keep = order[row, : n_candidates[row]]
        runs.append(np.column_stack((keep.astype(np.float64), masked[row, keep])))
    return runs


def ranx_metrics(
    scores: np.ndarray,
    relevant: sp.csr_matrix,
    excluded: sp.csr_matrix,
    metrics: Sequence[str] = (MAP, P10, NDCG10),
) -> dict[str, np.ndarray]:
    """MAP / P@10 / NDCG@10 per query by ranx, on the exact full-depth filtered ranking."""
    from numba.core.errors import NumbaTypeSafetyWarning
    from numba.typed import List as TypedList
    from ranx import evaluate as ranx_evaluate

    _check(scores, relevant, excluded)
    relevant = sp.csr_matrix(relevant, dtype=bool)
    qrels = TypedList(
        [
            np.column_stack((relevant.indices[a:b].astype(np.float64), np.ones(b - a)))
            for a, b in zip(relevant.indptr[:-1], relevant.indptr[1:], strict=True)
        ]
    )
    run = TypedList(ranked_runs(scores, excluded))
    names = [_RANX_NAMES[m] for m in metrics]
    with warnings.catch_warnings():
        # ranx's compiled kernels cast our float doc positions; harmless, but noisy on every call.
        warnings.simplefilter("ignore", NumbaTypeSafetyWarning)
        values = ranx_evaluate(qrels, run, names, return_mean=False)
    if len(names) == 1:
        values = {names[0]: values}
    return {m: np.asarray(values[_RANX_NAMES[m]], dtype=np.float64) for m in metrics}


def block_metrics(scores: np.ndarray, relevant: sp.csr_matrix, excluded: sp.csr_matrix) -> dict[str, np.ndarray]:
    """The reported metrics of a block of queries: ranx for MAP, P@10, NDCG@10; rank loss here."""
    values = ranx_metrics(scores, relevant, excluded)
    values[RANK_LOSS] = rank_loss(relevant_ranks(scores, relevant, excluded))
    return values


def compile_ranx() -> None:
    """Compile ranx's numba kernels once, on a two-document ranking.

    ranx caches what numba compiles beside its own modules, so an install that calls this spares the
    first `ssi eval` in every new environment the compile (about 40 s on two cores)."""
    scores = np.array([[0.5, 0.25], [0.25, 0.5]])
    relevant = sp.csr_matrix(np.eye(2, dtype=bool))
    ranx_metrics(scores, relevant, sp.csr_matrix((2, 2), dtype=bool))
