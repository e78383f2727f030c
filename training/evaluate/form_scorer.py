"""A bundle's model in the evaluation harness: it ranks by the form's reference score.

The form (ssi.forms) defines f(q, d) once; this scorer only featurizes the query texts and hands
blocks of them to `form.reference_scores`, with the documents' tf-idf matrix prepared once
(`DocMatrix`), so `ssi eval`, `ssi rank` and the trainer's validation rank with the same function
the service's oracle tests check against.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ssi.bundle import Bundle, load_bundle
from ssi.forms import Form
from ssi.products import DocMatrix
from ssi.records import Document
from ssi.vocab import Vocabulary
from training.evaluate.features import TextFeatures
from training.evaluate.scorer import DEFAULT_BLOCK, VectorScorer


def same_vocabulary(a: Vocabulary, b: Vocabulary) -> bool:
    """Same words in the same order with the same idf and weighting: the same rows."""
    return a is b or (
        a.words == b.words and np.array_equal(a.idf, b.idf) and a.hashing is b.hashing is None and a.bm25 == b.bm25
    )


class FormScorer(VectorScorer):
    """Exact scores of a model form over a fixed corpus."""

    def __init__(
        self,
        vocab: Vocabulary,
        form: Form,
        docs: Sequence[Document] | None = None,
        *,
        features: TextFeatures | None = None,
        doc_matrix: sp.csr_matrix | DocMatrix | None = None,
        block_size: int = DEFAULT_BLOCK,
    ) -> None:
        """Give `docs` (featurized here) or their tf-idf `doc_matrix` (reused as is).

        With `docs`, the form also gets their ids: a form with per-document vectors (halftrans) uses
        them for the documents it was trained on and the functional map for any other.
        """
        if form.vocab_size != vocab.size:
            raise ValueError(f"the form's arrays have D = {form.vocab_size}, the vocabulary {vocab.size} words")
        self.vocab = vocab
        self.form = form
        self.features = features if features is not None else TextFeatures(vocab)
        if not same_vocabulary(self.features.vocab, vocab):
            raise ValueError("the features' vocabulary is not the model's vocabulary")
        if doc_matrix is None:
            if docs is None:
                raise ValueError("give the documents or their tf-idf matrix")
            doc_matrix = self.features.documents([d.full_text for d in docs])
        self.docs = vocab.doc_matrix(doc_matrix) if not isinstance(doc_matrix, DocMatrix) else doc_matrix
        if docs is not None and self.docs.ids is None:
            self.docs = self.docs.with_ids([d.id for d in docs])
        if self.docs.n_features != vocab.size:
            raise ValueError(f"document matrix has {self.docs.n_features} features, vocabulary {vocab.size}")
        self.block_size = block_size

    @classmethod
    def from_bundle(
        cls,
        bundle: Bundle | Path | str,
        docs: Sequence[Document] | None = None,
        *,
        features: TextFeatures | None = None,
        doc_matrix: sp.csr_matrix | DocMatrix | None = None,
        block_size: int = DEFAULT_BLOCK,
    ) -> FormScorer:
        """A scorer for a saved bundle (a path is loaded and verified: `BundleError` if unusable)."""
        if not isinstance(bundle, Bundle):
            bundle = load_bundle(bundle)
        return cls(bundle.vocab, bundle.form, docs, features=features, doc_matrix=doc_matrix, block_size=block_size)

    @property
    def n_docs(self) -> int:
        return self.docs.n_docs

    def params(self) -> dict[str, Any]:
        """The form and its sizes as its arrays declare them (no N for hash kernels, H, F or T where they exist)."""
        return {"form": self.form.name, **{k: v for k, v in self.form.sizes.items() if k != "D"}, "D": self.vocab.size}

    def score_vectors(self, Q: sp.csr_matrix) -> np.ndarray:
        return self.form.reference_scores(Q, self.docs)
