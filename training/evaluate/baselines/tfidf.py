"""tf-idf cosine: the baseline every table is read against.

    f(q, d) = q · d        q, d unit tf-idf vectors, x_i = (1 + log tf_i) · idf_i
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ssi.records import Document
from training.evaluate.features import TextFeatures
from training.evaluate.products import DocMatrix
from training.evaluate.scorer import DEFAULT_BLOCK, VectorScorer


class TfidfScorer(VectorScorer):
    """Cosine of unit tf-idf vectors over the whole corpus."""

    def __init__(self, features: TextFeatures, docs: Sequence[Document], *, block_size: int = DEFAULT_BLOCK) -> None:
        self.features = features
        self.block_size = block_size
        self.doc_ids = [d.id for d in docs]
        self.X = features([d.full_text for d in docs])
        self.docs = DocMatrix(self.X)

    @property
    def n_docs(self) -> int:
        return self.docs.n_docs

    def params(self) -> dict[str, Any]:
        return {"D": self.features.size}

    def score_vectors(self, Q: sp.csr_matrix) -> np.ndarray:
        return self.docs.products(Q)
