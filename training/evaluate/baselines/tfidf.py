"""tf-idf cosine: the baseline every table is read against.

f(q, d) = q · d        q, d unit tf-idf vectors, x_i = (1 + log tf_i) · idf_i
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ssi.products import DocMatrix
from ssi.records import Document
from training.evaluate.features import TextFeatures
from training.evaluate.scorer import DEFAULT_BLOCK, VectorScorer


class TfidfScorer(VectorScorer):
    """Cosine of unit tf-idf vectors over the whole corpus.

    With `memo_bytes` > 0 the scores of recent query lists are kept (read-only, least recently
    used dropped first): the mixture and feedback baselines start from these same scores at every
    point of their tuning grid.
    """

    def __init__(
        self,
        features: TextFeatures,
        docs: Sequence[Document],
        *,
        block_size: int = DEFAULT_BLOCK,
        memo_bytes: int = 0,
    ) -> None:
        self.features = features
        self.block_size = block_size
        self.doc_ids = [d.id for d in docs]
        self.X = features.documents([d.full_text for d in docs])
        self.docs = DocMatrix(self.X)
        self.memo_bytes = memo_bytes
        self._memo: OrderedDict[tuple[str, ...], np.ndarray] = OrderedDict()

    @property
    def n_docs(self) -> int:
        return self.docs.n_docs

    def params(self) -> dict[str, Any]:
        return {"D": self.features.size}

    def score_vectors(self, Q: sp.csr_matrix) -> np.ndarray:
        return self.docs.products(Q)

    def score(self, query_texts: Sequence[str]) -> np.ndarray:
        if self.memo_bytes <= 0:
            return super().score(query_texts)
        key = tuple(query_texts)
        scores = self._memo.get(key)
        if scores is not None:
            self._memo.move_to_end(key)
            return scores
        scores = super().score(query_texts)
        scores.setflags(write=False)
        self._memo[key] = scores
        while sum(s.nbytes for s in self._memo.values()) > self.memo_bytes and len(self._memo) > 1:
            self._memo.popitem(last=False)
        return scores
