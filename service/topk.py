"""The best rows of a score known for every row: f = s + l over arrays of all rows, in one pass.

Where a query's lexical part is summed into an array of every row (service.lexical's dense pass) and
the index is a flat scan, the semantic score of every row is one matrix product too, so f is known
everywhere and the exact top k needs no candidate pool: `best` finds the `want`-th best f among the live
rows (a heap of `want` values; nearly every row costs one comparison) and, in the same pass, the rows
within a rounding margin of it, which the caller rescores in float64 (service.rerank.every_row_top).
It releases the GIL, so a batch's other queries (the micro-batcher's other leader thread) run beside it.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=False)
def _best(
    semantic: np.ndarray, lexical: np.ndarray, live: np.ndarray, want: int, margin: float
) -> tuple[np.ndarray, np.ndarray, float]:
    heap = np.empty(want, dtype=np.float64)  # a min-heap of the best `want` f seen so far
    size = 0
    rows = np.empty(semantic.shape[0], dtype=np.int64)  # rows that were within the margin when seen
    values = np.empty(semantic.shape[0], dtype=np.float64)
    kept = 0
    bound = -np.inf
    for row in range(semantic.shape[0]):
        if not live[row]:
            continue
        f = np.float64(semantic[row]) + lexical[row]
        if f < bound:
            continue
        rows[kept] = row
        values[kept] = f
        kept += 1
        if size < want:
            at = size
            size += 1
            while at > 0:  # sift up
                parent = (at - 1) // 2
                if heap[parent] <= f:
                    break
                heap[at] = heap[parent]
                at = parent
            heap[at] = f
        elif f > heap[0]:
            at = 0
            while True:  # sift the new value down from the root
                child = 2 * at + 1
                if child >= want:
                    break
                if child + 1 < want and heap[child + 1] < heap[child]:
                    child += 1
                if heap[child] >= f:
                    break
                heap[at] = heap[child]
                at = child
            heap[at] = f
        if size == want:
            bound = heap[0] - margin * (1.0 + abs(heap[0]))
    cut = heap[0] if size == want else -np.inf
    return rows[:kept].copy(), values[:kept].copy(), cut


def best(
    semantic: np.ndarray, lexical: np.ndarray, live: np.ndarray, want: int, margin: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """(rows, their f, cut): `cut` is the `want`-th best f = s + l among the live rows (−inf when fewer are
    live), summed in float64 from float32 `semantic` and float64 `lexical`; `rows` (in row order) hold every
    live row with f ≥ cut − margin·(1 + |cut|), and some below it (those within the margin of the cut so far
    when they were seen), so the caller filters them by its own bound at or above that one."""
    return _best(semantic, lexical, live, max(1, want), margin)


def warm() -> None:
    """Compile the kernel for the arrays the service passes, before a request needs it."""
    best(np.zeros(2, dtype=np.float32), np.zeros(2, dtype=np.float64), np.ones(2, dtype=bool), 1, 1e-4)
