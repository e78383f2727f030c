"""Sparse rows × a dense table on the CPU: the trainer's products X W and Xᵀ G, row-parallel in numba.

The block trainer's time is these products (a step embeds every document of the corpus). PyTorch's CPU
CSR × dense product ran at about half the speed of this plain row loop on the development machine
(Wikispeedia's 4,604 documents × V: 137 ms against 74 ms on 2 threads), so the host's rows
(training.models.block.SparseRows) use it; a GPU's rows keep PyTorch's cuSPARSE products.
Each output row is written by one thread, so the result does not depend on the thread count. Threads take
chunks of equal non-zeros, not of equal rows: a vocabulary sorted by frequency puts the long rows of Xᵀ
first, and equal row counts left one thread most of the work (Xᵀ G took 73 ms against PyTorch's 61).
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
import torch

CHUNKS_PER_THREAD = 8


@numba.njit(parallel=True, fastmath=True)
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


def rows_times(matrix: sp.csr_matrix, table: torch.Tensor) -> torch.Tensor:
    """matrix (n × m, CSR float32) @ table (m × k): a new n × k float32 tensor."""
    dense = np.ascontiguousarray(table.detach().numpy(), dtype=np.float32)
    out = np.empty((matrix.shape[0], dense.shape[1]), dtype=np.float32)
    threads = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(threads)
    _rows_times(matrix.indptr, matrix.indices, matrix.data, dense, out, _chunks(matrix.indptr, threads))
    return torch.from_numpy(out)


def _chunks(indptr: np.ndarray, threads: int) -> np.ndarray:
    """Row bounds of chunks holding about equal numbers of non-zeros."""
    n_rows = indptr.size - 1
    targets = np.linspace(0, indptr[-1], threads * CHUNKS_PER_THREAD + 1)[1:-1]
    inner = np.searchsorted(indptr, targets, side="left").clip(0, n_rows)
    return np.unique(np.concatenate([[0], inner, [n_rows]])).astype(np.int64)
