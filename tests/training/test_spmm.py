"""The CPU trainer's sparse products (training.models.spmm) against scipy's, whatever the rows' shapes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from training.models.spmm import rows_times


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(40, 30), (1, 5), (7, 1)])
def test_rows_times_equals_the_dense_product(shape: tuple[int, int], threads: int) -> None:
    rng = np.random.default_rng(0)
    matrix = sp.random(*shape, density=0.3, format="csr", dtype=np.float32, random_state=1)
    # Long rows first (a vocabulary sorted by frequency), then empty rows at the end: every row is written.
    matrix = sp.vstack([sp.csr_matrix(np.ones((2, shape[1]), dtype=np.float32)), matrix, sp.csr_matrix((3, shape[1]))])
    table = torch.from_numpy(rng.normal(size=(shape[1], 6)).astype(np.float32))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = rows_times(sp.csr_matrix(matrix, dtype=np.float32), table)
    finally:
        torch.set_num_threads(before)
    np.testing.assert_allclose(got.numpy(), matrix.toarray() @ table.numpy(), rtol=1e-5, atol=1e-5)
    assert not got[-3:].any()
