"""The top eigenvectors of a symmetric positive semi-definite operator given only by its products.

CL-LSA's matrix ZᵀZ (Z: the concatenated pair vectors [q ; d], paper 003 section 5.3) is 2D × 2D:
with D = 30,000 it is never formed. Its product with a block of vectors costs two passes over the
sparse texts, so ARPACK's Lanczos iteration (scipy `eigsh`) finds the top k from products alone.
Small operators (tests) are formed densely and solved exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.sparse.linalg import LinearOperator, eigsh

DENSE_LIMIT = 1500  # operators up to this size are formed and solved densely

Product = Callable[[np.ndarray], np.ndarray]  # [dim, b] ↦ G [dim, b]


def top_eigenvectors(product: Product, dim: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(eigenvalues [k], eigenvectors [dim, k]) of the k largest eigenvalues of G, in decreasing order.

    k is capped at dim − 1 (ARPACK's limit; the dense path keeps the same cap for one behaviour).
    """
    k = max(1, min(k, dim - 1))
    if dim <= DENSE_LIMIT:
        G = product(np.eye(dim))
        values, vectors = np.linalg.eigh((G + G.T) / 2)
        values, vectors = values[::-1][:k], vectors[:, ::-1][:, :k]
    else:
        operator = LinearOperator(
            (dim, dim),
            matvec=lambda v: product(np.asarray(v, dtype=np.float64).reshape(dim, 1)).ravel(),
            matmat=lambda V: product(np.asarray(V, dtype=np.float64)),
            dtype=np.float64,
        )
        v0 = np.random.default_rng(seed).standard_normal(dim)
        values, vectors = eigsh(operator, k=k, which="LA", v0=v0)
        order = np.argsort(-values)
        values, vectors = values[order], vectors[:, order]
    # A fixed sign per vector (its largest entry positive), so a refit gives the same arrays.
    signs = np.sign(vectors[np.argmax(np.abs(vectors), axis=0), np.arange(vectors.shape[1])])
    return values, vectors * np.where(signs == 0, 1.0, signs)
