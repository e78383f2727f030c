"""What every model kind provides to the trainer: block scores, an update from the loss, an export.

A kind exports its arrays as a form of the contract package (ssi.forms), which defines its score
once; the bundle stores the form and the service ranks it, so adding a kind touches neither.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from ssi.forms import DocumentKeys, Form
from training.models.block import Block


@dataclass(frozen=True)
class ModelShape:
    vocab_size: int  # D
    n_dims: int  # N
    n_words: int  # rows of U and V: the top-n frequent words (frequent-word restriction), ≤ D
    init_scale: float
    lr: float
    seed: int
    hash_size: int = 1 << 20  # H: buckets of hashed word pairs (the hashkernel kind)
    gamma: float = 1.0  # γ of the half-transductive regularizer (paper 004, eq. 6)
    documents: DocumentKeys | None = None  # the training documents, by row (kinds with per-document vectors)
    device: torch.device = torch.device("cpu")  # where the tables live (training.device)


def host(table: torch.Tensor) -> np.ndarray:
    """A table as a numpy array on the host, for export (a copy where the table is on a GPU)."""
    return table.detach().cpu().numpy()


class SSIModel(ABC):
    kind: ClassVar[str]
    description: ClassVar[str]
    # Whether the trainer must supply the fixed tf-idf block q·d (False when the kind learns it).
    needs_gram: ClassVar[bool] = True
    # Whether the model's scores read the lexical document rows (its learned part is a word weighting: diagonal,
    # hash kernels) rather than the semantic rows (ssi.vocab.Vocabulary.semantic_rows).
    reads_lexical_rows: ClassVar[bool] = False
    # Whether the kind learns a vector per training document (the trainer then supplies ModelShape.documents).
    per_document: ClassVar[bool] = False
    # Whether the kind's step runs on a GPU (training.device): its products go through the block's rows alone.
    runs_on_device: ClassVar[bool] = False

    def __init__(self, shape: ModelShape) -> None:
        self.shape = shape

    @abstractmethod
    def scores(self, block: Block) -> torch.Tensor:
        """S[b, p] = f(q_b, d_p) for the block, float32 B × P on the model's device; keeps what `update` needs."""

    @abstractmethod
    def update(self, block: Block, coeff: torch.Tensor) -> None:
        """One step against ∂loss/∂S = `coeff` (B × P), for the block last passed to `scores`."""

    def warm_start(self, init: Form, lr_scale: float = 1.0) -> None:
        """Start from a trained model's arrays, those tables learning at `lr_scale` × lr; kinds that cannot say so."""
        raise ValueError(f"a '{self.kind}' model trains from scratch: --init-from does not apply to it")

    @abstractmethod
    def export(self) -> Form:
        """The model as its form (ssi.forms), over the whole vocabulary."""

    def _restrict(self, matrix: np.ndarray) -> np.ndarray:
        """A bundle's N × D matrix as this model's (n_words × N) table; refuses to drop non-zero columns."""
        n_words = self.shape.n_words
        if np.any(np.asarray(matrix[:, n_words:]) != 0):
            raise ValueError(
                f"the warm-start model uses words beyond the top {n_words}: train with --frequent-words "
                "at least as large as the one it was trained with"
            )
        return np.ascontiguousarray(np.asarray(matrix[:, :n_words], dtype=np.float32).T)

    def _expand(self, table: np.ndarray) -> np.ndarray:
        """A (n_words × N) table as the bundle's N × D matrix, zero beyond the top-n words."""
        out = np.zeros((table.shape[1], self.shape.vocab_size), dtype=np.float32)
        out[:, : table.shape[0]] = table.T
        return out
