"""Dense inner products Q Xᵀ of sparse query rows with sparse document rows, fast.

Scoring every document for long queries (whole documents as queries) is a sparse × sparse
product whose cost is Σ over query entries of the document frequency of their word: the few
words present in most documents dominate it. Those words' columns are kept as a dense block and
multiplied with BLAS; the rest stays sparse:

    Q Xᵀ = Q_F X_Fᵀ (dense, frequent words F) + Q_R X_Rᵀ (sparse, the other words)

The split is used only when it is cheaper for the queries at hand (keyword queries stay sparse).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

# A dense multiply-add is this many times cheaper than one step of a sparse product (measured
# on the 2-core dev machine; only the choice of path depends on it, never the result).
DENSE_SPEEDUP = 100.0
DEFAULT_DENSE_BUDGET = 256 * 1024 * 1024


class DocMatrix:
    """Document rows X (n_docs × D, CSR) prepared for many products `Q Xᵀ`, with the rows S their semantic
    part embeds (S = X under tf-idf)."""

    def __init__(
        self,
        X: sp.csr_matrix,
        *,
        dense_budget_bytes: int = DEFAULT_DENSE_BUDGET,
        min_df_fraction: float = 0.1,
        ids: Sequence[str] | None = None,
        semantic: sp.csr_matrix | None = None,
    ) -> None:
        """`ids`: the rows' document ids where known, for forms with per-document state (ssi.forms.halftrans).

        `semantic`: the rows a form's semantic part embeds, where they are not X itself (`S`;
        `ssi.vocab.Vocabulary.semantic_rows`: BM25's document rows scaled to unit tf-idf-like vectors).
        The products, the lexical part, are always over X.
        """
        X = sp.csr_matrix(X, dtype=np.float32)
        X.sum_duplicates()
        if ids is not None and len(ids) != X.shape[0]:
            raise ValueError(f"{len(ids)} document ids for {X.shape[0]} rows")
        if semantic is not None and semantic.shape != X.shape:
            raise ValueError(f"semantic rows {semantic.shape} for lexical rows {X.shape}")
        self.X = X
        self.S = X if semantic is None else sp.csr_matrix(semantic, dtype=np.float32)
        self.ids = ids
        self.n_docs, self.n_features = X.shape
        df = np.bincount(X.indices, minlength=self.n_features)
        self.df = df
        max_dense = int(dense_budget_bytes // max(1, 4 * self.n_docs))
        frequent = np.flatnonzero(df >= max(2.0, min_df_fraction * self.n_docs))
        frequent = frequent[np.argsort(-df[frequent], kind="stable")][:max_dense]
        self.dense_cols = np.sort(frequent)
        self._dense_pos = np.full(self.n_features, -1, dtype=np.int64)
        self._dense_pos[self.dense_cols] = np.arange(self.dense_cols.shape[0])
        # X_F as [F, n_docs] so Q_F @ X_Fᵀ is one contiguous GEMM.
        self._dense_T = np.ascontiguousarray(X[:, self.dense_cols].toarray().T)
        keep = self._dense_pos[X.indices] < 0
        rest = sp.csr_matrix((X.data * keep, X.indices.copy(), X.indptr.copy()), shape=X.shape)
        rest.eliminate_zeros()
        self._rest_T = rest.T.tocsr()
        self._all_T = X.T.tocsr()

    def with_ids(self, ids: Sequence[str] | None) -> DocMatrix:
        """The same prepared rows (shared, not copied) named by document ids."""
        if ids is not None and len(ids) != self.n_docs:
            raise ValueError(f"{len(ids)} document ids for {self.n_docs} rows")
        named = copy.copy(self)
        named.ids = ids
        return named

    def products(self, Q: sp.csr_matrix, weights: np.ndarray | None = None) -> np.ndarray:
        """Dense float32 [n_queries, n_docs] = (Q · diag(weights)) Xᵀ."""
        Q = sp.csr_matrix(Q, dtype=np.float32)
        if Q.shape[1] != self.n_features:
            raise ValueError(f"queries have {Q.shape[1]} features, documents {self.n_features}")
        data = Q.data if weights is None else Q.data * np.asarray(weights, dtype=np.float32)[Q.indices]
        n = Q.shape[0]
        pos = self._dense_pos[Q.indices]
        in_dense = pos >= 0
        # Sparse cost of the frequent part vs the dense GEMM that would replace it.
        sparse_cost = float(self.df[Q.indices[in_dense]].sum())
        dense_cost = float(n) * self.dense_cols.shape[0] * self.n_docs / DENSE_SPEEDUP
        if self.dense_cols.shape[0] == 0 or sparse_cost <= dense_cost:
            Qw = sp.csr_matrix((data, Q.indices, Q.indptr), shape=Q.shape)
            return np.asarray((Qw @ self._all_T).toarray(), dtype=np.float32)
        rows = np.repeat(np.arange(n), np.diff(Q.indptr))
        Q_dense = np.zeros((n, self.dense_cols.shape[0]), dtype=np.float32)
        Q_dense[rows[in_dense], pos[in_dense]] = data[in_dense]
        out = Q_dense @ self._dense_T
        Q_rest = sp.csr_matrix((data * ~in_dense, Q.indices.copy(), Q.indptr.copy()), shape=Q.shape)
        Q_rest.eliminate_zeros()
        if Q_rest.nnz:
            out += (Q_rest @ self._rest_T).toarray()
        return np.asarray(out, dtype=np.float32)
