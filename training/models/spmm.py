"""Sparse rows × a dense table on the CPU: the trainer's products X W and Xᵀ G, row-parallel in numba.

The block trainer's time is these products (a step embeds every document of the corpus). PyTorch's CPU
CSR × dense product ran at about half the speed of this plain row loop on the development machine
(Wikispeedia's 4,604 documents × V: 137 ms against 74 ms on 2 threads), so the host's rows
(training.models.block.SparseRows) use it; a GPU's rows keep PyTorch's cuSPARSE products.
Each output row is written by one thread, so the result does not depend on the thread count. Threads take
chunks of equal non-zeros, not of equal rows: a vocabulary sorted by frequency puts the long rows of Xᵀ
first, and equal row counts left one thread most of the work (Xᵀ G took 73 ms against PyTorch's 61).

Where the table is large and each of its rows is read many times (X V over a whole corpus: 4.1 M non-zeros
reading a 12 MB V, 30,000 × 100 floats), the row loop waits on memory: every non-zero fetches its table row
from beyond the core's cache. The blocked loop takes the table a block of rows at a time, small enough to stay
in a core's L2, and adds each output row's non-zeros of that block before the next (the row's cursor moves on):
Wikispeedia's X V on one thread 152–162 ms → 89 ms. Each output element still sums its terms in the row's
column order, so both loops give the same bits; the blocked one needs each row's columns sorted.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
import torch

from ssi.jit_cache import CACHE
from training.numba_threads import use_torch_threads

CHUNKS_PER_THREAD = 8
BLOCK_BYTES = 256 * 1024  # a block of table rows: half the L2 of a core of the development machine
BLOCKED_TABLE_BYTES = 4 * 1024 * 1024  # a smaller table stays in the cache anyway (Xᵀ G's 1.8 MB gained nothing)
SPARSE_COEFF_SHARE = 0.05  # ∂loss/∂S with fewer non-zeros than this share: sparse products
BLOCKED_MIN_READS = 32  # mean reads of a table row per product before blocking pays (512 queries × U: 16, no gain)


@numba.njit(parallel=True, fastmath=True, cache=CACHE)
def _rows_times(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, table: np.ndarray, out: np.ndarray, bounds: np.ndarray
) -> None:
    width = table.shape[1]
    for chunk in numba.prange(bounds.size - 1):
        for r in range(bounds[chunk], bounds[chunk + 1]):
            row = out[r]
            for t in range(width):
                row[t] = 0.0
            for j in range(indptr[r], indptr[r + 1]):
                value = data[j]
                weights = table[indices[j]]
                for t in range(width):
                    row[t] += value * weights[t]


@numba.njit(parallel=True, fastmath=True, cache=CACHE)
def _rows_times_blocked(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    table: np.ndarray,
    out: np.ndarray,
    bounds: np.ndarray,
    block_rows: int,
) -> None:
    width = table.shape[1]
    for chunk in numba.prange(bounds.size - 1):
        lo, hi = bounds[chunk], bounds[chunk + 1]
        cursor = indptr[lo:hi].copy()  # each row's first non-zero not added yet
        for r in range(lo, hi):
            row = out[r]
            for t in range(width):
                row[t] = 0.0
        for start in range(0, table.shape[0], block_rows):
            end = start + block_rows
            for r in range(lo, hi):
                j, stop = cursor[r - lo], indptr[r + 1]
                if j == stop or indices[j] >= end:
                    continue
                row = out[r]
                while j < stop and indices[j] < end:
                    value = data[j]
                    weights = table[indices[j]]
                    for t in range(width):
                        row[t] += value * weights[t]
                    j += 1
                cursor[r - lo] = j


def rows_times(matrix: sp.csr_matrix, table: torch.Tensor, block_rows: int | None = None) -> torch.Tensor:
    """matrix (n × m, CSR float32) @ table (m × k): a new n × k float32 tensor. `block_rows`: the table rows of a
    block of the blocked loop (0: the row loop; None: chosen by `blocking`)."""
    dense = np.ascontiguousarray(table.detach().numpy(), dtype=np.float32)
    out = np.empty((matrix.shape[0], dense.shape[1]), dtype=np.float32)
    threads = use_torch_threads()
    bounds = _chunks(matrix.indptr, threads)
    block = blocking(matrix, dense) if block_rows is None else block_rows
    if 0 < block < dense.shape[0] and matrix.has_sorted_indices:
        _rows_times_blocked(matrix.indptr, matrix.indices, matrix.data, dense, out, bounds, block)
    else:
        _rows_times(matrix.indptr, matrix.indices, matrix.data, dense, out, bounds)
    return torch.from_numpy(out)


def coefficient_products(
    coeff: torch.Tensor, doc_rows: torch.Tensor, query_rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """C E_D and Cᵀ E_Q: the gradients of a step's query and document embeddings from C = ∂loss/∂S (B × P).

    C has a cell per triple at most (Wikispeedia: about 13,800 of 512 × 4,604), so on the CPU its non-zeros go
    through the row loop rather than two dense products over every cell; a C denser than SPARSE_COEFF_SHARE (a
    small pool) keeps the dense ones, and so does a GPU."""
    if coeff.device.type != "cpu":
        return coeff @ doc_rows, coeff.T @ query_rows
    dense = coeff.numpy()
    counts = np.empty(dense.shape[0] + 1, dtype=np.int64)
    counts[0] = 0
    use_torch_threads()
    _count_nonzero(dense, counts[1:])
    indptr = np.cumsum(counts)
    if indptr[-1] > SPARSE_COEFF_SHARE * max(1, coeff.numel()):
        return coeff @ doc_rows, coeff.T @ query_rows
    indices = np.empty(indptr[-1], dtype=np.int32)
    data = np.empty(indptr[-1], dtype=np.float32)
    _fill_nonzero(dense, indptr, indices, data)
    rows = sp.csr_matrix((data, indices, indptr), shape=dense.shape)
    return rows_times(rows, doc_rows), rows_times(rows.T.tocsr(), query_rows)


@numba.njit(parallel=True, cache=CACHE)
def _count_nonzero(dense: np.ndarray, out: np.ndarray) -> None:
    """Non-zeros of each row of `dense` (scipy's conversion of a dense C took 20 ms, as long as the products)."""
    for r in numba.prange(dense.shape[0]):
        n = 0
        for c in range(dense.shape[1]):
            if dense[r, c] != 0.0:
                n += 1
        out[r] = n


@numba.njit(parallel=True, cache=CACHE)
def _fill_nonzero(dense: np.ndarray, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> None:
    """The CSR columns and values of `dense`'s non-zeros, row by row at `indptr`."""
    for r in numba.prange(dense.shape[0]):
        k = indptr[r]
        for c in range(dense.shape[1]):
            value = dense[r, c]
            if value != 0.0:
                indices[k] = c
                data[k] = value
                k += 1


def blocking(matrix: sp.csr_matrix, table: np.ndarray) -> int:
    """Table rows per block for `matrix` @ `table`, or 0 where the plain row loop is as fast (module docstring)."""
    if table.nbytes < BLOCKED_TABLE_BYTES or matrix.nnz < BLOCKED_MIN_READS * table.shape[0]:
        return 0
    return max(1, BLOCK_BYTES // max(1, table.shape[1] * table.itemsize))


def _chunks(indptr: np.ndarray, threads: int) -> np.ndarray:
    """Row bounds of chunks holding about equal numbers of non-zeros."""
    n_rows = indptr.size - 1
    targets = np.linspace(0, indptr[-1], threads * CHUNKS_PER_THREAD + 1)[1:-1]
    inner = np.searchsorted(indptr, targets, side="left").clip(0, n_rows)
    return np.unique(np.concatenate([[0], inner, [n_rows]])).astype(np.int64)
