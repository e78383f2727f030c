"""Several low-rank models trained from different seeds, folded into one of the same size (`ssi train --ensemble K`).

A low-rank model's learned part is qᵀ(UᵀV)d. Trained on a few hundred pairs (a click log, a small labelled set),
two seeds give models whose NDCG@10 differs by up to 0.02 on SciFact's validation claims: the random start of U
is not all trained away. The average of K members' UᵀV keeps what they agree on; its best rank-N approximation
(the truncated SVD, Eckart–Young) is again a low-rank model with N rows, served exactly as one member, at no
cost to the index or the query encoder. Measured in docs/results/learning-loop.md.

The D × D matrix is never formed: stacking the members' factors gives (1/K) Σ U_kᵀV_k = AᵀB with A, B of
K·N rows; with A = Q_a R_a and B = Q_b R_b (thin QR of Aᵀ and Bᵀ) the SVD of the small R_a R_bᵀ gives the
truncation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ssi.forms.lowrank import LowRank


def fold_lowrank(members: Sequence[LowRank], n_dims: int) -> LowRank:
    """The best rank-`n_dims` low-rank model of the members' average UᵀV (each member's diagonal is the identity,
    so the average's is too)."""
    if not members:
        raise ValueError("an ensemble needs at least one member")
    k = len(members)
    a = np.vstack([np.asarray(m.values["U"], dtype=np.float64) for m in members]) / np.sqrt(k)
    b = np.vstack([np.asarray(m.values["V"], dtype=np.float64) for m in members]) / np.sqrt(k)
    q_a, r_a = np.linalg.qr(a.T)
    q_b, r_b = np.linalg.qr(b.T)
    left, singular, right_t = np.linalg.svd(r_a @ r_b.T)
    n = min(n_dims, singular.size)
    root = np.sqrt(singular[:n])
    u = (q_a @ (left[:, :n] * root)).T
    v = (q_b @ (right_t[:n].T * root)).T
    if n < n_dims:  # fewer directions than rows (K·N < N cannot happen; a tiny vocabulary can): zero rows
        u = np.vstack([u, np.zeros((n_dims - n, u.shape[1]))])
        v = np.vstack([v, np.zeros((n_dims - n, v.shape[1]))])
    return LowRank({"U": u.astype(np.float32), "V": v.astype(np.float32)})
