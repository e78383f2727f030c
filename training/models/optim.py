"""Adagrad on rows of an embedding table, touching only the rows a step's words reach.

Adagrad (Duchi et al., 2011): G_t = G_{t-1} + g², W ← W − η g / (√G_t + ε). A row whose gradient
is zero is left exactly as it is, so when most rows are touched the dense in-place update is the
same computation, done faster; when few are (short queries, huge vocabularies) only those rows
are read and written. On a GPU the update is always the dense one (`rows` None): it costs less there than
finding out which rows a step touched.
"""

from __future__ import annotations

import numpy as np
import torch

DENSE_SHARE = 0.25
EPS = 1e-8


class RowAdagrad:
    def __init__(self, weight: torch.Tensor, lr: float) -> None:
        self.weight = weight
        self.lr = lr
        self.accumulator = torch.zeros_like(weight)

    def step(self, grad: torch.Tensor, rows: np.ndarray | None) -> None:
        """Apply `grad` (same shape as the table, zero outside `rows`; None: the whole table)."""
        if rows is not None and rows.size == 0:
            return
        if rows is None or rows.size >= DENSE_SHARE * self.weight.shape[0]:
            self.accumulator.addcmul_(grad, grad)
            self.weight.addcdiv_(grad, self.accumulator.sqrt().add_(EPS), value=-self.lr)
            return
        index = torch.from_numpy(rows.astype(np.int64))
        self.step_rows(grad.index_select(0, index), rows)

    def step_rows(self, g: torch.Tensor, rows: np.ndarray) -> None:
        """Apply `g`, the gradients of `rows` alone (len(rows) × dims, rows distinct; `g` is overwritten)."""
        if rows.size == 0:
            return
        index = torch.from_numpy(rows.astype(np.int64))
        acc = self.accumulator.index_select(0, index).addcmul_(g, g)
        self.accumulator.index_copy_(0, index, acc)
        self.weight.index_add_(0, index, g.div_(acc.sqrt_().add_(EPS)), alpha=-self.lr)
