"""Products of queries with a block of int8 codes by onnxruntime's integer matrix product (MatMulInteger).

numba's int8 pass (service.quantized) sums each row's products in float32 lanes and then across them, and
converts each code to float for every four queries: ~0.6 ms a query over 100k rows of 100 on a 2-core AMD
EPYC, what a flat scan of a loaded worker mostly costs. onnxruntime's integer GEMM (MLAS) multiplies the
codes as integers, packed once for its kernels: 0.34–0.45 ms a query in batches of 8 there and 0.27 in 16,
one thread (`python -m benchmarks.scan_kinds`, docs/performance/search.md). So the rows a flat index starts
with (they never change) get one session a piece, and a batch of queries runs through them as 7-bit integers.

The query is quantized too, so a score's bound grows (`step_factor`): q = σ·c + δ with |δ_j| ≤ σ/2, and
|q·ẽ − σ·c·ẽ| ≤ σ/2 · ‖ẽ‖₁, where ẽ = scale · codes is the row the int8 pass already bounds. Products are
exact integers (|c·codes| ≤ dim · 63 · 127 < 2²⁴ for dim ≤ 2,000, so float32 holds them) and one rounding
to float32 at the end. 7 bits, not 8: on CPUs without VNNI, MLAS multiplies u8 × s8 pairs into saturating
int16 sums (255 · 127 · 2 > 32,767), and 127 · 127 · 2 does not saturate (the tests check every extreme).

The model is a single MatMulInteger node, written here as protobuf bytes (the service does not import the
`onnx` package, a training dependency), its B the piece's codes transposed, given as an external
initializer so that onnxruntime copies it and packs it. The packed copy is this process's own, about the
codes' size (~10 MB of PSS a worker at 100k rows of 100, `ssi bench`; 105 MB at 1 M, `benchmarks.scan_kinds
--rows 1000000`), where the codes themselves stay mapped and shared (docs/operate/workers.md).
SSI_INT8_GEMM=false leaves the scan to numba's pass and BLAS, as before.
"""

from __future__ import annotations

import threading

import numba
import numpy as np
import onnxruntime as ort

from ssi.jit_cache import CACHE

# A lone query takes numba's pass: both cost ~1.5 ms over 100k rows of 100 there, and numba's needs no query
# quantization (a tighter bound) nor a session call a piece; from two queries on the product wins (0.90 ms a
# query against 1.12 at two, 0.35 against 0.59 at eight).
FROM_QUERIES = 2
ZERO = 64  # the queries' zero point: a 7-bit code c in [-63, 63] travels as the byte c + 64
LEVELS = 63
SCRATCH_QUERIES = 32  # a thread keeps the products of at most this many queries (`PieceProducts.run`)
MAX_DIM = 2000  # beyond, an integer product may not be exact in float32 (see the module)
_UINT8, _INT8, _INT32 = 2, 3, 6  # onnx.TensorProto data types
_EXTERNAL = 1  # onnx.TensorProto.DataLocation.EXTERNAL
# The bound's rounding: the float64 product of three numbers, then one rounding to float32 of a value at
# most LEVELS · σ · ‖ẽ‖₁; 2⁻²³ of it covers both, with room.
_ROUNDING = LEVELS * 2.0**-23


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, payload: bytes | str | int) -> bytes:
    """One protobuf field: an int as a varint, bytes and strings (and nested messages) length-delimited."""
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _value_info(name: str, elem_type: int, dims: tuple[int | str, ...]) -> bytes:
    shape = b"".join(_field(1, _field(2, d) if isinstance(d, str) else _field(1, d)) for d in dims)
    tensor_type = _field(1, elem_type) + _field(2, shape)
    return _field(1, name) + _field(2, _field(1, tensor_type))


def model_bytes(dim: int, rows: int) -> bytes:
    """ONNX model Y[b, rows] = MatMulInteger(A[b, dim] (uint8, zero point ZERO), B[dim, rows] (int8, external))."""
    zero_point = _field(2, _UINT8) + _field(8, "zero") + _field(9, bytes([ZERO]))
    external = _field(1, "location") + _field(2, "codes")
    codes = _field(1, dim) + _field(1, rows) + _field(2, _INT8) + _field(8, "B") + _field(13, external)
    codes += _field(14, _EXTERNAL)
    node = _field(1, "A") + _field(1, "B") + _field(1, "zero") + _field(2, "Y") + _field(4, "MatMulInteger")
    graph = (
        _field(1, node)
        + _field(2, "int8_rows")
        + _field(5, zero_point)
        + _field(5, codes)
        + _field(11, _value_info("A", _UINT8, ("queries", dim)))
        + _field(12, _value_info("Y", _INT32, ("queries", rows)))
    )
    opset = _field(1, "") + _field(2, 13)
    return _field(1, 8) + _field(8, opset) + _field(7, graph)


