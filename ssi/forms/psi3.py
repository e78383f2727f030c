"""Polynomial Semantic Indexing of degree 3 (Bai et al., PSI; papers 000 and 002, the degree-3
low-rank model "Σ_l (Uq)_l (Vd)_l (Yd)_l + f₂(q, d)"):

    f(q, d) = Σ_l (U q)_l (V₃ d)_l (Y₃ d)_l + (U q)·(V d) + q·d          U, V, V₃, Y₃: N × D

The degree-2 part f₂ is a low-rank SSI, which training warm-starts from (as the papers do). Here
both degrees share the query map U, so a document's cached vector is V d + (V₃ d)∘(Y₃ d) and a
query still costs N multiplications per document, as the papers point out for the cached (Vd)∘(Yd).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ssi.forms.base import ArraySpec, DocumentProducts, Form


class PSI3(Form):
    name: ClassVar[str] = "psi3"
    description: ClassVar[str] = "Σ (Uq)(V₃d)(Y₃d) + (Uq)·(Vd) + q·d, polynomial degree 3"
    paper: ClassVar[str] = "PSI (papers 000, 002), degree-3 model"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (
        ArraySpec("U", ("N", "D"), "query word embeddings (both degrees)"),
        ArraySpec("V", ("N", "D"), "document word embeddings of the degree-2 term"),
        ArraySpec("V3", ("N", "D"), "first document factor of the degree-3 term"),
        ArraySpec("Y3", ("N", "D"), "second document factor of the degree-3 term"),
    )

    word_array: ClassVar[str | None] = "V"  # the degree-2 document embedding, as for SSI

    def query_map(self) -> np.ndarray:
        return self.values["U"]

    def embed_documents(self, X: sp.csr_matrix) -> np.ndarray:
        return self.project(X, "V") + self.project(X, "V3") * self.project(X, "Y3")

    def lexical_weights(self) -> np.ndarray:
        return np.ones(self.vocab_size, dtype=np.float32)

    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        Uq = self.project(Q, "U")
        cubic = np.einsum("ql,dl,dl->qd", Uq, self.projected("V3", docs), self.projected("Y3", docs), optimize=True)
        quadratic = Uq @ self.projected("V", docs).T
        return (cubic + quadratic + docs.products(Q)).astype(np.float32)
