"""Rows of a tf-idf matrix kept on a GPU, and a step's rows gathered there without asking the host.

A step on the device (training.device_step) must not wait on the host, so nothing whose size depends on the
step's data may be built: a step's B rows are gathered into a CSR matrix of a fixed B × L entries, L the
longest row of the matrix, each row padded with copies of its last column at value 0 (they add nothing to a
product). The whole corpus, scored every step when it fits the pool, is kept once with its transpose.
`DeviceRows` offers the products of the host's `SparseRows` (training.models.block), so a model's code is
the same on both.

Memory: the matrix itself (12 bytes an entry) and, per step, B × L entries for the gathered rows; a corpus
must fit on the device (training.device_step says what it takes before it starts).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch


def _csr(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape: tuple[int, int], device: torch.device):
    return torch.sparse_csr_tensor(
        torch.from_numpy(indptr.astype(np.int64)).to(device),
        torch.from_numpy(indices.astype(np.int64)).to(device),
        torch.from_numpy(np.asarray(data, dtype=np.float32)).to(device),
        size=shape,
        check_invariants=False,
    )


@dataclass
class DeviceRows:
    """A block's rows on the device: X W, Xᵀ G and the words they reach (a bool per word)."""

    forward: torch.Tensor  # CSR, n_rows × n_words
    backward: torch.Tensor  # CSR (the whole matrix) or COO (gathered rows), n_words × n_rows
    touched: torch.Tensor  # n_words bool
    n_rows: int

    def times(self, table: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.forward, table)

    def t_times(self, grad: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.backward, grad)

    @property
    def update_rows(self) -> None:
        """None: the optimizer updates the whole table (rows without a gradient stay exactly as they are)."""
        return None

    def mark(self, reached: torch.Tensor) -> None:
        reached |= self.touched


class DeviceCSR:
    """A CSR matrix on the device, restricted to its first `n_words` columns, from which steps gather rows."""

    def __init__(self, matrix: sp.csr_matrix, n_words: int, device: torch.device) -> None:
        matrix = sp.csr_matrix(matrix[:, :n_words] if n_words < matrix.shape[1] else matrix, dtype=np.float32)
        matrix.sum_duplicates()  # sorted column indices: padding with the last one keeps each row sorted
        self.matrix = matrix
        self.device = device
        self.n_rows, self.n_words = matrix.shape
        lengths = np.diff(matrix.indptr)
        self.width = max(int(lengths.max(initial=0)), 1)  # L: the longest row
        self.start = torch.from_numpy(matrix.indptr[:-1].astype(np.int64)).to(device)
        self.length = torch.from_numpy(lengths.astype(np.int64)).to(device)
        # One padding entry at the end, so that an empty row's gather reads a column of value 0.
        self.indices = torch.from_numpy(np.append(matrix.indices, 0).astype(np.int64)).to(device)
        self.data = torch.from_numpy(np.append(matrix.data, 0.0).astype(np.float32)).to(device)
        self._whole: DeviceRows | None = None

    @property
    def bytes(self) -> int:
        return int(self.matrix.nnz) * 12 + self.n_rows * 16

    def whole(self) -> DeviceRows:
        """Every row, in order (built once: the pool when the whole corpus is scored every step)."""
        if self._whole is None:
            m = self.matrix
            t = m.T.tocsr()
            touched = torch.zeros(self.n_words, dtype=torch.bool, device=self.device)
            touched[torch.from_numpy(np.unique(m.indices).astype(np.int64)).to(self.device)] = True
            self._whole = DeviceRows(
                forward=_csr(m.indptr, m.indices, m.data, m.shape, self.device),
                backward=_csr(t.indptr, t.indices, t.data, t.shape, self.device),
                touched=touched,
                n_rows=self.n_rows,
            )
        return self._whole

    def _padded(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(columns, values), each B × L: row b's entries, then its last column again at value 0."""
        lane = torch.arange(self.width, device=self.device)
        length = self.length[rows]
        inside = lane[None, :] < length[:, None]
        last = (length - 1).clamp(min=0)
        at = self.start[rows][:, None] + torch.minimum(lane[None, :], last[:, None])
        at = torch.where(length[:, None] > 0, at, torch.full_like(at, self.indices.numel() - 1))
        return self.indices[at], self.data[at] * inside

    def rows(self, rows: torch.Tensor) -> DeviceRows:
        """The given rows (a device tensor of row numbers, repeats allowed) as a block."""
        cols, vals = self._padded(rows)
        n = rows.numel()
        crow = torch.arange(n + 1, device=self.device) * self.width
        forward = torch.sparse_csr_tensor(
            crow, cols.reshape(-1), vals.reshape(-1), size=(n, self.n_words), check_invariants=False
        )
        which = torch.arange(n, device=self.device).repeat_interleave(self.width)
        backward = torch.sparse_coo_tensor(
            torch.stack([cols.reshape(-1), which]), vals.reshape(-1), size=(self.n_words, n), check_invariants=False
        )
        touched = torch.zeros(self.n_words, dtype=torch.int32, device=self.device)
        touched.index_add_(0, cols.reshape(-1), (vals.reshape(-1) != 0).to(torch.int32))
        return DeviceRows(forward=forward, backward=backward, touched=touched > 0, n_rows=n)

    def dense(self, rows: torch.Tensor) -> torch.Tensor:
        """The given rows as a dense B × n_words matrix."""
        cols, vals = self._padded(rows)
        out = torch.zeros(rows.numel(), self.n_words, device=self.device)
        return out.scatter_add_(1, cols, vals)
