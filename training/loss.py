"""The margin ranking loss of SSI: mean over triples of max(0, margin − f(q, d⁺) + f(q, d⁻)).

Returned with its gradient with respect to the block of scores: each violated triple adds −1/T at
(q, d⁺) and +1/T at (q, d⁻), accumulated per (query, document) cell, so the model's backward pass
runs once per cell however many triples share it.

With per-triple `weights` (debiased clicks: training.debias, inverse propensity weighting as in Joachims,
Swaminathan & Schnabel 2017) each triple's hinge and gradient are multiplied by its weight and still
divided by T, the valid triples: weights of mean 1 (training.sampling scales them so) keep the step size
of an unweighted run. Without weights the computation is the unweighted one, unchanged to the bit.
"""

from __future__ import annotations

import numpy as np


def margin_ranking(
    scores: np.ndarray,
    triple_query: np.ndarray,
    triple_pos: np.ndarray,
    triple_neg: np.ndarray,
    valid: np.ndarray,
    margin: float = 1.0,
    weights: np.ndarray | None = None,
) -> tuple[float, np.ndarray, float]:
    """(mean loss, ∂loss/∂scores as float32 B × P, share of triples violating the margin).

    `weights` (T): Σ weight · hinge / T instead of Σ hinge / T; the violated share stays a share of triples.
    """
    n_rows, n_cols = scores.shape
    flat = scores.ravel()
    pos_cell = triple_query * n_cols + triple_pos
    neg_cell = triple_query * n_cols + triple_neg
    hinge = margin - flat[pos_cell] + flat[neg_cell]
    active = (hinge > 0) & valid
    count = max(int(valid.sum()), 1)
    if weights is None:
        weight = active / count
        loss = float(np.maximum(hinge, 0.0)[valid].sum() / count)
    else:
        weight = active * weights / count
        loss = float((np.maximum(hinge, 0.0) * weights)[valid].sum() / count)
    coeff = np.bincount(neg_cell, weights=weight, minlength=flat.size) - np.bincount(
        pos_cell, weights=weight, minlength=flat.size
    )
    return loss, coeff.reshape(n_rows, n_cols).astype(np.float32), float(active.sum() / count)
