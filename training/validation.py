"""Validation during training: the evaluation harness's MAP on the validation task, computed from
the model's arrays directly (no bundle written, no text featurized again).

The tf-idf block q·d of the validation queries is fixed, so it is computed once (or taken from the
trainer's cached block when the queries are corpus documents) and only the semantic part is
recomputed at each validation.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from training.evaluate.metrics import quick_map
from training.evaluate.products import DocMatrix
from training.evaluate.tasks import RetrievalTask
from training.models import ExportedModel


class MapValidator:
    def __init__(
        self,
        task: RetrievalTask,
        X_queries: sp.csr_matrix,
        docs: DocMatrix,
        gram: np.ndarray | None = None,
    ) -> None:
        """`X_queries`: the task's query rows in task order; `gram`: their q·d block if known."""
        self.task = task
        self.X_queries = X_queries
        self.docs = docs
        self.gram = gram if gram is not None else docs.products(X_queries)

    def scores(self, model: ExportedModel) -> np.ndarray:
        Uq = np.asarray(self.X_queries @ np.ascontiguousarray(model.U.T), dtype=np.float32)
        Vd = np.asarray(self.docs.X @ np.ascontiguousarray(model.V.T), dtype=np.float32)
        S = Uq @ Vd.T
        w = model.lexical
        if np.all(w == w[0]):
            if w[0] != 0:
                S += w[0] * self.gram
        else:
            S += self.docs.products(self.X_queries, w)
        return S

    def __call__(self, model: ExportedModel) -> dict[str, float]:
        return {"map": quick_map(self.task, self.scores(model))}
