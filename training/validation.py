"""Validation during training: a measure of the form's reference scores on the validation queries.

The score is the form's own definition (ssi.forms, `reference_scores`), so what the trainer selects
its best checkpoint by is what `ssi eval` and the service rank by. The measure (MAP of the
validation task) is handed in by the caller, so the training core does not depend on the harness.

The validation queries are fixed, so their tf-idf block q·d is computed once (or taken from the
trainer's cached block) and reused by every validation (`FixedQueryProducts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from ssi.forms import Form
from ssi.hybrid import hybrid_scores
from ssi.products import DocMatrix

Measure = Callable[[np.ndarray], dict[str, float]]


class FixedQueryProducts:
    """`DocMatrix.products` with the q·d block of one fixed query matrix computed once."""

    def __init__(self, docs: DocMatrix, queries: sp.csr_matrix, gram: np.ndarray | None = None) -> None:
        self.X = docs.X
        self.S = docs.S
        self.ids = docs.ids
        self._docs = docs
        self._queries = queries
        self._gram = gram  # computed on first use: forms without the diagonal term never ask for it

    def _fixed_gram(self) -> np.ndarray:
        if self._gram is None:
            self._gram = self._docs.products(self._queries)
        return self._gram

    def products(self, Q: sp.csr_matrix, weights: np.ndarray | None = None) -> np.ndarray:
        if Q is self._queries:
            if weights is None:
                return self._fixed_gram().copy()
            w = np.asarray(weights, dtype=np.float32)
            if w.size and np.all(w == w[0]):
                return self._fixed_gram() * w[0]
        return self._docs.products(Q, weights)


class FormValidator:
    def __init__(
        self,
        queries: sp.csr_matrix,
        docs: DocMatrix,
        measure: Measure,
        gram: np.ndarray | None = None,
        texts: Sequence[str] = (),
    ) -> None:
        """`queries`: the validation query rows in task order; `gram`: their q·d block if known; `texts`: the
        queries' texts (a hybrid model's encoder reads them)."""
        self.queries = queries
        self.texts = list(texts)
        self.products = FixedQueryProducts(docs, queries, gram)
        self.measure = measure
        # A hybrid model's third part (ssi.hybrid): the validation queries' and the documents' e, and λ now.
        self.sentence: tuple[np.ndarray, np.ndarray] | None = None
        self.sentence_weight = 0.0

    def __call__(self, form: Form) -> dict[str, float]:
        scores = form.reference_scores(self.queries, self.products)
        if self.sentence is not None:
            scores = hybrid_scores(scores, *self.sentence, self.sentence_weight)
        return self.measure(scores)
