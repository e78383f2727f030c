"""The CPU trainer's sparse products (training.models.spmm) against scipy's, whatever the rows' shapes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from training.models.optim import EPS, RowAdagrad
from training.models.spmm import blocking, coefficient_products, rows_times


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


def _sorted_rows(n_rows: int, n_cols: int, density: float, seed: int) -> sp.csr_matrix:
    matrix = sp.random(n_rows, n_cols, density=density, format="csr", dtype=np.float32, random_state=seed)
    matrix.sort_indices()
    return matrix


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("block_rows", [1, 7, 64])
def test_the_blocked_loop_gives_the_row_loops_bits(block_rows: int, threads: int) -> None:
    """X V over a whole corpus takes the table a block of rows at a time: the same sums in the same order."""
    matrix = _sorted_rows(50, 200, 0.2, seed=2)
    table = torch.from_numpy(np.random.default_rng(3).normal(size=(200, 9)).astype(np.float32))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        plain = rows_times(matrix, table, block_rows=0)
        blocked = rows_times(matrix, table, block_rows=block_rows)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(plain, blocked)
    np.testing.assert_allclose(blocked.numpy(), matrix.toarray() @ table.numpy(), rtol=1e-5, atol=1e-5)


def test_rows_whose_columns_are_unsorted_take_the_row_loop() -> None:
    """The blocked loop reads each row's columns in order; a row out of order would lose terms there."""
    matrix = _sorted_rows(20, 60, 0.3, seed=4)
    shuffled = sp.csr_matrix(
        (
            np.concatenate(
                [matrix.data[a:b][::-1] for a, b in zip(matrix.indptr[:-1], matrix.indptr[1:], strict=True)]
            ),
            np.concatenate(
                [matrix.indices[a:b][::-1] for a, b in zip(matrix.indptr[:-1], matrix.indptr[1:], strict=True)]
            ),
            matrix.indptr,
        ),
        shape=matrix.shape,
    )
    assert not shuffled.has_sorted_indices
    table = torch.from_numpy(np.random.default_rng(5).normal(size=(60, 4)).astype(np.float32))
    got = rows_times(shuffled, table, block_rows=3)
    np.testing.assert_allclose(got.numpy(), matrix.toarray() @ table.numpy(), rtol=1e-5, atol=1e-5)


def test_a_whole_corpus_times_a_large_table_is_blocked_and_a_small_table_is_not() -> None:
    table = np.zeros((30_000, 100), dtype=np.float32)  # 12 MB: Wikispeedia's V
    corpus = sp.csr_matrix(
        (
            np.ones(40 * 30_000, dtype=np.float32),
            np.zeros(40 * 30_000, dtype=np.int32),
            np.arange(0, 40 * 30_000 + 1, 40),
        ),
        shape=(30_000, 30_000),
    )
    assert blocking(corpus, table) > 0
    assert blocking(corpus[:100], table) == 0  # few reads of each table row: the row loop
    assert blocking(corpus, table[:1000]) == 0  # a table that stays in the cache


@pytest.mark.parametrize("density", [0.01, 0.5])
def test_coefficient_products_equal_the_dense_products(density: float) -> None:
    """C E_D and Cᵀ E_Q from a mostly-zero C through its non-zeros (or densely past SPARSE_COEFF_SHARE)."""
    rng = np.random.default_rng(6)
    coeff = torch.from_numpy(sp.random(30, 80, density=density, dtype=np.float32, random_state=7).toarray())
    docs, queries = (torch.from_numpy(rng.normal(size=(n, 5)).astype(np.float32)) for n in (80, 30))
    of_queries, of_docs = coefficient_products(coeff, docs, queries)
    np.testing.assert_allclose(of_queries.numpy(), (coeff @ docs).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(of_docs.numpy(), (coeff.T @ queries).numpy(), rtol=1e-5, atol=1e-5)
    empty = torch.zeros_like(coeff)
    assert not any(part.any() for part in coefficient_products(empty, docs, queries))


def test_adagrads_dense_update_is_pytorchs_within_a_unit_in_the_last_place() -> None:
    """One pass of numba on the CPU: the accumulators bit for bit, the weights within PyTorch's own sqrt error."""
    rng = np.random.default_rng(8)
    start = torch.from_numpy(rng.normal(size=(300, 7)).astype(np.float32))
    grads = [torch.from_numpy(rng.normal(size=(300, 7)).astype(np.float32)) for _ in range(3)]
    ours = RowAdagrad(start.clone(), lr=0.05)
    torchs = RowAdagrad(start.clone(), lr=0.05)
    for grad in grads:
        ours.dense_step(grad.clone())
        torchs.accumulator.addcmul_(grad, grad)
        torchs.weight.addcdiv_(grad, torchs.accumulator.sqrt().add_(EPS), value=-torchs.lr)
    assert torch.equal(ours.accumulator, torchs.accumulator)
    np.testing.assert_allclose(ours.weight.numpy(), torchs.weight.numpy(), rtol=2e-6, atol=1e-7)
    assert not torch.equal(ours.weight, start)
    before = ours.weight.clone()
    one_row = torch.zeros_like(start)
    one_row[0] = 1.0
    ours.dense_step(one_row)
    assert torch.equal(ours.weight[1:], before[1:]) and not torch.equal(ours.weight[0], before[0])
