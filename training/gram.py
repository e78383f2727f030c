"""The fixed lexical block q·d of the training triples.

For the kinds whose diagonal term is fixed (w = 1), q·d never changes during training, so it is
computed once for every (training query, document) when that fits in `max_entries`, and sliced
per step; otherwise each step computes its own B × P block with a sparse product.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ssi.products import DocMatrix

ROW_BLOCK = 1024


class LexicalBlocks:
    def __init__(self, X_queries: sp.csr_matrix, docs: DocMatrix, max_entries: int) -> None:
        self.X_queries = X_queries
        self.docs = docs
        n = X_queries.shape[0] * docs.n_docs
        self.cached = self._all() if 0 < n <= max_entries else None

    def _all(self) -> np.ndarray:
        out = np.empty((self.X_queries.shape[0], self.docs.n_docs), dtype=np.float32)
        for start in range(0, out.shape[0], ROW_BLOCK):
            out[start : start + ROW_BLOCK] = self.docs.products(self.X_queries[start : start + ROW_BLOCK])
        return out

    def block(
        self, query_rows: np.ndarray, pool_rows: np.ndarray | None, queries: sp.csr_matrix | None = None
    ) -> np.ndarray:
        """q·d for the step's queries (`queries` overrides the stored rows, e.g. keyword cuts)."""
        if queries is not None:
            if pool_rows is None:
                return self.docs.products(queries)
            return np.asarray((queries @ self.docs.X[pool_rows].T).toarray(), dtype=np.float32)
        if self.cached is not None:
            rows = self.cached[query_rows]
            return rows if pool_rows is None else np.ascontiguousarray(rows[:, pool_rows])
        queries = self.X_queries[query_rows]
        if pool_rows is None:
            return self.docs.products(queries)
        return np.asarray((queries @ self.docs.X[pool_rows].T).toarray(), dtype=np.float32)
