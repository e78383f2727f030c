"""Hash kernels: a margin-ranking perceptron on hashed (query word, document word) pairs (paper 001,
the baseline of Table 4; Shi et al., 2009), with a learned diagonal:

    f(q, d) = Σ_{i ∈ q, j ∈ d} q_i d_j W[h(i, j)] + Σ_i w_i q_i d_i,   h from ssi.forms.hashkernel

∂f/∂W[k] = Σ_{h(i, j) = k} q_i d_j and ∂f/∂w_i = q_i d_i, so for block coefficients C (∂loss/∂S)
a query row b adds q_i · g_b[j] into bucket h(i, j), g_b = Σ_p C[b, p] d_p, summed only over the
cells where C ≠ 0 (the violated triples). W starts at 0 and w at 1, so training starts exactly at
tf-idf cosine. Each weight takes Adagrad steps (as the full-W perceptron, `fullw`) of size --lr;
the hash size H is --hash-size.
"""

from __future__ import annotations

from typing import ClassVar

import numba
import numpy as np
import torch

from ssi.forms.hashkernel import HashKernel as HashKernelForm
from ssi.forms.hashkernel import csr_parts, hashed_scores, window_offset
from ssi.jit_cache import CACHE
from training.models.base import ModelShape, SSIModel
from training.models.block import Block
from training.models.optim import EPS
from training.numba_threads import use_torch_threads

# Above this share of the vocabulary touched by a query's g_b, whole windows of W are updated
# (contiguous) instead of the touched words one by one (scattered).
DENSE_SHARE = 0.25


@numba.njit(cache=CACHE)
def _scatter_window(grad: np.ndarray, g: np.ndarray, offset: int, scale: float) -> None:
    """grad[(offset + t) mod H] += scale · g[t] for every t, in contiguous runs."""
    hash_size, n = grad.shape[0], g.shape[0]
    t = 0
    while t < n:
        run = min(n - t, hash_size - offset)
        for k in range(run):
            grad[offset + k] += scale * g[t + k]
        t += run
        offset = 0


@numba.njit(cache=CACHE)
def _accumulate(
    q_ptr: np.ndarray,
    q_ids: np.ndarray,
    q_vals: np.ndarray,
    d_ptr: np.ndarray,
    d_ids: np.ndarray,
    d_vals: np.ndarray,
    coeff: np.ndarray,
    grad_W: np.ndarray,
    grad_w: np.ndarray,
    dense_share: float,
) -> None:
    """grad_W[h(i, j)] += Σ_b q_bi g_b[j] and grad_w[i] += Σ_b q_bi g_b[i], g_b = Σ_{p: C[b,p] ≠ 0} C[b, p] d_p."""
    hash_size, vocab = grad_W.shape[0], grad_w.shape[0]
    g = np.zeros(vocab, dtype=np.float32)
    seen = np.zeros(vocab, dtype=np.bool_)
    touched = np.empty(vocab, dtype=np.int64)
    for b in range(q_ptr.shape[0] - 1):
        n_touched = 0
        for p in range(d_ptr.shape[0] - 1):
            c = coeff[b, p]
            if c == 0.0:
                continue
            for k in range(d_ptr[p], d_ptr[p + 1]):
                j = d_ids[k]
                if not seen[j]:
                    seen[j] = True
                    touched[n_touched] = j
                    n_touched += 1
                g[j] += c * d_vals[k]
        if n_touched == 0:
            continue
        dense = n_touched > dense_share * vocab
        for k in range(q_ptr[b], q_ptr[b + 1]):
            s, v = q_ids[k], q_vals[k]
            offset = window_offset(s, hash_size)
            if dense:
                _scatter_window(grad_W, g, offset, v)
            else:
                for x in range(n_touched):
                    h = offset + touched[x]
                    if h >= hash_size:
                        h %= hash_size
                    grad_W[h] += v * g[touched[x]]
            grad_w[s] += v * g[s]
        for x in range(n_touched):
            g[touched[x]] = 0.0
            seen[touched[x]] = False


@numba.njit(parallel=True, cache=CACHE)
def _adagrad(weight: np.ndarray, accumulator: np.ndarray, grad: np.ndarray, lr: float, eps: float) -> None:
    """Adagrad on the entries with a gradient (the rest stay exactly as they are); clears `grad`."""
    for k in numba.prange(weight.shape[0]):
        g = grad[k]
        if g != 0.0:
            a = accumulator[k] + g * g
            accumulator[k] = a
            weight[k] -= lr * g / (np.sqrt(a) + eps)
            grad[k] = 0.0


class HashKernel(SSIModel):
    kind: ClassVar[str] = "hashkernel"
    description: ClassVar[str] = "Σ q_i d_j W[h(i, j)] + Σ w_i q_i d_i, word pairs hashed into --hash-size weights"
    needs_gram: ClassVar[bool] = False
    reads_lexical_rows: ClassVar[bool] = True

    def __init__(self, shape: ModelShape) -> None:
        super().__init__(shape)
        use_torch_threads()
        self.W = np.zeros(shape.hash_size, dtype=np.float32)
        self.w = np.ones(shape.vocab_size, dtype=np.float32)
        self._acc_W = np.zeros_like(self.W)
        self._acc_w = np.zeros_like(self.w)
        self._grad_W = np.zeros_like(self.W)
        self._grad_w = np.zeros_like(self.w)

    def scores(self, block: Block) -> torch.Tensor:
        return torch.from_numpy(hashed_scores(block.queries.full, block.docs.full, self.W, self.w))

    def update(self, block: Block, coeff: torch.Tensor) -> None:
        _accumulate(
            *csr_parts(block.queries.full),
            *csr_parts(block.docs.full),
            np.ascontiguousarray(coeff.numpy(), dtype=np.float32),
            self._grad_W,
            self._grad_w,
            DENSE_SHARE,
        )
        lr = float(self.shape.lr)
        _adagrad(self.W, self._acc_W, self._grad_W, lr, EPS)
        _adagrad(self.w, self._acc_w, self._grad_w, lr, EPS)

    def export(self) -> HashKernelForm:
        return HashKernelForm({"W": self.W.copy(), "w": self.w.copy()})
