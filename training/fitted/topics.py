"""The topic-model kinds of paper 003 (sections 3 and 5.2, Table 1), fitted by EM (training.fitted.topic_em):

- `plsa`: PLSA on the documents alone (the paper's baseline; no pairs used);
- `bltm`: the bilingual topic model on the training pairs, query-side and document-side word
  distributions per topic, one topic mixture per pair;
- `bltm-pr`: BLTM with posterior regularization (both sides of a pair share topics in equal shares);
- `bltm-1v`: BLTM-PR with one vocabulary, a single word distribution per topic for both sides
  (the paper's BLTM-PR-1V, its best row).

K topics from `--dims`, `--em-iterations` iterations, each side of a pair cut to `--pair-words`
words (training.fitted.sides). Each exports a `topic-lm` form (ssi.forms.topics) whose λ was
tuned on the validation pairs (training.fitted.lm_mixture).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ssi.forms.topics import TopicModel
from training.fitted.base import FitContext, FittedKind
from training.fitted.em_loop import run_em
from training.fitted.lm_mixture import BACKGROUND_WEIGHT, collection_model, em_result
from training.fitted.sides import Sides
from training.fitted.topic_em import TopicEM, TopicState
from training.numba_threads import use_threads
from training.trainer import TrainResult

FOLD_IN_ITERATIONS = 20  # the paper folds documents in with 20 EM iterations (section 5.2)
PR_STEPS = 3  # dual Newton steps per pair in BLTM-PR's E-step (the test shows the shares agree after a few)


def words_only(context: FitContext) -> np.ndarray:
    """The vocabulary's idf; refuses a vocabulary with hashed slots (the topic models count words)."""
    if context.data.vocab.hashing is not None:
        raise ValueError(f"--kind {context.settings.kind} counts words: it cannot use a correlated-hashing vocabulary")
    return np.asarray(context.data.vocab.idf, dtype=np.float32)


class TopicKind(FittedKind):
    """EM on the documents (PLSA) or on the pairs (BLTM family), then λ tuned on validation."""

    on_pairs: ClassVar[bool] = True
    shared: ClassVar[bool] = False
    pr_steps: ClassVar[int] = 0

    def sides(self, context: FitContext, idf: np.ndarray) -> Sides:
        data = context.data
        if not self.on_pairs:
            return Sides.of_documents(data.X_docs, idf)
        if data.train.size == 0:
            raise ValueError(f"--kind {self.kind} trains on pairs, and there are none")
        return Sides.of_pairs(
            data.X_queries, data.X_docs, data.train.query_rows, data.train.doc_rows, idf, context.settings.pair_words
        )

    def fit(self, context: FitContext) -> TrainResult:
        s = context.settings
        use_threads(s.threads)
        idf = words_only(context)
        em = TopicEM(self.sides(context, idf), s.n_dims, self.shared, pr_steps=self.pr_steps, threads=s.threads)
        state: TopicState
        state, history, seconds = run_em(
            em.step,
            em.start(s.seed),
            s.em_iterations,
            label=f"EM {self.kind}",
            show_progress=context.show_progress,
            max_seconds=s.max_minutes * 60 if s.max_minutes is not None else None,
        )
        mixture = np.array([0.0, BACKGROUND_WEIGHT, FOLD_IN_ITERATIONS, em.topic_prior], dtype=np.float32)
        form = TopicModel(
            {
                "query_words": np.ascontiguousarray(state.phi_q.T, dtype=np.float32),
                "doc_words": np.ascontiguousarray(state.phi_d.T, dtype=np.float32),
                "background": collection_model(context.data.X_docs, idf),
                "idf": idf,
                "mixture": mixture,
            }
        )
        return em_result(form, context.validate, s.lm_lambda, history, seconds)


class PLSA(TopicKind):
    kind: ClassVar[str] = "plsa"
    description: ClassVar[str] = "PLSA on the documents, in the language-model framework (paper 003, eq. 2)"
    on_pairs: ClassVar[bool] = False
    shared: ClassVar[bool] = True


class BLTM(TopicKind):
    kind: ClassVar[str] = "bltm"
    description: ClassVar[str] = "bilingual topic model on the pairs (paper 003, section 3.1)"


class BLTMPR(TopicKind):
    kind: ClassVar[str] = "bltm-pr"
    description: ClassVar[str] = "BLTM with posterior regularization (paper 003, section 3.2)"
    pr_steps: ClassVar[int] = PR_STEPS


class BLTM1V(TopicKind):
    kind: ClassVar[str] = "bltm-1v"
    description: ClassVar[str] = "BLTM-PR with one vocabulary for queries and documents (paper 003, BLTM-PR-1V)"
    shared: ClassVar[bool] = True
    pr_steps: ClassVar[int] = PR_STEPS
