"""Kinds fitted in closed form or by EM rather than by the margin-ranking SGD loop.

LSA is an SVD, OPCA a generalized eigenproblem, PLSA and BLTM run EM, S2Net its own logistic loss
(paper 003): none of them samples triples, so they do not fit `training.models.SSIModel`'s
`scores`/`update` protocol. A fitted kind gets the same training data, settings and validator as the
SGD kinds and returns the same `TrainResult`, and `training.run` exports it as a bundle like any
other: the form it returns is the single definition of its score (ssi.forms).

`history` rows are what the fit saw per iteration: `step` (the iteration), `seconds`, and any of
`loss`, `log_likelihood` and the validation metrics; `training.history_plot` draws them beside the
bundle.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from ssi.forms import Form
from ssi.products import DocMatrix
from training.data import TrainingData
from training.settings import TrainSettings
from training.trainer import TrainResult

Validator = Callable[[Form], dict[str, float]]


@dataclass
class FitContext:
    """What a fitted kind may read: the data, one settings object, the documents and the validator."""

    data: TrainingData
    settings: TrainSettings
    docs: DocMatrix  # the training documents' tf-idf rows (ids known)
    validate: Validator | None  # validation MAP of a candidate form; None without validation pairs
    init: Form | None = None  # --init-from's form, where the kind can start from it
    show_progress: bool = True


class FittedKind(ABC):
    """A kind that fits its form from the training pairs (and documents) in one call."""

    kind: ClassVar[str]
    description: ClassVar[str]

    @abstractmethod
    def fit(self, context: FitContext) -> TrainResult:
        """The fitted form (best on validation where a knob was tuned), its metrics and its history."""
