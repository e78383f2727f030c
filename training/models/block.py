"""A training block: the tf-idf rows of a batch of queries and of a pool of candidate documents.

SSI's gradients only touch the words present in q and d, and documents repeat across triples.
So one step scores a batch of B queries against a pool of P documents at once, S = (U Xq)ᵀ(V Xd)
plus the lexical block, and each document's V d is computed once per step however many triples
use it. The sparse matrices are kept both in scipy (for slicing) and as torch CSR (for the
multi-threaded sparse × dense products).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


def to_torch_csr(matrix: sp.csr_matrix) -> torch.Tensor:
    """scipy CSR -> torch CSR float32, sharing nothing with the scipy arrays' later changes."""
    matrix = matrix.tocsr()
    return torch.sparse_csr_tensor(
        torch.from_numpy(matrix.indptr.astype(np.int64)),
        torch.from_numpy(matrix.indices.astype(np.int64)),
        torch.from_numpy(np.asarray(matrix.data, dtype=np.float32)),
        size=matrix.shape,
        check_invariants=False,
    )


@dataclass
class SparseRows:
    """Rows of a tf-idf matrix restricted to the first `n_words` words, ready for both products.

    `forward` is X (rows × n_words) for embeddings X W; `backward` is Xᵀ for gradients Xᵀ G.
    """

    full: sp.csr_matrix
    forward: torch.Tensor
    backward: torch.Tensor
    touched_words: np.ndarray

    @classmethod
    def of(cls, rows: sp.csr_matrix, n_words: int) -> SparseRows:
        restricted = rows[:, :n_words].tocsr() if n_words < rows.shape[1] else rows
        return cls(
            full=rows,
            forward=to_torch_csr(restricted),
            backward=to_torch_csr(restricted.T.tocsr()),
            touched_words=np.flatnonzero(np.bincount(restricted.indices, minlength=restricted.shape[1])),
        )

    @property
    def n_rows(self) -> int:
        return self.full.shape[0]


@dataclass
class Block:
    """One step's data: B queries, P pool documents, and the fixed q·d block when it is cached."""

    queries: SparseRows
    docs: SparseRows
    gram: np.ndarray | None  # B × P tf-idf inner products q·d (None when the model learns them)
    doc_rows: np.ndarray | None = None  # P: the pool's document rows (of the training corpus)
    triples: Triples | None = None  # the step's triples, set once negatives are drawn (before `update`)


@dataclass(frozen=True)
class Triples:
    """A step's (query, positive, negative) triples as block indices, for kinds with a loss of their own."""

    query: np.ndarray  # T, index into the block's queries
    pos: np.ndarray  # T, index into the pool
    neg: np.ndarray  # T, index into the pool
    valid: np.ndarray  # T bool: the triple found a valid negative
    margin: float
