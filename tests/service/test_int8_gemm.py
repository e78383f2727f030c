"""onnxruntime's integer product of a flat index's first rows (service.int8_gemm): exact integers at every
extreme a CPU's saturating kernels could break, quantized queries within their stated step, every score of
the index within its bound whatever the rows hold, and the setting that turns it off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from test_quantized import rows_of_every_kind

from service import int8_gemm, quantized, topk
from service.index import IndexConfig, VectorIndex
from service.settings import Settings
from service.state_builder import index_config


def exact(queries: np.ndarray, codes: np.ndarray) -> np.ndarray:
    return (queries.astype(np.int64) - int8_gemm.ZERO) @ codes.astype(np.int64).T


@pytest.mark.parametrize("dim", [1, 37, 100, int8_gemm.MAX_DIM])
def test_products_are_exact_integers_at_every_extreme(dim: int) -> None:
    """Without VNNI, MLAS sums u8 × s8 pairs into saturating int16: the largest codes of both signs against
    the largest query codes of both signs, alternating and not, must still multiply exactly."""
    rng = np.random.default_rng(dim)
    codes = np.stack(
        [
            np.full(dim, 127),
            np.full(dim, -127),
            np.where(np.arange(dim) % 2 == 0, 127, -127),
            np.zeros(dim),
            *rng.integers(-127, 128, (60, dim)),
        ]
    ).astype(np.int8)
    top, bottom = int8_gemm.ZERO + int8_gemm.LEVELS, int8_gemm.ZERO - int8_gemm.LEVELS
    queries = np.stack(
        [
            np.full(dim, top),
            np.full(dim, bottom),
            np.where(np.arange(dim) % 2 == 0, top, bottom),
            np.full(dim, int8_gemm.ZERO),
            *rng.integers(bottom, top + 1, (5, dim)),
        ]
    ).astype(np.uint8)
    piece = int8_gemm.PieceProducts(codes)
    for batch in (1, 2, 4, queries.shape[0]):
        got = piece.run(queries[:batch])
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, exact(queries[:batch], codes))
    assert abs(int(exact(queries[:1], codes[:1])[0, 0])) == dim * 127 * int8_gemm.LEVELS  # the extreme was hit
    many = np.repeat(queries, 5, axis=0)  # more than a thread's scratch array keeps: a temporary one
    assert many.shape[0] > int8_gemm.SCRATCH_QUERIES
    kept = int8_gemm._scratch.array  # this thread's, sized by the batches above (or by an earlier test's pieces)
    np.testing.assert_array_equal(piece.run(many), exact(many, codes))
    assert int8_gemm._scratch.array is kept  # the large batch's products went to a temporary array


def test_the_model_is_one_matmulinteger_onnx_reads() -> None:
    """The service writes the model's protobuf itself (it does not import onnx): onnx must read it back as
    the graph the module describes."""
    model = onnx.load_model_from_string(int8_gemm.model_bytes(100, 12_500))
    (node,) = model.graph.node
    assert node.op_type == "MatMulInteger" and list(node.input) == ["A", "B", "zero"] and list(node.output) == ["Y"]
    zero, codes = model.graph.initializer
    assert onnx.numpy_helper.to_array(zero) == int8_gemm.ZERO
    assert list(codes.dims) == [100, 12_500] and codes.data_type == onnx.TensorProto.INT8
    assert codes.data_location == onnx.TensorProto.EXTERNAL
    (a,) = model.graph.input
    (y,) = model.graph.output
    assert [d.dim_param or d.dim_value for d in a.type.tensor_type.shape.dim] == ["queries", 100]
    assert [d.dim_param or d.dim_value for d in y.type.tensor_type.shape.dim] == ["queries", 12_500]
    assert model.opset_import[0].version == 13


def test_quantized_queries_are_within_half_a_step() -> None:
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((6, 40)).astype(np.float32)
    queries[1] *= 1e-30
    queries[2] = 0.0  # no step: every code is the zero point
    queries[3, 7] = 1e6
    coded, step = int8_gemm.quantize_queries(queries)
    values = coded.astype(np.float64) - int8_gemm.ZERO
    assert np.abs(values).max() <= int8_gemm.LEVELS
    assert (np.abs(queries - step[:, None] * values) <= step[:, None] / 2 * (1 + 1e-9)).all()
    assert step[2] == 0 and (coded[2] == int8_gemm.ZERO).all()


@pytest.mark.parametrize("n_queries", [2, 4, 9])
def test_every_score_of_the_first_rows_is_within_its_bound(n_queries: int) -> None:
    """Rows of every kind (empty, subnormal, huge, one large value, not finite) through the index's pieces,
    with rows appended after them (numba's pass), against float64 products."""
    rng = np.random.default_rng(n_queries)
    vectors = rows_of_every_kind(rng)
    vectors[6, 3] = np.nan  # a row with no bound: always kept for the exact rescoring
    index = VectorIndex.build(IndexConfig("flat"), vectors.shape[1], vectors[:250])
    index.add(vectors[250:])
    queries = rng.standard_normal((n_queries, vectors.shape[1])).astype(np.float32)
    queries[0, :3] *= 1e4
    queries[1] = 0.0
    scanned = index.every_score(queries)
    assert scanned.l1 is not None and scanned.l1_factor is not None and scanned.radius is not None
    assert scanned.factor is not None
    truth = queries.astype(np.float64) @ vectors.astype(np.float64).T
    with np.errstate(invalid="ignore"):  # the zero query's factors times a radius that is infinite
        bound = scanned.factor[:, None] * scanned.radius[None, :] + scanned.l1_factor[:, None] * scanned.l1[None, :]
    finite = np.isfinite(vectors).all(axis=1)
    assert (np.abs(scanned.scores - truth)[:, finite] <= bound[:, finite]).all()
    assert not np.isfinite(bound[:, ~finite]).any()
    # The bound is not slack for its own sake: for ordinary queries (from the third on) and rows it is within
    # 10 × what the scores are off at worst.
    ordinary = slice(50, 250)
    off = np.abs(scanned.scores - truth)[2:, ordinary].max(axis=1)
    assert (bound[2:, ordinary].max(axis=1) < 10 * off).all()


def test_a_lone_query_or_one_not_finite_takes_numbas_pass() -> None:
    vectors = np.random.default_rng(1).standard_normal((40, 8)).astype(np.float32)
    index = VectorIndex.build(IndexConfig("flat"), 8, vectors)
    queries = np.ones((2, 8), dtype=np.float32)
    queries[1, 2] = np.inf
    for scanned in (index.every_score(queries), index.every_score(queries[:1])):
        assert scanned.l1 is None and scanned.radius is not None and scanned.factor is not None
        assert (np.abs(scanned.scores[0] - vectors.sum(axis=1)) <= scanned.factor[0] * scanned.radius).all()
    assert index.every_score(np.ones((2, 8), dtype=np.float32)).l1 is not None


def test_the_setting_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert index_config(Settings(bundle=Path("b"))).int8_gemm
    monkeypatch.setenv("SSI_INT8_GEMM", "false")
    config = index_config(Settings(bundle=Path("b")))
    assert not config.int8_gemm
    vectors = np.random.default_rng(2).standard_normal((40, 8)).astype(np.float32)
    scanned = VectorIndex.build(config, 8, vectors).every_score(np.ones((2, 8), dtype=np.float32))
    assert scanned.l1 is None and scanned.radius is not None


def test_warming_compiles_what_a_served_scan_runs(tmp_path: Path) -> None:
    """numba compiles a kernel once per kind of array: one the service's warm-up missed compiled on a request
    (a batch of two queries once paused its worker for 180 ms, a p99 of 230 ms at 32 clients)."""
    int8_gemm.warm()
    topk.warm()
    kernels = (int8_gemm._scaled, topk._best)
    compiled = [len(kernel.signatures) for kernel in kernels]
    vectors = np.random.default_rng(4).standard_normal((300, 8)).astype(np.float32)
    part = quantized.quantize(vectors)
    for name, array in (("codes", part.codes), ("scales", part.scales), ("radius", part.radius)):
        np.save(tmp_path / f"{name}.npy", array)
    mapped = quantized.Codes(
        *(np.load(tmp_path / f"{name}.npy", mmap_mode="r") for name in ("codes", "scales", "radius"))
    )
    index = VectorIndex.build(IndexConfig("flat"), 8, np.load(tmp_path / "codes.npy").astype(np.float32), mapped)
    index.add(vectors[:5])
    live = np.ones(index.ntotal, dtype=bool)
    for n in (2, 9):
        scanned = index.every_score(np.ones((n, 8), dtype=np.float32))
        assert scanned.l1 is not None and scanned.l1_factor is not None and scanned.factor is not None
        for q in range(n):
            lexical = np.zeros(index.ntotal, dtype=np.float64)
            factor, l1_factor = float(scanned.factor[q]), float(scanned.l1_factor[q])
            topk.best(
                scanned.scores[q], lexical, live, 3, 1e-4, scanned.radius, factor, 0.0, 0.0, scanned.l1, l1_factor
            )
    assert [len(kernel.signatures) for kernel in kernels] == compiled
