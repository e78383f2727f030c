"""Full-matrix SSI, the "margin ranking perceptron" (paper 001, eq. 1 with W + I):

    f(q, d) = qᵀ(W + I)d          W: D × D

Only for small vocabularies (D² parameters). The index embeds a query as Wᵀq and stores d itself
(M = D), so (Wᵀq)·d = qᵀWd and the diagonal adds q·d.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ssi.forms.base import ArraySpec, DocumentProducts, Form, dense

MAX_VOCAB = 5000


class FullW(Form):
    name: ClassVar[str] = "fullw"
    description: ClassVar[str] = f"qᵀ(W + I)d with a full D × D matrix (D ≤ {MAX_VOCAB})"
    paper: ClassVar[str] = "SSI (paper 001), eq. 1"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (
        ArraySpec("W", ("D", "D"), "weight of each (query word, document word) pair"),
    )

    def query_map(self) -> np.ndarray:
        return np.asarray(self.values["W"]).T

    def embed_documents(self, X: sp.csr_matrix) -> np.ndarray:
        return dense(X)

    def lexical_weights(self) -> np.ndarray:
        return np.ones(self.vocab_size, dtype=np.float32)

    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        qW = dense(Q @ np.asarray(self.values["W"], dtype=np.float32))
        return dense(docs.S @ qW.T).T + docs.products(Q)
