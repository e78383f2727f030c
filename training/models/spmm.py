"""Sparse rows × a dense table on the CPU: the trainer's products X W and Xᵀ G, row-parallel in numba.

The block trainer's time is these products (a step embeds every document of the corpus). PyTorch's CPU
CSR × dense product ran at about half the speed of this plain row loop on the development machine
(Wikispeedia's 4,604 documents × V: 137 ms against 74 ms on 2 threads), so the host's rows
(training.models.block.SparseRows) use it; a GPU's rows keep PyTorch's cuSPARSE products.
Each output row is written by one thread, so the result does not depend on the thread count.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp
import torch


@numba.njit(parallel=True, fastmath=True)
def _rows_times(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:
    width = table.shape[1]
    for r in numba.prange(indptr.size - 1):
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
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))
    _rows_times(matrix.indptr, matrix.indices, matrix.data, dense, out)
    return torch.from_numpy(out)
