"""What the linear-projection kinds share (paper 003, section 4): the texts and pairs they fit on, and
the step that turns fitted maps A, B into the `projection` form, alone or combined with tf-idf.

Combined with the tf-idf cosine (paper 003, section 5.3, Table 2 "+ VSM"): documents ranked by
β · cos(A q, B d) + (1 − β) · cos(q, d), β tuned on the validation pairs ("tuned via
cross-validation" in the paper). The form holds it as cos(A q, B d) + c · q·d with c = (1 − β)/β,
the same ranking (ssi.forms.projection); the chosen β and c are recorded in the bundle's metrics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ssi.forms.projection import Projection
from training.fitted.base import FitContext
from training.keywords import cut_to_keywords
from training.trainer import TrainResult

# c = (1 − β)/β tried on validation, a geometric grid (β from 0.94 to 0.008): a projection's cosines
# are all much larger than tf-idf's (documents agree in a few concept dimensions), so the best β can be
# small. c = 0 (β = 1) is the projection alone.
TFIDF_WEIGHTS = tuple(2.0**k for k in range(-4, 8))
UNTUNED_WEIGHT = 1.0  # combined without validation pairs: β = 0.5, the two cosines weighted equally


@dataclass(frozen=True)
class PairRows:
    """The training pairs as rows: pair k is query row XQ[q_rows[k]] with document row XD[d_rows[k]]."""

    XQ: sp.csr_matrix
    q_rows: np.ndarray
    XD: sp.csr_matrix
    d_rows: np.ndarray

    @property
    def size(self) -> int:
        return int(self.q_rows.shape[0])

    @classmethod
    def of(cls, context: FitContext, rng: np.random.Generator | None = None) -> PairRows:
        """The context's training pairs; with --query-words each query document is cut to keywords (one draw
        per document from `rng`, shared by its pairs), as the validation queries are."""
        data, settings = context.data, context.settings
        q_rows, d_rows = data.train.query_rows, data.train.doc_rows
        if q_rows.shape[0] == 0:
            raise ValueError("no usable training pairs: a projection kind fits on pairs")
        XQ = sp.csr_matrix(data.X_queries, dtype=np.float32)
        if data.doc_doc and settings.query_words:
            generator = rng if rng is not None else np.random.default_rng(settings.seed)
            XQ = cut_to_keywords(XQ, data.vocab.idf, settings.query_words, generator)
        return cls(XQ, np.asarray(q_rows, np.int64), sp.csr_matrix(data.X_docs, dtype=np.float32), d_rows)


def corpus_texts(context: FitContext) -> sp.csr_matrix:
    """The texts LSA is fit on: every document, and the training queries when they are not documents
    (paper 003, section 5.3: "queries and titles are treated as separate documents")."""
    data = context.data
    X = sp.csr_matrix(data.X_docs, dtype=np.float32)
    if data.doc_doc:
        return X
    used = np.unique(data.train.query_rows)
    return sp.csr_matrix(sp.vstack([X, sp.csr_matrix(data.X_queries, dtype=np.float32)[used]]))


def make_form(A: np.ndarray, B: np.ndarray, c: float) -> Projection:
    """The projection form of maps A, B (N × D) with tf-idf weight c (0: the projection alone)."""
    A = np.ascontiguousarray(A, dtype=np.float32)
    B = np.ascontiguousarray(B, dtype=np.float32)
    w = np.full(A.shape[1], c, dtype=np.float32)
    return Projection({"A": A, "B": B, "w": w})


@dataclass(frozen=True)
class Chosen:
    """The exported form and what validation said of it (the bundle's `metrics.valid`)."""

    form: Projection
    metrics: dict[str, float]


def choose(A: np.ndarray, B: np.ndarray, context: FitContext) -> Chosen:
    """The form alone, or combined with the tf-idf cosine at the β best on validation (--combine-tfidf).

    Metrics: `map` of the exported form, `map_alone` of the projection alone, `beta` and
    `tfidf_weight` (c = (1 − β)/β) of the combination, `map_tfidf` of tf-idf alone (β = 0).
    """
    alone = make_form(A, B, 0.0)
    if context.validate is None:
        if not context.settings.combine_tfidf:
            return Chosen(alone, {"beta": 1.0, "tfidf_weight": 0.0})
        return Chosen(make_form(A, B, UNTUNED_WEIGHT), weight_metrics(UNTUNED_WEIGHT))
    alone_map = float(context.validate(alone)["map"])
    if not context.settings.combine_tfidf:
        return Chosen(alone, {"map": alone_map, "map_alone": alone_map, **weight_metrics(0.0)})
    best: tuple[float, float, Projection] = (alone_map, 0.0, alone)
    for c in TFIDF_WEIGHTS:
        form = make_form(A, B, c)
        value = float(context.validate(form)["map"])
        if value > best[0]:
            best = (value, c, form)
    value, c, form = best
    # tf-idf alone (β = 0: zero maps, every cosine 0, weight 1), for the record
    tfidf_map = float(context.validate(make_form(np.zeros_like(A), np.zeros_like(B), 1.0))["map"])
    return Chosen(form, {"map": value, "map_alone": alone_map, "map_tfidf": tfidf_map, **weight_metrics(c)})


def weight_metrics(c: float) -> dict[str, float]:
    """The combination's tf-idf weight c and its β = 1/(1 + c) (β · cos(A q, B d) + (1 − β) · cos(q, d))."""
    return {"beta": 1.0 / (1.0 + c), "tfidf_weight": c}


def fitted_result(chosen: Chosen, started: float, history: list[dict[str, float]], steps: int = 1) -> TrainResult:
    """A TrainResult for a fitted projection: no triples, `steps` iterations, the chosen form."""
    return TrainResult(
        best=chosen.form,
        best_metrics=chosen.metrics,
        best_step=steps,
        steps=steps,
        epochs=0.0,
        triples=0,
        seconds=time.perf_counter() - started,
        history=history,
    )


def summary_row(step: int, started: float, **values: Any) -> dict[str, float]:
    """One history row: the iteration, seconds since the fit started, and the values given."""
    return {"step": float(step), "seconds": round(time.perf_counter() - started, 3), **values}