class PieceProducts:
    """c · codesᵀ for one fixed block of int8 rows, by its own onnxruntime session (one thread, the caller's).
    `run` releases the GIL while the product runs."""

    def __init__(self, codes: np.ndarray) -> None:
        codes = np.asarray(codes)
        if codes.dtype != np.int8 or codes.ndim != 2:
            raise ValueError(f"int8 products take int8 rows [rows, dim], not {codes.dtype} {codes.shape}")
        self.rows, self.dim = codes.shape
        if not 0 < self.dim <= MAX_DIM:
            raise ValueError(f"int8 products take 1 to {MAX_DIM} dimensions, not {self.dim}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.enable_cpu_mem_arena = False  # outputs come and go with each batch; an arena would keep its peak
        options.enable_mem_pattern = False
        transposed = np.ascontiguousarray(codes.T)
        options.add_external_initializers(["B"], [ort.OrtValue.ortvalue_from_numpy(transposed)])
        self._session = ort.InferenceSession(
            model_bytes(self.dim, self.rows), options, providers=["CPUExecutionProvider"]
        )

    def run(self, queries: np.ndarray) -> np.ndarray:
        """int32 [queries, rows]: each 7-bit query code row (uint8 with ZERO added) times every row's codes.

        The answer lies in this thread's scratch array, valid until the thread's next `run`: onnxruntime's own
        output, allocated for every call, left a loaded worker ~30 MB larger (glibc keeps what a few MB blocks
        freed), where a thread's scratch array costs at most SCRATCH_QUERIES × rows × 4 bytes
        (1.6 MB for a scan piece), so even the busy board's helper threads (service.busy) keep little."""
        needed = queries.shape[0] * self.rows
        scratch: np.ndarray | None = getattr(_scratch, "array", None)
        if queries.shape[0] > SCRATCH_QUERIES:  # a large batch's (POST /search/batch) is not kept
            scratch = np.empty(needed, dtype=np.int32)
        elif scratch is None or scratch.shape[0] < needed:
            scratch = _scratch.array = np.empty(needed, dtype=np.int32)
        out = scratch[:needed].reshape(queries.shape[0], self.rows)
        binding = self._session.io_binding()
        binding.bind_cpu_input("A", np.ascontiguousarray(queries, dtype=np.uint8))
        binding.bind_output("Y", "cpu", 0, np.int32, list(out.shape), out.ctypes.data)
        self._session.run_with_iobinding(binding)
        return out


_scratch = threading.local()


def quantize_queries(queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes + ZERO as uint8 [queries, dim], each query's step σ (float64)): q ≈ σ · c, |q_j − σ c_j| ≤ σ/2.
    None of the queries may hold a value that is not finite (the caller scans those with numba's pass)."""
    values = np.asarray(queries, dtype=np.float64)
    step = np.abs(values).max(axis=1, initial=0.0) / LEVELS
    safe = np.where(step > 0, step, 1.0)
    codes = np.clip(np.rint(values / safe[:, None]), -LEVELS, LEVELS)
    return (codes + ZERO).astype(np.uint8), step


def step_factor(step: np.ndarray) -> np.ndarray:
    """What a query's quantization and the final rounding add to a row's bound, per unit of the row's ‖ẽ‖₁
    (service.rows keeps it, rounded up): σ/2 for the query's own rounding, plus the product's rounding."""
    return np.asarray(step, dtype=np.float64) * (0.5 + _ROUNDING) * (1.0 + 1e-12)


def scores(piece: PieceProducts, scales: np.ndarray, queries: np.ndarray, step: np.ndarray, out: np.ndarray) -> None:
    """out[q, i] = σ_q · scale_i · (c_q · codes_i), rounded once to float32, for the rows of `piece` (float32 `out`
    [queries, rows], a view is fine); `queries` and `step` from `quantize_queries`. Releases the GIL."""
    _scaled(piece.run(queries), scales, step, out)


@numba.njit(nogil=True, cache=CACHE)
def _scaled(products: np.ndarray, scales: np.ndarray, step: np.ndarray, out: np.ndarray) -> None:
    for q in range(products.shape[0]):
        sigma = step[q]
        for i in range(products.shape[1]):
            out[q, i] = np.float32(np.float64(products[q, i]) * np.float64(scales[i]) * sigma)


def warm() -> None:
    """Compile the scaling for the arrays the index passes (a mapped snapshot's scales are read-only)."""
    piece = PieceProducts(np.ones((2, 2), dtype=np.int8))
    queries, step = quantize_queries(np.ones((FROM_QUERIES, 2), dtype=np.float32))
    for writeable in (True, False):
        scales = np.ones(2, dtype=np.float32)
        scales.flags.writeable = writeable
        # A piece's slice of the index's output: the whole of it (one piece), or a strided view (several).
        for out in (
            np.empty((FROM_QUERIES, 2), dtype=np.float32),
            np.empty((FROM_QUERIES, 4), dtype=np.float32)[:, :2],
        ):
            scores(piece, scales, queries, step, out)
