"""`--kind lsa`: Latent Semantic Analysis as a projection (Deerwester et al., 1990; paper 003, section 4.1,
eqs. (18)–(20)): the top N right singular vectors V_N of the texts' tf-idf matrix map queries and
documents alike, A = B = V_Nᵀ, and documents rank by cos(A q, B d), alone or with tf-idf.

The pairs are not used (the paper's baseline): the texts are the documents, plus the training queries
where they are not documents. The SVD is `training.fitted.basis.LsiBasis`, the same as the
LSI baseline of `ssi eval` (which ranks by the uncosined product qᵀV_N V_Nᵀd).
"""

from __future__ import annotations

import time
from typing import ClassVar

from training.fitted.base import FitContext, FittedKind
from training.fitted.basis import LsiBasis
from training.fitted.projections import choose, corpus_texts, fitted_result, summary_row
from training.trainer import TrainResult


class Lsa(FittedKind):
    kind: ClassVar[str] = "lsa"
    description: ClassVar[str] = "LSA: truncated SVD of the texts, cos(V_Nᵀq, V_Nᵀd) (paper 003, section 4.1)"

    def fit(self, context: FitContext) -> TrainResult:
        started = time.perf_counter()
        basis = LsiBasis.fit(corpus_texts(context), context.settings.n_dims, seed=context.settings.seed)
        chosen = choose(basis.components, basis.components, context)
        history = [summary_row(1, started, **{k: v for k, v in chosen.metrics.items() if k.startswith("map")})]
        return fitted_result(chosen, started, history)
