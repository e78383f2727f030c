"""Half-transductive ranking, supervised (Bai et al., "Half Transductive Ranking", AISTATS 2010; paper 004).

Section 2, "Half transductive ranking": a free (transductive) vector v_i per document known at training
and a functional map W for any text; the score is eq. (2)

    f(x, y_i) = v_iᵀ W φ(x)            W: N × D, v: T × N (T training documents)

Section 2.3 trains both against the ranking loss with the γ-weighted regularizer of eq. (6), whose
term k(x, y) = φ(y)ᵀWᵀWφ(x) embeds documents *functionally* as W φ(y). That embedding is what a
document the model never saw gets: one added after training, or a training document whose text has
changed since (its tf-idf fingerprint no longer matches, `DocumentKeys.rows`). So

    embed(y) = v_i       when y is training document i with the same text
             = W φ(y)    otherwise (the functional fallback)

and f(x, y) = (W φ(x))·embed(y): an inner product, served exactly, with no diagonal term (eq. 2 has
none). Which documents are known rides with the bundle (`documents.tsv`: id and fingerprint per row
of v), and callers pass the rows' document ids (`embed_documents_of`, `DocMatrix(ids=...)`); rows
without ids all take the functional embedding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ssi.forms.base import ArraySpec, DocumentKeys, DocumentProducts, Form, FormError


class HalfTransductive(Form):
    name: ClassVar[str] = "halftrans"
    description: ClassVar[str] = "v_d·(Wq): a free vector per training document, W d for new ones"
    paper: ClassVar[str] = "Half transductive ranking (paper 004), section 2.3, eqs. (2) and (6)"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (
        ArraySpec("W", ("N", "D"), "functional map: queries and documents unknown at training"),
        ArraySpec("v", ("T", "N"), "free (transductive) vectors of the T training documents"),
    )
    word_array: ClassVar[str | None] = "W"  # W φ(x) = Σ_i W·i x_i: column i embeds word i
    keyed: ClassVar[bool] = True

    def __init__(self, arrays: Mapping[str, np.ndarray], document_keys: DocumentKeys | None = None) -> None:
        super().__init__(arrays, document_keys)
        assert self.document_keys is not None
        if len(self.document_keys) != self.values["v"].shape[0]:
            n_free, n_ids = self.values["v"].shape[0], len(self.document_keys)
            raise FormError(f"form '{self.name}': {n_free} free vectors but {n_ids} document ids")
        self._embedded: tuple[sp.csr_matrix, Sequence[str] | None, np.ndarray] | None = None

    @property
    def keys(self) -> DocumentKeys:
        assert self.document_keys is not None
        return self.document_keys

    def query_map(self) -> np.ndarray:
        return self.values["W"]

    def known_rows(self, X: sp.csr_matrix, doc_ids: Sequence[str] | None) -> np.ndarray:
        """Each row's free vector (row of v), −1 where it falls back to W φ(y)."""
        return self.keys.rows(doc_ids, X)

    def embed_documents(self, X: sp.csr_matrix, doc_ids: Sequence[str] | None = None) -> np.ndarray:
        """v_i for a training document with unchanged text, W φ(y) for any other (eq. 2 / the k of eq. 6)."""
        rows = self.known_rows(X, doc_ids)
        known = rows >= 0
        out = np.empty((X.shape[0], self.n_dims), dtype=np.float32)
        if known.any():
            out[known] = self.values["v"][rows[known]]
        if not known.all():
            out[~known] = self.project(sp.csr_matrix(X)[np.flatnonzero(~known)], "W")
        return out

    def lexical_weights(self) -> np.ndarray:
        return np.zeros(self.vocab_size, dtype=np.float32)

    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        """f(x, y) = embed(y)ᵀ W φ(x), eq. (2), for every query row and document row."""
        ids = getattr(docs, "ids", None)
        cached = self._embedded
        if cached is None or cached[0] is not docs.S or cached[1] is not ids:
            cached = self._embedded = (docs.S, ids, self.embed_documents(docs.S, ids))
        return self.project(Q, "W") @ cached[2].T
