"""SSI with correlated feature hashing (paper 001, section 2.2.1), trained on SSI triples.

    f(q, d) = (U q_F)·(V d_F) + α (U₂ h_q)·(V₂ h_d) + q·d                  (ssi.forms.cfh)

As in the paper's full-dictionary experiment, the frequent-word SSI (U, V over the top F words)
warm-starts from a trained low-rank bundle (`--init-from`, its rate scaled by `--warm-lr-scale`)
and a second model on the hashed block h (the rare words and 2-grams, each spread over its k
DICE-correlated frequent words; ssi.feature_hashing) is learned beside it, mixed in by a learned
α ≥ 0. A row is [x_D ; h] of width D + F, and the hashed slots are its last F columns; the frequent
words are the first F, so F is `--frequent-words`.

With E = Xq U, P = Xd V, A = Hq U₂, B = Hd V₂, M = A Bᵀ and C = ∂loss/∂S:

    ∂/∂U = Xqᵀ(C P)   ∂/∂V = Xdᵀ(Cᵀ E)   ∂/∂U₂ = α Hqᵀ(C B)   ∂/∂V₂ = α Hdᵀ(Cᵀ A)   ∂/∂α = Σ C∘M

U₂ starts small and random, V₂ at zero: the first score is exactly the warm start's (plus the hashed
slots' fixed overlap in q·d). The export folds α into U₂ and V₂ (√α each).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
import torch

from ssi.forms import Form
from ssi.forms.cfh import CorrelatedHashingForm
from training.models.base import ModelShape
from training.models.block import Block, SparseRows
from training.models.lowrank import LowRank
from training.models.optim import EPS, RowAdagrad


class HashedRows:
    """The hashed block (last F columns) of a block's rows, ready for both products."""

    def __init__(self, rows: SparseRows, n_words: int) -> None:
        hashed = sp.csr_matrix(sp.csr_matrix(rows.full)[:, n_words:], dtype=np.float32)
        self.rows = SparseRows.of(hashed, hashed.shape[1])
        self.touched = self.rows.touched_words


class CorrelatedHashing(LowRank):
    kind: ClassVar[str] = "cfh"
    description: ClassVar[str] = "(Uq)·(Vd) + α(U₂h_q)·(V₂h_d) + q·d, rare words and 2-grams hashed (--init-from)"
    form: ClassVar[type[Form]] = CorrelatedHashingForm
    runs_on_device: ClassVar[bool] = False  # its hashed rows are cut from the block's scipy rows

    def __init__(self, shape: ModelShape) -> None:
        super().__init__(shape)
        self.n_hashed = shape.n_words  # F: the hashed slots are the frequent words
        self.n_vocab_words = shape.vocab_size - shape.n_words  # D
        if self.n_vocab_words < self.n_hashed:
            raise ValueError(
                f"a 'cfh' model needs rows [x_D ; h] with D ≥ F: got {shape.vocab_size} features "
                f"for F = {shape.n_words}"
                " (train it with --frequent-words F on a vocabulary with its correlated-hashing map)"
            )
        gen = torch.Generator().manual_seed(shape.seed + 2)
        self.U2 = torch.randn(self.n_hashed, shape.n_dims, generator=gen).mul_(shape.init_scale)
        self.V2 = torch.zeros(self.n_hashed, shape.n_dims)
        self.opt_U2 = RowAdagrad(self.U2, shape.lr)
        self.opt_V2 = RowAdagrad(self.V2, shape.lr)
        self.alpha = 1.0
        self._alpha_acc = 0.0
        self.hashed_reached = torch.zeros(self.n_hashed, dtype=torch.bool)
        self._doc_cache: tuple[SparseRows, HashedRows] | None = None
        self._hq: HashedRows | None = None
        self._hd: HashedRows | None = None
        self._A: torch.Tensor | None = None
        self._B: torch.Tensor | None = None
        self._M: torch.Tensor | None = None

    def _hashed_docs(self, docs: SparseRows) -> HashedRows:
        if self._doc_cache is not None and self._doc_cache[0] is docs:
            return self._doc_cache[1]
        hashed = HashedRows(docs, self.n_vocab_words)
        self._doc_cache = (docs, hashed)
        return hashed

    def scores(self, block: Block) -> torch.Tensor:
        self._EQ = block.queries.times(self.U)
        self._ED = block.docs.times(self.V)
        self._hq = HashedRows(block.queries, self.n_vocab_words)
        self._hd = self._hashed_docs(block.docs)
        self._A = self._hq.rows.times(self.U2)
        self._B = self._hd.rows.times(self.V2)
        self._M = self._A @ self._B.T
        S = self._EQ @ self._ED.T + self.alpha * self._M
        if block.gram is not None:
            S += block.gram
        return S

    def update(self, block: Block, coeff: torch.Tensor) -> None:
        assert self._EQ is not None and self._ED is not None and self._hq is not None and self._hd is not None
        assert self._A is not None and self._B is not None and self._M is not None
        C = coeff
        grad_alpha = float((C * self._M).sum())
        self.opt_U.step(block.queries.t_times(C @ self._ED), block.queries.touched_words)
        assert self.opt_V is not None
        self.opt_V.step(block.docs.t_times(C.T @ self._EQ), block.docs.touched_words)
        self.opt_U2.step(self._hq.rows.t_times((C @ self._B).mul_(self.alpha)), self._hq.touched)
        self.opt_V2.step(self._hd.rows.t_times((C.T @ self._A).mul_(self.alpha)), self._hd.touched)
        self._alpha_acc += grad_alpha * grad_alpha
        self.alpha = max(0.0, self.alpha - self.opt_U2.lr * grad_alpha / (math.sqrt(self._alpha_acc) + EPS))
        self.reached[torch.from_numpy(block.queries.touched_words.astype(np.int64))] = True
        self.hashed_reached[torch.from_numpy(self._hq.touched.astype(np.int64))] = True
        self._EQ = self._ED = self._A = self._B = self._M = None
        self._hq = None

    def _words(self, table: np.ndarray) -> np.ndarray:
        """An (F × N) table as the bundle's N × D matrix, zero beyond the top F words."""
        out = np.zeros((table.shape[1], self.n_vocab_words), dtype=np.float32)
        out[:, : table.shape[0]] = table.T
        return out

    def export(self) -> Form:
        # Unreached rows of U and U₂ hold only their random start (see LowRank.export): zero them.
        scale = math.sqrt(self.alpha)
        return self.form(
            {
                "U": self._words((self.U * self.reached[:, None]).numpy()),
                "V": self._words(self.V.numpy()),
                "U2": np.ascontiguousarray(
                    (self.U2 * self.hashed_reached[:, None]).numpy().T * scale, dtype=np.float32
                ),
                "V2": np.ascontiguousarray(self.V2.numpy().T * scale, dtype=np.float32),
            }
        )
