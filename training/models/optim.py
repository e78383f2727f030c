"""Adagrad on rows of an embedding table, touching only the rows a step's words reach.

Adagrad (Duchi et al., 2011): G_t = G_{t-1} + g², W ← W − η g / (√G_t + ε). A row whose gradient
is zero is left exactly as it is, so when most rows are touched the dense in-place update is the
same computation, done faster; when few are (short queries, huge vocabularies) only those rows
are read and written. On a GPU the update is always the dense one (`rows` None): it costs less there than
finding out which rows a step touched.

On the CPU the dense update is one pass of a numba loop (`_dense_step`) rather than PyTorch's four (the
accumulator's addcmul, a square root into a new table, ε, addcdiv), each streaming the whole table through
memory (12 MB for Wikispeedia's D = 30,000 × N = 100).
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ssi.jit_cache import CACHE
from training.numba_threads import use_torch_threads

DENSE_SHARE = 0.25
EPS = 1e-8
NUMBA_DENSE = True  # the CPU's dense update in one numba pass (False: PyTorch's ops; benchmarks.train_kernels)


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
            self.dense_step(grad)
            return
        index = torch.from_numpy(rows.astype(np.int64))
        self.step_rows(grad.index_select(0, index), rows)

    def dense_step(self, grad: torch.Tensor) -> None:
        """Apply `grad` to every row (same shape as the table)."""
        if NUMBA_DENSE and self.weight.device.type == "cpu" and _fits_kernel(self.weight, self.accumulator, grad):
            use_torch_threads()
            _dense_step(self.weight.numpy(), self.accumulator.numpy(), grad.numpy(), self.lr)
            return
        self.accumulator.addcmul_(grad, grad)
        self.weight.addcdiv_(grad, self.accumulator.sqrt().add_(EPS), value=-self.lr)

    def step_rows(self, g: torch.Tensor, rows: np.ndarray) -> None:
        """Apply `g`, the gradients of `rows` alone (len(rows) × dims, rows distinct; `g` is overwritten)."""
        if rows.size == 0:
            return
        index = torch.from_numpy(rows.astype(np.int64))
        acc = self.accumulator.index_select(0, index).addcmul_(g, g)
        self.accumulator.index_copy_(0, index, acc)
        self.weight.index_add_(0, index, g.div_(acc.sqrt_().add_(EPS)), alpha=-self.lr)


def _fits_kernel(*tables: torch.Tensor) -> bool:
    """Whether the numba loop can work on these tables in place: contiguous float32, no gradient attached."""
    return all(t.dtype == torch.float32 and t.is_contiguous() and not t.requires_grad for t in tables)


@numba.njit(parallel=True, cache=CACHE)
def _dense_step(weight: np.ndarray, accumulator: np.ndarray, grad: np.ndarray, lr: float) -> None:
    """Adagrad on every row in one pass, in PyTorch's order: its addcmul rounds a + g·g once (a fused multiply-add;
    here in float64, exact for float32 inputs, so the accumulators are its bits), its addcdiv computes
    w + (−η·g) / (√a + ε) in float32. Only √a may differ, by one unit in the last place: PyTorch's vectorized square
    root is not correctly rounded (18 % of 100,000 random values), numba's is."""
    w, a, g = weight.reshape(-1), accumulator.reshape(-1), grad.reshape(-1)
    step = np.float32(-lr)
    eps = np.float32(EPS)
    for i in numba.prange(w.size):
        gi = g[i]
        ai = np.float32(np.float64(a[i]) + np.float64(gi) * np.float64(gi))
        a[i] = ai
        w[i] = w[i] + step * gi / (np.sqrt(ai) + eps)
