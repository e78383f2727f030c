"""What every model kind provides to the trainer: block scores, an update from the loss, an export.

All kinds export to one scoring form, f(q, d) = (U q)·(V d) + Σ_i w_i q_i d_i, which the bundle
stores and the service scores, so adding a kind never touches the service.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from training.models.block import Block


@dataclass
class ExportedModel:
    """U, V: float32 N × D; lexical: float32 D (the w of the diagonal term)."""

    U: np.ndarray
    V: np.ndarray
    lexical: np.ndarray


@dataclass(frozen=True)
class ModelShape:
    vocab_size: int  # D
    n_dims: int  # N
    n_words: int  # rows of U and V: the top-n frequent words (frequent-word restriction), ≤ D
    init_scale: float
    lr: float
    seed: int


class SSIModel(ABC):
    kind: ClassVar[str]
    description: ClassVar[str]
    # Whether the trainer must supply the fixed tf-idf block q·d (False when the kind learns it).
    needs_gram: ClassVar[bool] = True

    def __init__(self, shape: ModelShape) -> None:
        self.shape = shape

    @abstractmethod
    def scores(self, block: Block) -> np.ndarray:
        """S[b, p] = f(q_b, d_p) for the block, float32 B × P; keeps what `update` needs."""

    @abstractmethod
    def update(self, block: Block, coeff: np.ndarray) -> None:
        """One step against ∂loss/∂S = `coeff` (B × P), for the block last passed to `scores`."""

    @abstractmethod
    def export(self) -> ExportedModel:
        """The model in the bundle's scoring form, over the whole vocabulary."""

    def _expand(self, table: np.ndarray) -> np.ndarray:
        """A (n_words × N) table as the bundle's N × D matrix, zero beyond the top-n words."""
        out = np.zeros((table.shape[1], self.shape.vocab_size), dtype=np.float32)
        out[:, : table.shape[0]] = table.T
        return out
