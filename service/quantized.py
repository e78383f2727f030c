"""An int8 copy of a flat index's rows, for a scan that reads a quarter of the bytes, and how far it can be off.

A flat scan of one query streams every float32 embedding once (100k rows of N = 100: 40 MB a query).
Each row here is also kept as int8 codes with a scale of its own (ẽ = scale · c, scale = max |e| / 127,
so nothing clips), 10 MB for those 100k rows; `scores` takes the queries' products with the codes in
compiled passes of up to four queries. BLAS's float32 product costs less per query the larger the batch,
the pass much less so, and the index takes the pass for chunks of at most `QUANTIZED_QUERIES`: 100k rows
of 100, one thread, ms a query, int8 against BLAS (`python -m benchmarks.scan_kinds`): one query 0.87–0.95 /
1.51, 8 queries 0.70 / 0.79, 16 queries 0.68 / 0.46 on a 16-core Xeon (AVX-512); on this 2-core AMD EPYC
1.58 / 4.69, 0.57 / 1.41 and 0.61 / 0.83, so at 16 the two machines disagree and 8 stays.

Exactness is kept by a bound, not hoped for: |q·e − q·ẽ| ≤ ‖q‖₁ · max_j |e_j − ẽ_j|, and the pass's
float32 sums (any order: it is compiled with fastmath) add at most (d + 1)·2⁻²⁴·127·scale·‖q‖₁ more, so
each row stores `radius` = its largest residual plus twice that rounding term, and a row's score is
within ‖q‖₁ · radius of its exact value. The top-k pass (service.topk) keeps every row whose upper end
can reach the k-th best lower end, and those rows are rescored exactly from the float32 embeddings
(service.rerank.every_row_top): on those passages and the bench's random-words queries, k = 10, 12 rows at
the median, 29 at the 99th percentile (the same command).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from ssi.jit_cache import CACHE

QUANTIZED_QUERIES = 8  # chunks of at most this many queries take the int8 pass; larger ones BLAS's product
_LEVELS = 127.0
_TINY = float(np.finfo(np.float32).tiny)


@dataclass(frozen=True)
class Codes:
    """Rows quantized: int8 codes [rows, dim], each row's scale and its error radius (float32 [rows])."""

    codes: np.ndarray
    scales: np.ndarray
    radius: np.ndarray


