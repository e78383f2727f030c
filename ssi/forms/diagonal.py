"""SSI diagonal (paper 001, section 3): f(q, d) = Σ_i w_i q_i d_i, a learned re-weighting of words.

It has no semantic part: the index holds one zero per document (FAISS needs a dimension), so every
candidate comes from the words the query shares with a document, and the rerank is exact.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ssi.forms.base import ArraySpec, DocumentProducts, Form


class Diagonal(Form):
    name: ClassVar[str] = "diagonal"
    description: ClassVar[str] = "Σ w_i q_i d_i, learned word weights"
    paper: ClassVar[str] = "SSI (paper 001), section 3"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (ArraySpec("w", ("D",), "weight of each word on the diagonal"),)

    def query_map(self) -> np.ndarray:
        return np.zeros((1, self.vocab_size), dtype=np.float32)

    def embed_documents(self, X: sp.csr_matrix) -> np.ndarray:
        return np.zeros((X.shape[0], 1), dtype=np.float32)

    def lexical_weights(self) -> np.ndarray:
        return np.asarray(self.values["w"], dtype=np.float32)

    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        return docs.products(Q, self.values["w"])
