"""Topic models in the language-model framework (paper 003, sections 3.1–3.3): PLSA (eq. 2), the
bilingual topic model BLTM (eq. 17), BLTM with posterior regularization and its one-vocabulary
variant all score a document the same way once trained:

    P_model(w|d) = Σ_z P_q(w|z) P(z|d)                                         (eqs. 2, 17)
    log P(q|d)   = Σ_w c(w, q) log[α P(w|C) + (1 − α)(λ P_ml(w|d) + (1 − λ) P_model(w|d))]

(ssi.forms.query_likelihood). P_q(w|z) is the query language's word distribution of topic z
(BLTM's φ^Q; PLSA and the one-vocabulary variant have one φ for both sides). P(z|d) is found at
scoring time by folding the document in: EM over its own words with the document language's
distributions P_d(w|z) fixed (the paper folds in with 20 iterations, section 5.2), under the
Dirichlet prior the model was trained with. So the form holds no per-document state, and a
document added after training is scored exactly like a training one.

Not served exactly: log P(q|d) is a sum of logarithms of mixtures, no inner product of a query
embedding with a stored document vector, so there is no query map (index_dims 0, no encoder) and
the service refuses the bundle at load; `ssi eval` ranks by `reference_scores`. A service could
use it as a rerank stage over candidates from an index; this one does not.

Arrays (float32): `query_words`, `doc_words` (K × D, rows are distributions over words), the
collection model `background` (D), the vocabulary's `idf` (D, to recover term counts from tf-idf
rows), and `mixture` = [λ, α, fold-in iterations, topic prior α_θ].
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numba
import numpy as np
import scipy.sparse as sp

from ssi.forms.base import ArraySpec, DocumentKeys, DocumentProducts
from ssi.forms.query_likelihood import LanguageModelForm, query_log_likelihood, term_counts, unigram_rows
from ssi.jit_cache import CACHE

MIXTURE = ("lambda", "alpha", "fold_in_iterations", "topic_prior")  # the entries of the `mixture` array
MAX_FOLD_IN = 200


@numba.njit(parallel=True, cache=CACHE)
def fold_in(
    indptr: np.ndarray, indices: np.ndarray, counts: np.ndarray, phi: np.ndarray, iterations: int, prior: float
) -> np.ndarray:
    """P(z|d) of each count row by EM with P_d(w|z) fixed (`phi`: D × K, word-major), MAP under Dir(prior).

    E-step: P(z|d, w) ∝ P_d(w|z) P(z|d); M-step: P(z|d) ∝ Σ_w c(w, d) P(z|d, w) + prior − 1.
    """
    n, k = indptr.shape[0] - 1, phi.shape[1]
    theta = np.empty((n, k), dtype=np.float32)
    for d in numba.prange(n):
        t = np.full(k, 1.0 / k)
        acc = np.empty(k)
        post = np.empty(k)
        for _ in range(iterations):
            acc[:] = 0.0
            for j in range(indptr[d], indptr[d + 1]):
                w = indices[j]
                s = 0.0
                for z in range(k):
                    post[z] = phi[w, z] * t[z]
                    s += post[z]
                if s > 0.0:
                    scale = counts[j] / s
                    for z in range(k):
                        acc[z] += post[z] * scale
            total = 0.0
            for z in range(k):
                acc[z] = max(acc[z] + prior - 1.0, 0.0)
                total += acc[z]
            if total <= 0.0:
                break
            for z in range(k):
                t[z] = acc[z] / total
        for z in range(k):
            theta[d, z] = t[z]
    return theta


class TopicModel(LanguageModelForm):
    name: ClassVar[str] = "topic-lm"
    description: ClassVar[str] = "Σ_w c(w,q) log[αP(w|C) + (1−α)(λP(w|d) + (1−λ)Σ_z P(w|z)P(z|d))], P(z|d) folded in"
    paper: ClassVar[str] = "Clickthrough-based latent semantic models (paper 003), eqs. 2, 14–17"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (
        ArraySpec("query_words", ("N", "D"), "P_q(w|z): each topic's distribution over query words"),
        ArraySpec("doc_words", ("N", "D"), "P_d(w|z): each topic's distribution over document words (folding in)"),
        ArraySpec("background", ("D",), "P(w|C): the collection's unigram model"),
        ArraySpec("idf", ("D",), "the vocabulary's idf, to recover term counts from tf-idf rows"),
        ArraySpec("mixture", ("S",), "λ, α, fold-in iterations, topic prior"),
    )
    mixture_names: ClassVar[tuple[str, ...]] = MIXTURE

    def __init__(self, arrays: Mapping[str, np.ndarray], document_keys: DocumentKeys | None = None) -> None:
        super().__init__(arrays, document_keys)
        self._folded: dict[int, tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix]] = {}

    def _share_state(self, other: TopicModel) -> None:
        other._folded = self._folded

    def topics_of(self, X: sp.csr_matrix) -> tuple[np.ndarray, sp.csr_matrix]:
        """(P(z|d) folded in, P_ml(w|d)) of each document row, computed once per document matrix."""
        cached = self._folded.get(id(X))
        if cached is not None and cached[0] is X:
            return cached[1], cached[2]
        counts = term_counts(X, self.values["idf"])
        mixture = self.mixture
        iterations = int(np.clip(np.nan_to_num(mixture["fold_in_iterations"]), 0, MAX_FOLD_IN))
        prior = float(np.nan_to_num(mixture["topic_prior"], nan=1.0))
        phi = np.ascontiguousarray(np.clip(np.asarray(self.values["doc_words"], dtype=np.float64).T, 0.0, None))
        theta = fold_in(
            counts.indptr.astype(np.int64), counts.indices.astype(np.int64), counts.data.astype(np.float64),
            phi, iterations, prior,
        )  # fmt: skip
        result = (X, theta, unigram_rows(counts))
        self._folded.clear()  # one document matrix at a time: the folded topics are n × K
        self._folded[id(X)] = result
        return theta, result[2]

    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        theta, P_ml = self.topics_of(docs.X)
        query_words = np.asarray(self.values["query_words"], dtype=np.float32)
        chosen: dict[int, np.ndarray] = {}  # P_q(w|z) of the queries' words, taken out once

        def model_block(first: int, end: int, cols: np.ndarray) -> np.ndarray:
            if id(cols) not in chosen:
                chosen[id(cols)] = np.ascontiguousarray(query_words[:, cols])
            return theta[first:end] @ chosen[id(cols)]

        mixture = self.mixture
        counts = term_counts(Q, self.values["idf"])
        return query_log_likelihood(
            counts, P_ml, model_block, self.values["background"], mixture["lambda"], mixture["alpha"]
        )
