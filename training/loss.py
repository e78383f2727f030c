"""The margin ranking loss of SSI: mean over triples of max(0, margin − f(q, d⁺) + f(q, d⁻)).

Returned with its gradient with respect to the block of scores: each violated triple adds −1/T at
(q, d⁺) and +1/T at (q, d⁻), accumulated per (query, document) cell, so the model's backward pass
runs once per cell however many triples share it.

With per-triple `weights` (debiased clicks: training.debias, inverse propensity weighting as in Joachims,
Swaminathan & Schnabel 2017) each triple's hinge and gradient are multiplied by its weight and still
divided by T, the valid triples: weights of mean 1 (training.sampling scales them so) keep the step size
of an unweighted run. Without weights the computation is the unweighted one, unchanged to the bit.

Written in torch on the scores' device, so that a GPU step never waits on the host: the loss and the share
of violated triples come back as 0-d tensors, read only when someone asks (training.trainer). The cells' sums
run in float64: on the CPU by numpy's `bincount` as before (the gradients bit for bit those of earlier runs;
torch's CPU kernels took twice as long on these 2.4 M cells), on a GPU by `index_add_`.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ssi.jit_cache import CACHE
from training.numba_threads import use_torch_threads


def margin_ranking(
    scores: torch.Tensor,
    triple_query: torch.Tensor,
    triple_pos: torch.Tensor,
    triple_neg: torch.Tensor,
    valid: torch.Tensor,
    margin: float = 1.0,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean loss, ∂loss/∂scores as float32 B × P, share of triples violating the margin), all on the scores' device.

    `weights` (T): Σ weight · hinge / T instead of Σ hinge / T; the violated share stays a share of triples.
    """
    n_rows, n_cols = scores.shape
    flat = scores.reshape(-1)
    pos_cell = triple_query * n_cols + triple_pos
    neg_cell = triple_query * n_cols + triple_neg
    hinge = margin - flat[pos_cell] + flat[neg_cell]
    active = (hinge > 0) & valid
    count = valid.sum().clamp(min=1).to(torch.float64)
    weight = active.to(torch.float64) / count
    kept = hinge.clamp(min=0.0) * valid
    if weights is not None:
        weight = weight * weights
        kept = kept * weights
    loss = kept.sum(dtype=torch.float64) / count
    return loss, _coefficients(neg_cell, pos_cell, weight, n_rows, n_cols), active.sum() / count


@numba.njit(parallel=True, cache=CACHE)
def _row_sums(neg: np.ndarray, pos: np.ndarray, w: np.ndarray, starts: np.ndarray, out: np.ndarray) -> None:
    """Row b of `out` from its triples starts[b]:starts[b+1], summed in float64 in the triples' order: the sums
    `np.bincount` makes, bit for bit, with the rows on the threads given."""
    n_cols = out.shape[1]
    for b in numba.prange(out.shape[0]):
        negs = np.zeros(n_cols)
        poss = np.zeros(n_cols)
        for t in range(starts[b], starts[b + 1]):
            negs[neg[t]] += w[t]
            poss[pos[t]] += w[t]
        for c in range(n_cols):
            out[b, c] = np.float32(negs[c] - poss[c])


def _coefficients(
    neg_cell: torch.Tensor, pos_cell: torch.Tensor, weight: torch.Tensor, n_rows: int, n_cols: int
) -> torch.Tensor:
    """Σ weight over each cell's negatives − Σ weight over its positives, summed in float64, as float32 B × P."""
    size = n_rows * n_cols
    if neg_cell.device.type == "cpu":
        neg, pos, w = neg_cell.numpy(), pos_cell.numpy(), weight.numpy()
        if neg.size and np.all(np.diff(neg // n_cols) >= 0):  # triples grouped by query, as the samplers draw them
            out = np.empty((n_rows, n_cols), dtype=np.float32)
            starts = np.searchsorted(neg // n_cols, np.arange(n_rows + 1))
            use_torch_threads()
            _row_sums(neg % n_cols, pos - (pos // n_cols) * n_cols, w, starts, out)
            return torch.from_numpy(out)
        sums = np.bincount(neg, weights=w, minlength=size)
        sums -= np.bincount(pos, weights=w, minlength=size)
        return torch.from_numpy(sums.reshape(n_rows, n_cols).astype(np.float32))
    sums = torch.zeros(2, size, dtype=torch.float64, device=neg_cell.device)
    sums[0].index_add_(0, neg_cell, weight)
    sums[1].index_add_(0, pos_cell, weight)
    return (sums[0] - sums[1]).view(n_rows, n_cols).to(torch.float32)
