"""The margin ranking loss of SSI: mean over triples of max(0, margin − f(q, d⁺) + f(q, d⁻)).

Returned with its gradient with respect to the block of scores: each violated triple adds −1/T at
(q, d⁺) and +1/T at (q, d⁻), accumulated per (query, document) cell, so the model's backward pass
runs once per cell however many triples share it.
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
) -> tuple[float, np.ndarray, float]:
    """(mean loss, ∂loss/∂scores as float32 B × P, share of triples violating the margin)."""
    n_rows, n_cols = scores.shape
    flat = scores.ravel()
    pos_cell = triple_query * n_cols + triple_pos
    neg_cell = triple_query * n_cols + triple_neg
    hinge = margin - flat[pos_cell] + flat[neg_cell]
    active = (hinge > 0) & valid
    count = max(int(valid.sum()), 1)
    weight = active / count
    coeff = np.bincount(neg_cell, weights=weight, minlength=flat.size) - np.bincount(
        pos_cell, weights=weight, minlength=flat.size
    )
    loss = float(np.maximum(hinge, 0.0)[valid].sum() / count)
    return loss, coeff.reshape(n_rows, n_cols).astype(np.float32), float(active.sum() / count)
