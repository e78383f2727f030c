"""The top singular vectors of a corpus's rows: LSA's projection, OPCA's and S2Net's starting basis, and the
LSI baseline of the evaluation harness (one definition for the training kinds and the harness that scores
them beside it).

One SVD at the largest k serves every smaller k: the top-k singular vectors are a prefix of the top-K ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds


@dataclass(frozen=True)
class LsiBasis:
    """Right singular vectors `components` [k_max, D] in decreasing order of `singular_values`."""

    components: np.ndarray
    singular_values: np.ndarray

    @property
    def k_max(self) -> int:
        return int(self.components.shape[0])

    @classmethod
    def fit(cls, X: sp.csr_matrix, k: int, seed: int = 0) -> LsiBasis:
        """Top-k SVD of X; k is capped at min(shape) − 1 (ARPACK's limit), dense SVD for tiny X."""
        X = sp.csr_matrix(X, dtype=np.float32)
        limit = min(X.shape) - 1
        if limit < 1:
            raise ValueError(f"LSI needs at least 2 documents and 2 words, got a {X.shape} matrix")
        k = max(1, min(k, limit))
        if min(X.shape) <= 500:
            _, s, vt = np.linalg.svd(X.toarray(), full_matrices=False)
            s, vt = s[:k], vt[:k]
        else:
            v0 = np.random.default_rng(seed).standard_normal(min(X.shape)).astype(np.float32)
            _, s, vt = svds(X, k=k, v0=v0, solver="arpack")
            order = np.argsort(-s)
            s, vt = s[order], vt[order]
        return cls(np.ascontiguousarray(vt, dtype=np.float32), np.asarray(s, dtype=np.float32))
