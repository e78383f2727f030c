"""The one interface every ranking function is evaluated through.

A scorer is fitted on a corpus (its documents fixed at construction) and maps a list of query
texts to a dense float32 matrix of scores over *all* documents, in corpus order:

    score(query_texts) -> S,  S[i, j] = score of document j for query i,  shape [n_queries, n_docs]

Higher is better. `VectorScorer` is the common case of a scorer over unit tf-idf query vectors:
it featurizes and scores in blocks of queries so memory stays bounded by block × n_docs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp

from training.evaluate.features import TextFeatures

DEFAULT_BLOCK = 256


@runtime_checkable
class Scorer(Protocol):
    """Anything with `score(query_texts) -> [n_queries, n_docs]` and a corpus size."""

    @property
    def n_docs(self) -> int: ...

    def score(self, query_texts: Sequence[str]) -> np.ndarray: ...


class VectorScorer(ABC):
    """A scorer of unit tf-idf query vectors; subclasses implement `score_vectors`."""

    features: TextFeatures
    block_size: int = DEFAULT_BLOCK

    @property
    @abstractmethod
    def n_docs(self) -> int: ...

    @abstractmethod
    def score_vectors(self, Q: sp.csr_matrix) -> np.ndarray:
        """Scores [n_queries, n_docs] (float32) for tf-idf query rows Q."""

    def params(self) -> dict[str, Any]:
        """The knobs this scorer was built with, for reports."""
        return {}

    def score(self, query_texts: Sequence[str]) -> np.ndarray:
        texts = list(query_texts)
        out = np.empty((len(texts), self.n_docs), dtype=np.float32)
        for start in range(0, len(texts), self.block_size):
            stop = min(start + self.block_size, len(texts))
            out[start:stop] = self.score_vectors(self.features(texts[start:stop]))
        return out


def l2_normalize_rows(M: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; all-zero rows stay zero (a text with no known word)."""
    norms = np.linalg.norm(M, axis=1, keepdims=True)
    return np.divide(M, norms, out=np.zeros_like(M), where=norms > 0)
