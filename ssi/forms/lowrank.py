"""SSI low rank (Bai et al., "Supervised Semantic Indexing", CIKM 2009, eq. 3; paper 001):

    f(q, d) = qᵀ(UᵀV + I)d = (U q)·(V d) + q·d          U, V: N × D

U ≠ V lets queries and documents differ (short queries, ads against pages). The index stores V d;
the diagonal keeps exact word matches with weight 1.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ssi.forms.base import ArraySpec, DocumentProducts, Form


class LowRank(Form):
    name: ClassVar[str] = "lowrank"
    description: ClassVar[str] = "(Uq)·(Vd) + q·d, the default"
    paper: ClassVar[str] = "SSI (paper 001), eq. 3"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (
        ArraySpec("U", ("N", "D"), "query word embeddings"),
        ArraySpec("V", ("N", "D"), "document word embeddings"),
    )
    identity: ClassVar[bool] = True
    document_array: ClassVar[str] = "V"  # the N × D table documents are embedded with
    word_array: ClassVar[str | None] = "V"  # V d = Σ_i V·i d_i: column i embeds word i

    def query_map(self) -> np.ndarray:
        return self.values["U"]

    def embed_documents(self, X: sp.csr_matrix) -> np.ndarray:
        return self.project(X, self.document_array)

    def lexical_weights(self) -> np.ndarray:
        return np.full(self.vocab_size, 1.0 if self.identity else 0.0, dtype=np.float32)

    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        Uq = self.project(Q, "U")
        Vd = self.projected(self.document_array, docs)
        scores = Uq @ Vd.T
        if self.identity:
            scores += docs.products(Q)
        return scores
