"""Hash kernels (Shi et al., 2009), the baseline of the SSI paper (001, section 2.2.1 and Table 4):
a margin-ranking perceptron on hashed (query word, document word) pairs, plus a learned diagonal:

    f(q, d) = Σ_{i ∈ q, j ∈ d} q_i d_j W[h(i, j)] + Σ_i w_i q_i d_i        W: H,  w: D
    h(s, t) = mod(s·P + t, H),  P a large prime (the paper's hash, as in Vowpal Wabbit)

Every (s, t) pair shares its weight with every pair that hashes to the same of H buckets, at
random: with H below D² the pairs collide, and words without a common meaning share a weight.

For a fixed query word s, h(s, ·) walks W contiguously from s·P mod H, so a query's row
u_q[t] = Σ_s q_s W[h(s, t)] + w_t q_t is a sum of |q| windows of W, and f(q, d) = Σ_t d_t u_q[t]:
scoring costs |q|·D multiply-adds per query plus one pass over the documents, not |q|·|d| per pair.

Not served exactly: f is no inner product of a query embedding with a stored document vector short
of a dense D × D query map, so the service refuses it at load; `ssi eval` ranks it by
`reference_scores`. The bundle holds W and w and no query encoder.
"""

from __future__ import annotations

from typing import ClassVar

import numba
import numpy as np
import scipy.sparse as sp

from ssi.forms.base import ArraySpec, DocumentProducts, Form, FormError
from ssi.jit_cache import CACHE

# The kernels compile on first use (a few seconds) and are not cached on disk (numba's cache=CACHE): an
# install the process cannot write to, as in the service image, would fail at import.

# A prime near 2³²/φ (Knuth's multiplicative hash): s·P mod H spreads the words' windows over W for
# any H, powers of two included (2³¹ − 1 would put word s at offset −s mod 2^k, next to word s + 1).
PRIME = 2_654_435_761
QUERY_BLOCK = 256  # query rows u_q held at once (256 × D float32)


def pair_hash(s: np.ndarray | int, t: np.ndarray | int, hash_size: int) -> np.ndarray:
    """h(s, t) = mod(s·P + t, H): the bucket of W shared by query word s and document word t."""
    return (np.asarray(s, dtype=np.int64) * PRIME + np.asarray(t, dtype=np.int64)) % hash_size


@numba.njit(inline="always", cache=CACHE)
def window_offset(s: int, hash_size: int) -> int:
    """h(s, 0); h(s, t) is then (offset + t) mod H."""
    return (s * PRIME) % hash_size


@numba.njit(cache=CACHE)
def query_row(u: np.ndarray, q_ids: np.ndarray, q_vals: np.ndarray, W_ext: np.ndarray, w: np.ndarray) -> None:
    """u ← u_q: Σ_s q_s W[h(s, ·)] plus the diagonal w_t q_t; `W_ext` is W repeated to H + D entries.

    Four query words per pass over u (their windows of W read side by side) quarter the traffic on u.
    """
    n, m = u.shape[0], q_ids.shape[0]
    hash_size = W_ext.shape[0] - n
    u[:] = 0.0
    k = 0
    while k < m:
        o0, a0 = window_offset(q_ids[k], hash_size), q_vals[k]
        if k + 4 <= m:
            o1, a1 = window_offset(q_ids[k + 1], hash_size), q_vals[k + 1]
            o2, a2 = window_offset(q_ids[k + 2], hash_size), q_vals[k + 2]
            o3, a3 = window_offset(q_ids[k + 3], hash_size), q_vals[k + 3]
            for t in range(n):
                u[t] += a0 * W_ext[o0 + t] + a1 * W_ext[o1 + t] + a2 * W_ext[o2 + t] + a3 * W_ext[o3 + t]
            k += 4
        else:
            for t in range(n):
                u[t] += a0 * W_ext[o0 + t]
            k += 1
    for k in range(m):
        u[q_ids[k]] += w[q_ids[k]] * q_vals[k]


@numba.njit(parallel=True, cache=CACHE)
def query_rows(
    q_ptr: np.ndarray, q_ids: np.ndarray, q_vals: np.ndarray, W_ext: np.ndarray, w: np.ndarray
) -> np.ndarray:
    """u_q of every CSR query row, float32 [queries, D]."""
    out = np.empty((q_ptr.shape[0] - 1, w.shape[0]), dtype=np.float32)
    for b in numba.prange(q_ptr.shape[0] - 1):
        query_row(out[b], q_ids[q_ptr[b] : q_ptr[b + 1]], q_vals[q_ptr[b] : q_ptr[b + 1]], W_ext, w)
    return out


def csr_parts(X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, data) of a CSR matrix as int64, int64, float32: the kernels' argument types."""
    X = sp.csr_matrix(X)
    return X.indptr.astype(np.int64), X.indices.astype(np.int64), np.asarray(X.data, dtype=np.float32)


def hashed_scores(Q: sp.csr_matrix, X: sp.csr_matrix, W: np.ndarray, w: np.ndarray) -> np.ndarray:
    """f(q, d) of every row of Q against every row of X (the trainer's block scores use it too)."""
    if Q.shape[1] != w.shape[0] or X.shape[1] != w.shape[0]:
        raise ValueError(f"queries have {Q.shape[1]} features, documents {X.shape[1]}, the model {w.shape[0]}")
    W_ext = np.resize(np.asarray(W, dtype=np.float32), W.shape[0] + w.shape[0])  # windows never wrap
    w = np.ascontiguousarray(w, dtype=np.float32)
    Q, X = sp.csr_matrix(Q), sp.csr_matrix(X, dtype=np.float32)
    out = np.empty((Q.shape[0], X.shape[0]), dtype=np.float32)
    for first in range(0, Q.shape[0], QUERY_BLOCK):
        U = query_rows(*csr_parts(Q[first : first + QUERY_BLOCK]), W_ext, w)
        out[first : first + QUERY_BLOCK] = np.asarray(X @ U.T).T  # f(q, d) = Σ_t d_t u_q[t]
    return out


class HashKernel(Form):
    name: ClassVar[str] = "hashkernel"
    description: ClassVar[str] = "Σ q_i d_j W[h(i, j)] + Σ w_i q_i d_i, word pairs hashed into H weights"
    paper: ClassVar[str] = "SSI (paper 001), Hash Kernels baseline (Shi et al., 2009)"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (
        ArraySpec("W", ("H",), "weight of each hash bucket of (query word, document word) pairs"),
        ArraySpec("w", ("D",), "weight of each word on the diagonal"),
    )
    served_exactly: ClassVar[bool] = False

    @property
    def hash_size(self) -> int:
        return int(self.values["W"].shape[0])

    def query_map(self) -> np.ndarray:
        raise FormError(
            "form 'hashkernel' has no query map: its score is no inner product of a query embedding with a "
            "document vector (that map would be a dense D × D matrix); rank it by reference_scores (`ssi eval`)"
        )

    def embed_documents(self, X: sp.csr_matrix) -> np.ndarray:
        raise FormError("form 'hashkernel' stores no document embedding: it is not served from an index")

    def lexical_weights(self) -> np.ndarray:
        return np.asarray(self.values["w"], dtype=np.float32)

    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        return hashed_scores(Q, docs.X, self.values["W"], self.values["w"])
