"""How a filtered query is searched: an exact scan of the matching rows, or the vector index with them as a
FAISS selector. Either way the hits are exactly the top k of f(q, d) among the matching documents (as exact as
the unfiltered search of that index), and a page is never short while matching documents remain.

- Few matching rows (at most SSI_FILTER_EXACT_DOCS, or SSI_FILTER_EXACT_FRACTION of the live ones; Vespa scans
  exactly below 5 % of the collection, Weaviate below 40,000 objects): f of each of them, s and l from the
  same parts the reranker scores with (the stored e(d) and the lexical term's `for_rows`, service.rerank), so the
  top k is a brute force over the matching set; no graph walk that a selective filter would starve.
- More: the index searched with the matching rows as its selector (IDSelectorBitmap through SearchParameters,
  service.index), and the reranker's exact top k over the matching rows (their mask stands for the live rows,
  so the lexical candidates obey the filter too). An approximate index with a selector may come back short
  (HNSW's walk collapses when the filter cuts its graph: Qdrant measured 0.1 % recall@10 for a 1 % filter);
  when it answers fewer rows than asked while that many match, the query is scanned exactly instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from service.rerank import LexicalTerm, Ranked, RowVectors, prefers_dense

EXACT_BLOCK = 8192  # matching rows scored at once by the exact scan (bounds its temporary arrays)
# At most this many times the HNSW ef_search a filtered walk gets (filtered_ef).
FILTERED_EF_MAX_FACTOR = 4


@dataclass(frozen=True, slots=True)
class Planner:
    exact_docs: int  # at most this many matching rows: scanned exactly
    exact_fraction: float  # or at most this share of the live rows

    def exact(self, matching: int, n_live: int) -> bool:
        return matching <= self.exact_docs or matching <= self.exact_fraction * n_live


def exact_scan(uq: np.ndarray, want: int, rows: np.ndarray, lexical: LexicalTerm, vectors: RowVectors) -> Ranked:
    """The top `want` of `rows` by f = s + l, each scored exactly (`vectors(rows) · uq`, and l from the lexical
    term's `for_rows`, or from its one dense pass over every row where that costs less, as the reranker chooses:
    service.rerank.prefers_dense), in blocks; ties by row (as `Ranked.best`)."""
    best: Ranked | None = None
    every = lexical.everywhere() if prefers_dense(lexical, int(rows.shape[0])) else None
    for start in range(0, rows.shape[0], EXACT_BLOCK):
        block = rows[start : start + EXACT_BLOCK]
        semantic = vectors(block).astype(np.float64) @ uq
        found = every[block] if every is not None else lexical.for_rows(block)[0]
        lexical_part = np.asarray(found, dtype=np.float64)
        if best is not None:
            block = np.concatenate([best.rows, block])
            semantic = np.concatenate([best.semantic, semantic])
            lexical_part = np.concatenate([best.lexical, lexical_part])
        best = Ranked.best(block, semantic, lexical_part, want, 0, 0)
    if best is None:
        return Ranked.empty()
    return Ranked(best.rows, best.scores, best.semantic, best.lexical, int(rows.shape[0]), 0)


def filtered_ef(ef_search: int, matching: int, n_live: int) -> int:
    """HNSW's ef_search for a walk whose answers must match a filter that `matching` of `n_live` rows match: the
    default's ef / √share, at most FILTERED_EF_MAX_FACTOR times it. A walk with a selector keeps only the matching
    nodes it passes, so it comes back with fewer good candidates as the share falls: over 100k passages at the
    default 128, recall@10 under a 10 % filter was 0.978 (benchmarks.filtered_search), 0.985 under 50 %; 128/√0.1
    = 405 there. A request's own ef_search is taken as given."""
    share = max(matching, 1) / max(n_live, 1)
    return int(min(ef_search * FILTERED_EF_MAX_FACTOR, math.ceil(ef_search / math.sqrt(min(share, 1.0)))))


def selector_bits(rows: np.ndarray, n_rows: int) -> np.ndarray:
    """The little-endian bitmap of `rows` over n_rows rows, as FAISS's IDSelectorBitmap reads it."""
    mask = np.zeros(n_rows, dtype=bool)
    mask[rows] = True
    return np.packbits(mask, bitorder="little")
