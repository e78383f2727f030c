"""SSI with correlated feature hashing (Bai et al., "Supervised Semantic Indexing", 2009, section 2.2.1
and the full-dictionary experiments; paper 001):

    f(q, d) = (U q_D)·(V d_D) + (U₂ h_q)·(V₂ h_d) + q·d          U, V: N × D;  U₂, V₂: N × F

A row is [x_D ; h] (ssi.vocab with a correlated-hashing map, ssi.feature_hashing): the ordinary
tf-idf over the D vocabulary words, then h, the text's rare words and 2-grams each replaced by its
k DICE-correlated frequent words (F slots). The first term is the frequent-word SSI the paper keeps
("W = (UᵀV)_30k + I"), the second the model on hashed features, its learned mixing weight α folded
into U₂ and V₂ (each scaled by √α at export). The diagonal q·d covers the whole row: exact word
matches, and the hashed slots' overlap (the identity of the hashed model).

It is an inner product, [U q_D ; U₂ h_q]·[V d_D ; V₂ h_d] + q·d, so the service ranks it exactly
with index vectors of 2N and a (2N) × (D + F) block-diagonal query map.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ssi.forms.base import ArraySpec, DocumentKeys, DocumentProducts, Form, FormError, dense


class CorrelatedHashingForm(Form):
    name: ClassVar[str] = "cfh"
    description: ClassVar[str] = "(Uq)·(Vd) + (U₂h_q)·(V₂h_d) + q·d, rare words and 2-grams hashed to frequent words"
    paper: ClassVar[str] = "SSI (paper 001), section 2.2.1, eq. 6"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (
        ArraySpec("U", ("N", "D"), "query word embeddings (the frequent-word SSI)"),
        ArraySpec("V", ("N", "D"), "document word embeddings (the frequent-word SSI)"),
        ArraySpec("U2", ("N", "F"), "query embeddings of the hashed slots, × √α"),
        ArraySpec("V2", ("N", "F"), "document embeddings of the hashed slots, × √α"),
    )
    word_array: ClassVar[str | None] = "V"

    def __init__(self, arrays: Mapping[str, np.ndarray], document_keys: DocumentKeys | None = None) -> None:
        super().__init__(arrays, document_keys)
        self.n_words = self.vocab_size  # D: the arrays' word columns
        self.n_hashed = int(self.values["U2"].shape[1])  # F
        self.vocab_size = self.n_words + self.n_hashed  # a featurized row is [x_D ; h]

    @classmethod
    def shapes(cls, n_dims: int, vocab_size: int, **sizes: int) -> dict[str, tuple[int, ...]]:
        """`vocab_size` is a row's width D + F (the manifest's); the word arrays have D columns."""
        if "F" not in sizes:
            raise FormError(f"form '{cls.name}' needs the size of F")
        if vocab_size <= sizes["F"]:
            raise FormError(f"form '{cls.name}': a row of {vocab_size} features cannot hold {sizes['F']} hashed slots")
        return super().shapes(n_dims, vocab_size - sizes["F"], **sizes)

    def project(self, X: sp.csr_matrix, name: str) -> np.ndarray:
        """X's word columns through U or V, its hashed columns through U₂ or V₂."""
        if X.shape[1] != self.vocab_size:
            raise FormError(f"form '{self.name}': rows have {X.shape[1]} features, the form {self.vocab_size}")
        table_t = self._transposed.get(name)
        if table_t is None:
            table_t = self._transposed[name] = np.ascontiguousarray(np.asarray(self.values[name]).T)
        X = sp.csr_matrix(X)
        part = X[:, : self.n_words] if name in ("U", "V") else X[:, self.n_words :]
        return dense(part @ table_t)

    def query_map(self) -> np.ndarray:
        n = self.n_dims
        out = np.zeros((2 * n, self.vocab_size), dtype=np.float32)
        out[:n, : self.n_words] = self.values["U"]
        out[n:, self.n_words :] = self.values["U2"]
        return out

    def embed_documents(self, X: sp.csr_matrix) -> np.ndarray:
        return np.hstack([self.project(X, "V"), self.project(X, "V2")])

    def lexical_weights(self) -> np.ndarray:
        return np.ones(self.vocab_size, dtype=np.float32)

    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        scores = self.project(Q, "U") @ self.projected("V", docs).T
        scores += self.project(Q, "U2") @ self.projected("V2", docs).T
        scores += docs.products(Q)
        return scores
