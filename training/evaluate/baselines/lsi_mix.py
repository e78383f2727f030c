"""The α-mixture of LSI and tf-idf cosine (the strongest classic baseline of Bai et al., 2009).

    f(q, d) = α · qᵀ V_k V_kᵀ d + (1 − α) · q · d  =  qᵀ (α V_k V_kᵀ + (1 − α) I) d

LSI alone blurs exact word matches; mixing it back with tf-idf keeps them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from training.evaluate.baselines.lsi import LsiScorer
from training.evaluate.baselines.tfidf import TfidfScorer
from training.evaluate.scorer import VectorScorer

DEFAULT_ALPHA = 0.3


class LsiMixScorer(VectorScorer):
    """α · LSI + (1 − α) · tf-idf on the same tf-idf query vectors."""

    def __init__(self, tfidf: TfidfScorer, lsi: LsiScorer, alpha: float = DEFAULT_ALPHA) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if tfidf.features is not lsi.features:
            raise ValueError("tf-idf and LSI must share one featurizer (the same query vectors)")
        self.features = tfidf.features
        self.block_size = tfidf.block_size
        self.tfidf, self.lsi, self.alpha = tfidf, lsi, alpha

    @property
    def n_docs(self) -> int:
        return self.tfidf.n_docs

    def params(self) -> dict[str, Any]:
        return {"k": self.lsi.k, "alpha": self.alpha}

    def score_vectors(self, Q: sp.csr_matrix) -> np.ndarray:
        return (1.0 - self.alpha) * self.tfidf.score_vectors(Q) + self.alpha * self.lsi.score_vectors(Q)

    def score(self, query_texts: Sequence[str]) -> np.ndarray:
        # Through the tf-idf scorer's memo: every α of a tuning grid reuses the same cosines.
        return (1.0 - self.alpha) * self.tfidf.score(query_texts) + self.alpha * self.lsi.score(query_texts)
