"""Query expansion by Rocchio pseudo-relevance feedback on tf-idf (Rocchio, 1971).

A first tf-idf retrieval takes the top m documents as if they were relevant; the query moves
toward their centroid, optionally cut to its t heaviest expansion words, and is scored again:

    c = (1/m) Σ_{d ∈ top_m(q)} d,     q' = q + β · c,     f(q, d) = q' · d / ‖q'‖

No judgment is used: the feedback is the scorer's own first ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from training.evaluate.baselines.tfidf import TfidfScorer
from training.evaluate.scorer import VectorScorer

DEFAULT_FB_DOCS = 10
DEFAULT_FB_WEIGHT = 0.5


def keep_top_per_row(M: sp.csr_matrix, t: int) -> sp.csr_matrix:
    """The t largest entries of each row of a non-negative CSR matrix (the rest dropped)."""
    M = sp.csr_matrix(M)
    keep = np.zeros(M.nnz, dtype=bool)
    for row in range(M.shape[0]):
        start, stop = M.indptr[row], M.indptr[row + 1]
        if stop - start <= t:
            keep[start:stop] = True
        else:
            top = np.argpartition(-M.data[start:stop], t - 1)[:t]
            keep[start + top] = True
    out = sp.csr_matrix((M.data * keep, M.indices.copy(), M.indptr.copy()), shape=M.shape)
    out.eliminate_zeros()
    return out


class RocchioScorer(VectorScorer):
    """tf-idf cosine after one round of Rocchio pseudo-relevance feedback."""

    def __init__(
        self,
        tfidf: TfidfScorer,
        fb_docs: int = DEFAULT_FB_DOCS,
        fb_weight: float = DEFAULT_FB_WEIGHT,
        fb_terms: int | None = None,
    ) -> None:
        if fb_docs < 1 or fb_weight < 0 or (fb_terms is not None and fb_terms < 1):
            raise ValueError(f"bad feedback parameters: docs={fb_docs}, weight={fb_weight}, terms={fb_terms}")
        self.tfidf = tfidf
        self.features = tfidf.features
        self.block_size = tfidf.block_size
        self.fb_docs = min(fb_docs, tfidf.n_docs)
        self.fb_weight = fb_weight
        self.fb_terms = fb_terms

    @property
    def n_docs(self) -> int:
        return self.tfidf.n_docs

    def params(self) -> dict[str, Any]:
        return {"fb_docs": self.fb_docs, "fb_weight": self.fb_weight, "fb_terms": self.fb_terms}

    def expand(self, Q: sp.csr_matrix, first: np.ndarray | None = None) -> sp.csr_matrix:
        """q' = q + β · centroid of the top-m tf-idf documents (centroid cut to t words if set).

        `first` is the first-pass tf-idf scores of Q when already known.
        """
        if first is None:
            first = self.tfidf.score_vectors(Q)
        m = self.fb_docs
        top = np.argpartition(-first, m - 1, axis=1)[:, :m]
        rows = np.repeat(np.arange(Q.shape[0]), m)
        weights = np.full(rows.shape[0], 1.0 / m, dtype=np.float32)
        A = sp.csr_matrix((weights, (rows, top.ravel())), shape=first.shape)
        centroid = sp.csr_matrix(A @ self.tfidf.X, dtype=np.float32)
        if self.fb_terms is not None:
            centroid = keep_top_per_row(centroid, self.fb_terms)
        return sp.csr_matrix(Q + self.fb_weight * centroid, dtype=np.float32)

    def score(self, query_texts: Sequence[str]) -> np.ndarray:
        # The first pass goes through the tf-idf scorer's memo (shared by a whole tuning grid).
        texts = list(query_texts)
        out = np.empty((len(texts), self.n_docs), dtype=np.float32)
        for start in range(0, len(texts), self.block_size):
            block = texts[start : start + self.block_size]
            out[start : start + len(block)] = self._rescore(self.features(block), self.tfidf.score(block))
        return out

    def score_vectors(self, Q: sp.csr_matrix) -> np.ndarray:
        return self._rescore(Q, None)

    def _rescore(self, Q: sp.csr_matrix, first: np.ndarray | None) -> np.ndarray:
        expanded = self.expand(Q, first)
        norms = np.sqrt(np.asarray(expanded.multiply(expanded).sum(axis=1), dtype=np.float32)).ravel()
        scores = self.tfidf.docs.products(expanded)
        np.divide(scores, norms[:, None], out=scores, where=norms[:, None] > 0)
        return scores
