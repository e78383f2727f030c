"""The int8 scan (service.quantized): each score within its stated bound of the exact product, whatever the
rows hold, and the codes of appended rows kept in step with the float32 rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service import quantized
from service.rows import EmbeddingRows


def rows_of_every_kind(rng: np.random.Generator) -> np.ndarray:
    vectors = rng.standard_normal((300, 37)).astype(np.float32)
    vectors[0] = 0.0  # an empty document
    vectors[1] *= 1e-39  # subnormal values
    vectors[2] *= 1e30
    vectors[3, :] = 0.0
    vectors[3, 5] = -2.5  # one large value: everything else rounds to 0
    vectors[4] = np.float32(0.1)  # every value equal
    vectors[5:50] *= rng.uniform(1e-3, 1e3, (45, 1)).astype(np.float32)
    return vectors


@pytest.mark.parametrize("n_queries", [1, 2, 3, 5, 6, 8])  # fours, a last lone one, two or three left
def test_every_int8_score_is_within_its_bound(n_queries: int) -> None:
    rng = np.random.default_rng(n_queries)
    vectors = rows_of_every_kind(rng)
    part = quantized.quantize(vectors)
    queries = rng.standard_normal((n_queries, vectors.shape[1])).astype(np.float32)
    queries[0, :3] *= 1e4
    out = np.empty((n_queries, vectors.shape[0] + 5), dtype=np.float32)[:, 2:-3]  # a strided view, as the index
    quantized.scores(part, queries, out)
    exact = queries.astype(np.float64) @ vectors.astype(np.float64).T
    bound = quantized.query_factor(queries)[:, None] * part.radius[None, :].astype(np.float64)
    assert (np.abs(out - exact) <= bound).all()
    assert np.isfinite(bound).all()
    # The bound is a bound, not slack for its own sake: it is within 1 % of the scale's half step, plus rounding.
    half_step = np.abs(vectors).max(axis=1) / 127 / 2
    assert (part.radius[5:] <= half_step[5:] * 1.01 + 1e-3 * half_step[5:]).all()
    assert part.radius[0] == 0.0 and part.scales[0] == 0.0


def test_a_row_that_is_not_finite_has_no_bound() -> None:
    vectors = np.ones((3, 4), dtype=np.float32)
    vectors[1, 2] = np.nan
    vectors[2, 0] = np.inf
    part = quantized.quantize(vectors)
    assert part.radius[0] < 0.01
    assert np.isinf(part.radius[1:]).all()  # kept for the exact rescoring by every top-k pass


def test_appended_rows_are_coded_in_step_with_the_rows() -> None:
    rng = np.random.default_rng(0)
    first = rng.standard_normal((50, 6)).astype(np.float32)
    rows = EmbeddingRows(first, 6)
    for size in (3, 1500, 700):  # the tail grows twice
        rows.append(rng.standard_normal((size, 6)).astype(np.float32))
    coded = rows.coded_parts()
    plain = rows.parts()
    assert [first_row for _, first_row in coded] == [first_row for _, first_row in plain]
    for (codes, _), (part, _) in zip(coded, plain, strict=True):
        expected = quantized.quantize(part)
        np.testing.assert_array_equal(codes.codes, expected.codes)
        np.testing.assert_array_equal(codes.scales, expected.scales)
    assert rows.radius().shape == (rows.rows,)
    np.testing.assert_array_equal(rows.radius(), quantized.quantize(rows.whole()).radius)


def test_warming_compiles_the_pass_for_a_snapshots_mapped_codes(tmp_path: Path) -> None:
    """A snapshot's codes are read-only (mapped): a signature numba would otherwise compile on the first
    request after a restart (a pause of a second on the request path)."""
    quantized.warm()
    passes = (quantized._each, quantized._fours)
    compiled = [len(kernel.signatures) for kernel in passes]
    vectors = np.random.default_rng(3).standard_normal((50, 8)).astype(np.float32)
    part = quantized.quantize(vectors)
    np.save(tmp_path / "codes.npy", part.codes)
    np.save(tmp_path / "scales.npy", part.scales)
    mapped = quantized.Codes(
        np.load(tmp_path / "codes.npy", mmap_mode="r"), np.load(tmp_path / "scales.npy", mmap_mode="r"), part.radius
    )
    for queries in (1, 3, 6, 8):  # one pass a query, four, both
        for out in (np.empty((queries, 60), dtype=np.float32)[:, 5:55], np.empty((queries, 50), dtype=np.float32)):
            quantized.scores(mapped, np.ones((queries, 8), dtype=np.float32), out)
            quantized.scores(part, np.ones((queries, 8), dtype=np.float32), out)
    assert [len(kernel.signatures) for kernel in passes] == compiled
