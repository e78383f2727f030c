"""A training block: the tf-idf rows of a batch of queries and of a pool of candidate documents.

SSI's gradients only touch the words present in q and d, and documents repeat across triples.
So one step scores a batch of B queries against a pool of P documents at once, S = (U Xq)ᵀ(V Xd)
plus the lexical block, and each document's V d is computed once per step however many triples
use it. The sparse matrices are kept in scipy, with their transposes for the gradients; the products
run row-parallel in numba (training.models.spmm).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from training.models.spmm import rows_times

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

    `rows` is X (rows × n_words, float32 CSR) for embeddings X W; `rows_t` is Xᵀ for gradients Xᵀ G.
    """

    full: sp.csr_matrix
    rows: sp.csr_matrix
    rows_t: sp.csr_matrix
    touched_words: np.ndarray

    @classmethod
    def of(cls, rows: sp.csr_matrix, n_words: int) -> SparseRows:
        restricted = sp.csr_matrix(rows[:, :n_words] if n_words < rows.shape[1] else rows, dtype=np.float32)
        return cls(
            full=rows,
            rows=restricted,
            rows_t=restricted.T.tocsr(),
            touched_words=np.flatnonzero(np.bincount(restricted.indices, minlength=restricted.shape[1])),
        )

    @property
    def n_rows(self) -> int:
        return self.full.shape[0]

    def times(self, table: torch.Tensor) -> torch.Tensor:
        """X W: each row's embedding under `table` (n_words × N)."""
        return rows_times(self.rows, table)

    def t_times(self, grad: torch.Tensor) -> torch.Tensor:
        """Xᵀ G: the gradient of a table from the gradients of the rows' embeddings (n_rows × N)."""
        return rows_times(self.rows_t, grad)

    @property
    def update_rows(self) -> np.ndarray:
        """The words these rows reach: the table rows an optimizer step must touch (training.models.optim)."""
        return self.touched_words

    def mark(self, reached: torch.Tensor) -> None:
        """Set `reached` (a bool per word) for the words these rows reach."""
        reached[torch.from_numpy(self.touched_words.astype(np.int64))] = True


def union_rows(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    """The table rows two blocks of rows reach together (None, "every row", where either says so)."""
    return None if a is None or b is None else np.union1d(a, b)


@dataclass
class Block:
    """One step's data: B queries, P pool documents, and the fixed q·d block when it is cached."""

    queries: SparseRows  # or training.models.device_rows.DeviceRows: the same products, on a GPU
    docs: SparseRows
    gram: torch.Tensor | None  # B × P tf-idf inner products q·d (None when the model learns them)
    doc_rows: np.ndarray | None = None  # P: the pool's document rows (of the training corpus)
    triples: Triples | None = None  # the step's triples, set once negatives are drawn (before `update`)


@dataclass(frozen=True)
class Triples:
    """A step's (query, positive, negative) triples as block indices, for kinds with a loss of their own."""

    query: torch.Tensor  # T, index into the block's queries
    pos: torch.Tensor  # T, index into the pool
    neg: torch.Tensor  # T, index into the pool
    valid: torch.Tensor  # T bool: the triple found a valid negative
    margin: float
