"""The mixture weight λ of the language-model kinds (paper 003, eq. 16), tuned on the validation pairs.

P(w|d) = α P(w|C) + (1 − α)(λ P_ml(w|d) + (1 − λ) P_model(w|d)) (ssi.forms.query_likelihood):
λ = 0 is the latent model alone (the paper's shaded rows of Table 1), larger λ leans on the
document's own words. The paper tunes it by cross-validation; we take the λ of the grid with the
best validation MAP (or the one `--lm-lambda` fixes) and also report the model alone (λ = 0) and
the smoothed unigram model it is mixed with (λ = 1, the paper's "UM" row). α, the weight of the
collection model (Jelinek-Mercer smoothing, eq. 15), is fixed at `BACKGROUND_WEIGHT`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from ssi.forms import Form
from ssi.forms.query_likelihood import term_counts
from training.trainer import TrainResult

LAMBDAS = (0.0, 0.3, 0.5, 0.7, 0.9, 0.95)
BACKGROUND_WEIGHT = 0.1  # α of eq. 15
DEFAULT_LAMBDA = 0.5  # without validation pairs and without --lm-lambda
SELECTION_METRIC = "map"


class Mixable(Protocol):
    def with_mixture(self, lam: float) -> Form: ...


def collection_model(X_docs: sp.csr_matrix, idf: np.ndarray) -> np.ndarray:
    """P(w|C): the corpus's term counts, add-½ smoothed so that no vocabulary word has probability 0."""
    counts = np.asarray(term_counts(X_docs, idf).sum(axis=0), dtype=np.float64).ravel() + 0.5
    return (counts / counts.sum()).astype(np.float32)


def tune_lambda(
    form: Mixable, validate: Callable[[Form], dict[str, float]] | None, fixed: float | None
) -> tuple[Form, dict[str, float]]:
    """The form with the chosen λ, and its validation metrics plus `lambda`, `map_alone` and `map_unigram`."""
    if validate is None:
        lam = DEFAULT_LAMBDA if fixed is None else fixed
        return form.with_mixture(lam), {"lambda": lam}
    measured: dict[float, dict[str, float]] = {}
    for lam in (LAMBDAS if fixed is None else (fixed,)) + (0.0, 1.0):
        if lam not in measured:
            measured[lam] = validate(form.with_mixture(lam))
    candidates = list(LAMBDAS) if fixed is None else [fixed]
    best = max(candidates, key=lambda lam: measured[lam].get(SELECTION_METRIC, float("-inf")))
    extra = {
        "lambda": best,
        f"{SELECTION_METRIC}_alone": measured[0.0].get(SELECTION_METRIC, float("nan")),
        f"{SELECTION_METRIC}_unigram": measured[1.0].get(SELECTION_METRIC, float("nan")),
    }
    return form.with_mixture(best), {**measured[best], **extra}


def em_result(
    form: Mixable,
    validate: Callable[[Form], dict[str, float]] | None,
    fixed: float | None,
    history: list[dict[str, float]],
    seconds: float,
) -> TrainResult:
    """An EM kind's fit as the trainer's result: λ tuned (or fixed), its MAP on the last history row.

    The last row's `step` is the iterations EM ran (fewer than asked when `--max-minutes` ran out).
    """
    best, metrics = tune_lambda(form, validate, fixed)
    history[-1].update({k: v for k, v in metrics.items() if k == SELECTION_METRIC})
    iterations = int(history[-1]["step"])
    return TrainResult(
        best=best, best_metrics=metrics, best_step=iterations, steps=iterations, epochs=float(iterations),
        triples=0, seconds=seconds, history=history,
    )  # fmt: skip