def quantize(vectors: np.ndarray) -> Codes:
    """Each row's int8 codes, scale (largest |value| / 127: no clipping) and error radius (see the module)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        raise ValueError(f"quantize takes rows of vectors (2 dimensions), not an array of shape {vectors.shape}")
    n, dim = vectors.shape
    out = Codes(np.empty((n, dim), dtype=np.int8), np.empty(n, dtype=np.float32), np.empty(n, dtype=np.float32))
    _quantize(vectors, out.codes, out.scales, out.radius)
    return out


@numba.njit(nogil=True, cache=CACHE)
def _quantize(vectors: np.ndarray, codes: np.ndarray, scales: np.ndarray, radius: np.ndarray) -> None:
    n, dim = vectors.shape
    rounding = 2.0 * (dim + 1) * _LEVELS * 2.0**-24  # the pass's float32 sums, per unit of scale (module doc)
    for i in range(n):
        largest = 0.0
        finite = True
        for j in range(dim):
            x = np.float64(vectors[i, j])
            if not np.isfinite(x):
                finite = False
            elif abs(x) > largest:
                largest = abs(x)
        if not finite:  # no bound holds: every pass keeps the row for the exact rescoring
            codes[i, :] = 0
            scales[i] = 0.0
            radius[i] = np.inf
            continue
        scale = np.float32(largest / _LEVELS)
        residual = 0.0
        for j in range(dim):
            c = 0.0 if scale == 0 else min(max(np.rint(vectors[i, j] / scale), -_LEVELS), _LEVELS)
            codes[i, j] = np.int8(c)
            # measured in float64 against the float32 scale the pass multiplies by
            residual = max(residual, abs(np.float64(vectors[i, j]) - c * np.float64(scale)))
        bound = residual + rounding * np.float64(scale)
        if scale < _TINY:  # subnormal: the pass may flush it to zero, so bound the whole value instead
            bound = max(bound, largest * (1.0 + rounding))
        r = np.float32(bound)
        if np.float64(r) < bound:  # stored rounded up, never below the float64 bound
            r = np.nextafter(r, np.float32(np.inf))
        scales[i] = scale
        radius[i] = r


@numba.njit(nogil=True, fastmath=True, cache=CACHE)
def _each(codes: np.ndarray, scales: np.ndarray, queries: np.ndarray, out: np.ndarray) -> None:
    """One query a pass."""
    n, dim = codes.shape
    for k in range(queries.shape[0]):
        query = queries[k]
        for i in range(n):
            acc = np.float32(0.0)
            for j in range(dim):
                acc += np.float32(codes[i, j]) * query[j]
            out[k, i] = acc * scales[i]


@numba.njit(nogil=True, fastmath=True, cache=CACHE)
def _fours(codes: np.ndarray, scales: np.ndarray, queries: np.ndarray, out: np.ndarray) -> None:
    """Four queries a pass: each code is converted to float once for the four. Three queries go as four (the
    last repeated); one or two more than a multiple of four are left to the caller (`_each`)."""
    n, dim = codes.shape
    last = queries.shape[0] - 1
    for k in range(0, queries.shape[0] - 2, 4):
        k1, k2, k3 = min(k + 1, last), min(k + 2, last), min(k + 3, last)
        q0, q1, q2, q3 = queries[k], queries[k1], queries[k2], queries[k3]
        for i in range(n):
            a0 = a1 = a2 = a3 = np.float32(0.0)
            for j in range(dim):
                c = np.float32(codes[i, j])
                a0 += c * q0[j]
                a1 += c * q1[j]
                a2 += c * q2[j]
                a3 += c * q3[j]
            s = scales[i]
            out[k, i] = a0 * s
            out[k1, i] = a1 * s
            out[k2, i] = a2 * s
            out[k3, i] = a3 * s


def scores(part: Codes, queries: np.ndarray, out: np.ndarray) -> None:
    """out[q, i] = queries[q] · ẽ_i for every row i of `part` (float32 `out` [queries, rows], a view is fine).
    Releases the GIL.

    A pass converts each int8 code to float once for up to four queries (`_fours`): on 100k rows of 100, ms a
    query, one pass a query against four (benchmarks.scan_kinds): this 2-core AMD EPYC 1.5 / 0.69 at 4 queries
    and 1.6 / 0.57 at 8; a 16-core Xeon with AVX-512 0.90 / 0.73 at 4 and 0.89 / 0.70 at 8 (14 processes at
    once, 8 queries: 1.0–1.7 / 0.66–1.0), while a four-pass of one query costs 2.9 ms there, against 0.87 alone:
    so a lone query, and one or two left over, take their own pass."""
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    b = queries.shape[0]
    grouped = b if b % 4 == 3 else b - b % 4
    if grouped:
        _fours(part.codes, part.scales, queries[:grouped], out[:grouped])
    if grouped < b:
        _each(part.codes, part.scales, queries[grouped:], out[grouped:])


def l1_norms(part: Codes) -> np.ndarray:
    """‖ẽ‖₁ = scale · Σ|codes| of each row, float32 rounded up: what a quantized query's bound is measured in
    (service.int8_gemm)."""
    out = np.empty(part.codes.shape[0], dtype=np.float32)
    _l1_norms(part.codes, part.scales, out)
    return out


@numba.njit(nogil=True, cache=CACHE)
def _l1_norms(codes: np.ndarray, scales: np.ndarray, out: np.ndarray) -> None:
    n, dim = codes.shape
    for i in range(n):
        total = 0
        for j in range(dim):
            total += abs(np.int64(codes[i, j]))
        norm = np.float64(total) * np.float64(scales[i])
        r = np.float32(norm)
        if np.float64(r) < norm:
            r = np.nextafter(r, np.float32(np.inf))
        out[i] = r


def query_factor(queries: np.ndarray) -> np.ndarray:
    """‖q‖₁ of each query (float64): a row's score from `scores` is within this × its `radius` of q·e."""
    return np.abs(np.asarray(queries, dtype=np.float64)).sum(axis=1)


def warm() -> None:
    """Compile the passes for every kind of array the index passes, before a request needs it: numba compiles
    one version per signature, and a snapshot's codes are read-only (mapped) where computed ones are not."""
    for writeable in (True, False):
        part = quantize(np.ones((2, 2), dtype=np.float32))
        for array in (part.codes, part.scales, part.radius):
            array.flags.writeable = writeable
        l1_norms(part)
        # One query's slice of the output is contiguous, a few queries' a strided view; 5 queries take both passes.
        for n in (1, 2, 5):
            scores(part, np.ones((n, 2), dtype=np.float32), np.empty((n, 2), dtype=np.float32))
            scores(part, np.ones((n, 2), dtype=np.float32), np.empty((n, 4), dtype=np.float32)[:, :2])
