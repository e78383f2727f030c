"""Featurizing an index build's batches in worker processes, the rows coming back in input order.

Featurizing is most of a build and mostly holds the GIL (per-text normalisation, the slicing and
the calls between array operations), so threads would help little; forked workers do. The main
process keeps what must stay in it (reading the store through its one consistent view, embedding,
the FAISS add) and hands each batch's texts to a worker, with a few batches in flight so the
workers never wait on the store. Workers are forked from the calling process and only run
`BulkFeaturizer.featurize` (numpy, scipy, unicodedata): no logging, no FAISS or onnxruntime, so
locks other threads held at the fork are never touched. The rows are the ones the serial path
makes, in the same order (tests/service/test_index_build.py).

A small collection is featurized in this process: forking and the pipes cost more than they save
below POOL_MIN_DOCUMENTS documents.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.pool import AsyncResult
from typing import TypeVar

import scipy.sparse as sp

from service.bulk_featurize import BulkFeaturizer

T = TypeVar("T")

POOL_MIN_DOCUMENTS = 20_000  # about 0.15 s of featurizing in one process: below this, no pool
IN_FLIGHT_PER_WORKER = 2  # batches handed out per worker before the oldest result is awaited

_featurizer: BulkFeaturizer | None = None  # the worker's copy, set by _start_worker


def pool_workers(requested: int, documents: int) -> int:
    """How many worker processes a build of `documents` uses: none for a small one, or where fork is unsafe."""
    if requested <= 0 or documents < POOL_MIN_DOCUMENTS or not sys.platform.startswith("linux"):
        return 0
    if multiprocessing.current_process().daemon:  # a daemonic process may not start children
        return 0
    return requested


def featurized(
    featurizer: BulkFeaturizer, batches: Iterable[T], texts_of: Callable[[T], list[str]], workers: int
) -> Iterator[tuple[T, sp.csr_matrix]]:
    """Each batch with its tf-idf rows, in input order: featurized by `workers` forked processes (0: here).

    `batches` is iterated in this process only (a store view's connection stays in its thread).
    """
    if workers <= 0:
        for batch in batches:
            yield batch, featurizer.featurize(texts_of(batch))
        return
    context = multiprocessing.get_context("fork")
    with context.Pool(workers, initializer=_start_worker, initargs=(featurizer,)) as pool:
        pending: deque[tuple[T, AsyncResult[sp.csr_matrix]]] = deque()
        for batch in batches:
            pending.append((batch, pool.apply_async(_featurize, (texts_of(batch),))))
            if len(pending) > IN_FLIGHT_PER_WORKER * workers:
                done, result = pending.popleft()
                yield done, result.get()
        while pending:
            done, result = pending.popleft()
            yield done, result.get()


def _start_worker(featurizer: BulkFeaturizer) -> None:
    global _featurizer
    _featurizer = featurizer


def _featurize(texts: list[str]) -> sp.csr_matrix:
    assert _featurizer is not None, "a pool worker runs _start_worker first"
    return _featurizer.featurize(texts)
