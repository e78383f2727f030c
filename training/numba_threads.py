"""How many threads numba's parallel loops use: the trainer's `--threads` (PyTorch's count), within numba's pool.

numba keeps its own thread count, apart from PyTorch's; every parallel loop of the trainer (the sparse products,
Adagrad, the loss's cells, the hash kernel, the topic models) sets it from here before it runs.
"""

from __future__ import annotations

import numba
import torch


def use_threads(threads: int) -> int:
    """Run numba's parallel loops on `threads` (at least 1, at most its pool, NUMBA_NUM_THREADS); the count set."""
    count = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(count)
    return count


def use_torch_threads() -> int:
    """Run numba's parallel loops on PyTorch's thread count (set by `--threads`); the count set."""
    return use_threads(torch.get_num_threads())
