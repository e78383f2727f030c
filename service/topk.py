"""The best rows of a score known for every row: f = s + l over arrays of all rows, in one pass.

Where a query's lexical part is summed into an array of every row (service.lexical's dense pass) and
the index is a flat scan, the semantic score of every row is one matrix product too, so f is known
everywhere and the exact top k needs no candidate pool: `best` finds the `want`-th best f among the live
rows (a heap of `want` values) and, in the same pass, the rows within a margin of it, which the caller
rescores in float64 (service.rerank.every_row_top): float32 rounding for BLAS's product, and each row's own
error bound for the int8 pass (service.quantized).

Rows go in blocks of BLOCK_ROWS: once the heap is full, a block is first only asked whether any of its rows
reaches the bound (a loop without branches, which the compiler vectorizes), and only the blocks that do go
row by row through the heap. On 100k passages the bench's queries' bound rises past all but a few hundred
rows, held by 52 of the 782 blocks at the median (72 at p90).
It releases the GIL, so a batch's other queries (the micro-batcher's other leader thread) run beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from ssi.jit_cache import CACHE


@dataclass(frozen=True, slots=True)
class EveryScore:
    """Every row's s for some queries (float32 [queries, rows]): `scores[q, i]` is within `factor[q] ×
    radius[i]` of q·e_i (service.quantized's int8 pass), plus `l1_factor[q] × l1[i]` where the queries were
    quantized too (service.int8_gemm), or, where `radius` is None, within float32 rounding."""

    scores: np.ndarray
    radius: np.ndarray | None
    factor: np.ndarray | None
    l1: np.ndarray | None = None
    l1_factor: np.ndarray | None = None


BLOCK_ROWS = 128
# 1.4–1.7× faster than row by row (one block of every row) on the bench's queries over 100k passages, the data
# in cache (a query's scores, just written): `python -m benchmarks.scan_kinds --bundle B --corpus C`. In a
# first comparison 64 was slower than 128, and 256 about the same.


@numba.njit(nogil=True, cache=CACHE, inline="always")
def _reaches(
    semantic: np.ndarray,
    lexical: np.ndarray,
    radius: np.ndarray,
    factor: float,
    l1: np.ndarray,
    l1_factor: float,
    above: float,
    bound: float,
    start: int,
    stop: int,
) -> bool:
    """Whether any row of start … stop − 1, live or not, may have its upper end f + r + above at or above
    `bound` (a NaN does): a count with no branch in the loop, which LLVM turns into vector instructions. One
    loop per kind of bound, written out: the bound taken from one helper with those branches inside the loop
    kept LLVM from vectorizing it (3.5× slower on the bench's queries in a scratch comparison, 2026-11-27)."""
    count = 0
    if radius.shape[0] > 0 and l1.shape[0] > 0:
        for row in range(start, stop):
            r = factor * np.float64(radius[row]) + l1_factor * np.float64(l1[row])
            count += not (np.float64(semantic[row]) + lexical[row] + r + above < bound)
    elif radius.shape[0] > 0:
        for row in range(start, stop):
            r = factor * np.float64(radius[row])
            count += not (np.float64(semantic[row]) + lexical[row] + r + above < bound)
    elif l1.shape[0] > 0:
        for row in range(start, stop):
            r = 0.0 + l1_factor * np.float64(l1[row])
            count += not (np.float64(semantic[row]) + lexical[row] + r + above < bound)
    else:
        for row in range(start, stop):
            count += not (np.float64(semantic[row]) + lexical[row] + above < bound)
    return count > 0


@numba.njit(nogil=True, cache=CACHE)
def _best(
    semantic: np.ndarray,
    lexical: np.ndarray,
    live: np.ndarray,
    want: int,
    margin: float,
    radius: np.ndarray,
    factor: float,
    l1: np.ndarray,
    l1_factor: float,
    below: float,
    above: float,
    block: int,
) -> tuple[np.ndarray, np.ndarray, float]:
    heap = np.empty(want, dtype=np.float64)  # a min-heap of the best `want` lower ends seen so far
    size = 0
    bounded = radius.shape[0] > 0
    quantized_queries = l1.shape[0] > 0
    rows = np.empty(semantic.shape[0], dtype=np.int64)  # rows whose upper end was within the margin when seen
    values = np.empty(semantic.shape[0], dtype=np.float64)
    kept = 0
    bound = -np.inf
    n = semantic.shape[0]
    for start in range(0, n, block):
        stop = min(start + block, n)
        # a little below the bound: the vector loop's sums are the same as the row loop's, but a skip must not
        # hang on that
        loose = bound - 1e-9 * (1.0 + abs(bound))
        if size == want and not _reaches(semantic, lexical, radius, factor, l1, l1_factor, above, loose, start, stop):
            continue
        for row in range(start, stop):
            if not live[row]:
                continue
            f = np.float64(semantic[row]) + lexical[row]
            r = factor * np.float64(radius[row]) if bounded else 0.0
            if quantized_queries:
                r += l1_factor * np.float64(l1[row])
            high = f + r + above
            if high < bound:
                continue
            rows[kept] = row
            values[kept] = high
            kept += 1
            low = f - r + below
            if size < want:
                at = size
                size += 1
                while at > 0:  # sift up
                    parent = (at - 1) // 2
                    if heap[parent] <= low:
                        break
                    heap[at] = heap[parent]
                    at = parent
                heap[at] = low
            elif low > heap[0]:
                at = 0
                while True:  # sift the new value down from the root
                    child = 2 * at + 1
                    if child >= want:
                        break
                    if child + 1 < want and heap[child + 1] < heap[child]:
                        child += 1
                    if heap[child] >= low:
                        break
                    heap[at] = heap[child]
                    at = child
                heap[at] = low
            if size == want:
                bound = heap[0] - margin * (1.0 + abs(heap[0]))
    cut = heap[0] if size == want else -np.inf
    return rows[:kept].copy(), values[:kept].copy(), cut


_UNBOUNDED = np.zeros(0, dtype=np.float32)


def best(
    semantic: np.ndarray,
    lexical: np.ndarray,
    live: np.ndarray,
    want: int,
    margin: float,
    radius: np.ndarray | None = None,
    factor: float = 0.0,
    below: float = 0.0,
    above: float = 0.0,
    l1: np.ndarray | None = None,
    l1_factor: float = 0.0,
    block: int = BLOCK_ROWS,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(rows, their upper ends, cut) of f = s + l over the live rows, summed in float64 from float32 `semantic`
    and float64 `lexical`, where row i's s may be off by `factor` × `radius[i]` (None: exact but for rounding)
    plus `l1_factor` × `l1[i]` (None: nothing more), and its l by `below` ≤ 0 down and `above` ≥ 0 up (words
    left out of `lexical`, service.lexical.RareSum).

    `cut` is the `want`-th best lower end f − r (−inf when fewer rows are live): `want` rows have f at least
    that, so a row whose upper end f + r is below it cannot be among the best. `rows` (in row order) hold
    every live row with f + r ≥ cut − margin·(1 + |cut|), and some below it (those within the margin of the
    cut so far when they were seen), so the caller filters them by its own bound at or above that one. The
    result does not depend on `block` (BLOCK_ROWS; as many as there are rows: row by row, the benchmark's
    baseline)."""
    radius = _UNBOUNDED if radius is None else radius
    l1 = _UNBOUNDED if l1 is None else l1
    want = max(1, want)
    below, above = float(below), float(above)
    block = max(1, int(block))
    factor, l1_factor = float(factor), float(l1_factor)
    return _best(semantic, lexical, live, want, margin, radius, factor, l1, l1_factor, below, above, block)


def warm() -> None:
    """Compile the kernel for the arrays the service passes, before a request needs it."""
    for radius in (None, np.ones(2, dtype=np.float32)):
        for l1 in (None, np.ones(2, dtype=np.float32)):
            semantic, lexical, live = np.zeros(2, dtype=np.float32), np.zeros(2, dtype=np.float64), np.ones(2, bool)
            best(semantic, lexical, live, 1, 1e-4, radius, 1.0, l1=l1, l1_factor=1.0)
