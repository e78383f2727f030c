"""The SSI score of any model kind, computed for all documents at once.

Every kind exports to one scoring form (see `ssi.bundle`), on unit tf-idf vectors q and d:

    f(q, d) = (U q) · (V d) + Σ_i w_i q_i d_i          (Bai et al., "Supervised Semantic Indexing", 2009)

For a block of queries Q (sparse) and the document matrix X (sparse) this is two dense products
and one weighted sparse product, with V d cached per document:

    F = (Q Uᵀ)(X Vᵀ)ᵀ + (Q diag(w)) Xᵀ
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ssi.bundle import Bundle, load_bundle
from ssi.records import Document
from ssi.vocab import Vocabulary
from training.evaluate.features import TextFeatures
from training.evaluate.products import DocMatrix
from training.evaluate.scorer import DEFAULT_BLOCK, VectorScorer


def check_ssi_arrays(U: np.ndarray, V: np.ndarray, lexical: np.ndarray, vocab_size: int) -> None:
    """Refuse arrays that cannot form f(q, d) over `vocab_size` words, saying which shape is wrong."""
    if U.ndim != 2 or V.ndim != 2 or U.shape != V.shape:
        raise ValueError(f"U and V must be N x D of the same shape, got {U.shape} and {V.shape}")
    if U.shape[1] != vocab_size:
        raise ValueError(f"U and V have {U.shape[1]} columns, the vocabulary {vocab_size} words")
    if lexical.shape != (vocab_size,):
        raise ValueError(f"lexical must have shape ({vocab_size},), got {lexical.shape}")


def same_vocabulary(a: Vocabulary, b: Vocabulary) -> bool:
    """Same words in the same order with the same idf: the same tf-idf vectors."""
    return a is b or (a.words == b.words and np.array_equal(a.idf, b.idf))


class SSIScorer(VectorScorer):
    """Exact SSI scores of in-memory (or memory-mapped) U, V, lexical over a fixed corpus."""

    def __init__(
        self,
        vocab: Vocabulary,
        U: np.ndarray,
        V: np.ndarray,
        lexical: np.ndarray,
        docs: Sequence[Document] | None = None,
        *,
        features: TextFeatures | None = None,
        doc_matrix: sp.csr_matrix | DocMatrix | None = None,
        block_size: int = DEFAULT_BLOCK,
        kind: str = "ssi",
    ) -> None:
        """Give `docs` (featurized here) or their tf-idf `doc_matrix` (reused as is)."""
        U = np.asarray(U, dtype=np.float32)
        V = np.asarray(V, dtype=np.float32)
        lexical = np.asarray(lexical, dtype=np.float32)
        check_ssi_arrays(U, V, lexical, vocab.size)
        self.vocab = vocab
        self.features = features if features is not None else TextFeatures(vocab)
        if not same_vocabulary(self.features.vocab, vocab):
            raise ValueError("the features' vocabulary is not the model's vocabulary")
        if doc_matrix is None:
            if docs is None:
                raise ValueError("give the documents or their tf-idf matrix")
            doc_matrix = self.features([d.full_text for d in docs])
        self.docs = DocMatrix(doc_matrix) if not isinstance(doc_matrix, DocMatrix) else doc_matrix
        if self.docs.n_features != vocab.size:
            raise ValueError(f"document matrix has {self.docs.n_features} features, vocabulary {vocab.size}")
        self.block_size = block_size
        self.kind = kind
        self.n_dims = U.shape[0]
        self._U_T = np.ascontiguousarray(U.T)
        # V d for every document, once: [n_docs, N].
        self._Vd = np.ascontiguousarray(np.asarray(self.docs.X @ np.ascontiguousarray(V.T), dtype=np.float32))
        self._lexical = lexical
        self._has_lexical = bool(np.any(lexical != 0))

    @classmethod
    def from_bundle(
        cls,
        bundle: Bundle | Path | str,
        docs: Sequence[Document] | None = None,
        *,
        features: TextFeatures | None = None,
        doc_matrix: sp.csr_matrix | DocMatrix | None = None,
        block_size: int = DEFAULT_BLOCK,
    ) -> SSIScorer:
        """A scorer for a saved bundle (a path is loaded and verified: `BundleError` if unusable)."""
        if not isinstance(bundle, Bundle):
            bundle = load_bundle(bundle)
        return cls(
            bundle.vocab,
            bundle.U,
            bundle.V,
            bundle.lexical,
            docs,
            features=features,
            doc_matrix=doc_matrix,
            block_size=block_size,
            kind=bundle.manifest.kind,
        )

    @property
    def n_docs(self) -> int:
        return self.docs.n_docs

    def params(self) -> dict[str, Any]:
        return {"kind": self.kind, "N": self.n_dims, "D": self.vocab.size}

    def semantic(self, Q: sp.csr_matrix) -> np.ndarray:
        """(U q)·(V d) for every query row and document."""
        return np.asarray(Q @ self._U_T, dtype=np.float32) @ self._Vd.T

    def score_vectors(self, Q: sp.csr_matrix) -> np.ndarray:
        scores = self.semantic(Q)
        if self._has_lexical:
            scores += self.docs.products(Q, self._lexical)
        return scores
