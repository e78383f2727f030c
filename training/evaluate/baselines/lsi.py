"""Latent Semantic Indexing: tf-idf similarity seen through the top singular vectors of the corpus.

    X ≈ U_k Σ_k V_kᵀ  (truncated SVD of the [n_docs, D] tf-idf matrix, scipy.sparse.linalg.svds)
    f(q, d) = (V_kᵀ q) · (V_kᵀ d) = qᵀ V_k V_kᵀ d        (Deerwester et al., 1990)

This is the form Bai et al. (2009) compare SSI with (qᵀ UᵀU d with U = V_kᵀ): on unit q and d it
is the part of the cosine q · d that lies in the top-k subspace, so it mixes with tf-idf on the same
scale. (`normalize=True` gives the cosine between projections instead; on Wikispeedia links and
keyword queries it was the weaker of the two.)

One SVD at the largest k serves every smaller k: the top-k singular vectors are a prefix of the
top-K ones, so a tuning grid over k costs one decomposition.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from training.evaluate.features import TextFeatures
from training.evaluate.scorer import DEFAULT_BLOCK, VectorScorer, l2_normalize_rows
from training.fitted.basis import LsiBasis

DEFAULT_K = 100


class LsiScorer(VectorScorer):
    """Inner product (or cosine) between LSI projections of the query and of every document."""

    def __init__(
        self,
        features: TextFeatures,
        X: sp.csr_matrix,
        basis: LsiBasis,
        k: int = DEFAULT_K,
        *,
        normalize: bool = False,
        block_size: int = DEFAULT_BLOCK,
    ) -> None:
        if k < 1:
            raise ValueError(f"LSI k must be positive, got {k}")
        self.features = features
        self.block_size = block_size
        self.k = min(k, basis.k_max)
        self.normalize = normalize
        self._P_T = np.ascontiguousarray(basis.components[: self.k].T)  # [D, k]
        self._docs = self._project(X)

    @property
    def n_docs(self) -> int:
        return int(self._docs.shape[0])

    def params(self) -> dict[str, Any]:
        return {"k": self.k, **({"normalize": True} if self.normalize else {})}

    def _project(self, M: sp.csr_matrix) -> np.ndarray:
        projected = np.asarray(M @ self._P_T, dtype=np.float32)
        return l2_normalize_rows(projected) if self.normalize else projected

    def score_vectors(self, Q: sp.csr_matrix) -> np.ndarray:
        return self._project(Q) @ self._docs.T
