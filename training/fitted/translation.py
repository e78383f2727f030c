"""`--kind translation`: the word translation model, IBM model 1 on the training pairs (paper 003,
section 5.2, WTM_M1; training.fitted.ibm1), in the language-model framework with λ tuned on validation.

The table is trained dense over the F most frequent words (`--frequent-words`, default
`TRANSLATION_WORDS`: F² floats, 36 MB at F = 3,000) and exported sparse, each source word's top
`--translations` targets (ssi.forms.translation); every other word translates into itself.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ssi.forms.translation import WordTranslation
from training.fitted.base import FitContext, FittedKind
from training.fitted.em_loop import run_em
from training.fitted.ibm1 import Model1EM, top_translations
from training.fitted.lm_mixture import BACKGROUND_WEIGHT, collection_model, em_result
from training.fitted.sides import Sides
from training.fitted.topics import words_only
from training.numba_threads import use_threads
from training.trainer import TrainResult

TRANSLATION_WORDS = 3000


class Translation(FittedKind):
    kind: ClassVar[str] = "translation"
    description: ClassVar[str] = "word translation model, IBM model 1 on the pairs (paper 003, WTM_M1)"

    def fit(self, context: FitContext) -> TrainResult:
        s, data = context.settings, context.data
        use_threads(s.threads)
        idf = words_only(context)
        if data.train.size == 0:
            raise ValueError("--kind translation trains on pairs, and there are none")
        n_words = min(s.frequent_words or TRANSLATION_WORDS, idf.shape[0])
        sides = Sides.of_pairs(
            data.X_queries, data.X_docs, data.train.query_rows, data.train.doc_rows, idf, s.pair_words
        ).restricted(n_words)
        em = Model1EM(sides, n_words, threads=s.threads)
        table, history, seconds = run_em(
            em.step,
            em.start(),
            s.em_iterations,
            label="EM translation",
            show_progress=context.show_progress,
            max_seconds=s.max_minutes * 60 if s.max_minutes is not None else None,
        )
        targets, probs = top_translations(table, idf.shape[0], s.translations)
        form = WordTranslation(
            {
                "targets": targets,
                "probs": probs,
                "background": collection_model(data.X_docs, idf),
                "idf": idf,
                "mixture": np.array([0.0, BACKGROUND_WEIGHT], dtype=np.float32),
            }
        )
        return em_result(form, context.validate, s.lm_lambda, history, seconds)
