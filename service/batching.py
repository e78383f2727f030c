"""Micro-batching of concurrent single searches: queries that wait at the same moment share one search call.

A `POST /search` hands its query to the collection's `QueryBatcher` and awaits a future; it takes
no worker thread of its own. At most `leaders` threads (one per core: FAISS and onnxruntime release
the GIL, so two batches overlap where the numpy parts of one do not) take every query waiting at
that moment with the oldest one's key and run them as one search call: one FAISS call for the chunk
and the whole answer, store read and snippets included (the same path as `POST /search/batch`, so
each query's ranking is exactly the one it would get alone). Nothing waits on a timer: a lone query
starts a leader at once, and queries that arrive while a batch runs form the next one, so batches
grow only when the machine is busy (the "opportunistic" batching of inference servers). A batch
holds at most `max_batch` queries, so no query waits behind an unbounded one.

Earlier each request ran in a worker thread of its own that slept on a shared condition; under 32
clients the wake-ups of those threads held the GIL for a quarter of the server's Python time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

BatchKey = tuple[int, int, int | None, int | None]  # k, offset, ef_search, nprobe
SearchFn = Callable[[Sequence[str], BatchKey], Sequence[Any]]


@dataclass(eq=False, slots=True)
class _Waiting:
    query: str
    key: BatchKey
    future: Future[Any] = field(default_factory=Future)


class QueryBatcher:
    def __init__(self, search: SearchFn, leaders: int = 2, max_batch: int = 32) -> None:
        self._search = search
        self._leaders = max(1, leaders)
        self._max_batch = max(1, max_batch)
        self._lock = threading.Lock()
        self._pending: list[_Waiting] = []
        self._running = 0
        self._pool = ThreadPoolExecutor(max_workers=self._leaders, thread_name_prefix="ssi-search")
        self.batches = 0  # batches run (for tests and metrics)
        self.largest = 0  # most queries in one batch so far

    def submit(self, query: str, key: BatchKey) -> Future[Any]:
        """A future of `query`'s result under `key`, searched together with whatever else is waiting."""
        mine = _Waiting(query, key)
        with self._lock:
            self._pending.append(mine)
            start = self._running < self._leaders
            if start:
                self._running += 1
        if start:
            self._pool.submit(self._lead)
        return mine.future

    def search(self, query: str, key: BatchKey) -> Any:
        """`submit`, waiting for the result in this thread."""
        return self.submit(query, key).result()

    def _lead(self) -> None:
        """Run batches while queries wait; a leader with nothing left to take stops."""
        while True:
            with self._lock:
                batch = self._take()
                if not batch:
                    self._running -= 1
                    return
            self._run(batch)

    def _take(self) -> list[_Waiting]:
        """The oldest waiting queries with the first one's key (at most max_batch), removed from the queue;
        a query whose caller gave up (its future cancelled) is dropped."""
        self._pending = [w for w in self._pending if not w.future.cancelled()]
        if not self._pending:
            return []
        key = self._pending[0].key
        batch = [w for w in self._pending if w.key == key][: self._max_batch]
        chosen = set(map(id, batch))
        self._pending = [w for w in self._pending if id(w) not in chosen]
        return [w for w in batch if w.future.set_running_or_notify_cancel()]

    def _run(self, batch: list[_Waiting]) -> None:
        if not batch:
            return
        self.batches += 1
        self.largest = max(self.largest, len(batch))
        try:
            results = self._search([w.query for w in batch], batch[0].key)
        except BaseException as exc:  # every waiter gets the error its own search would have raised
            for w in batch:
                w.future.set_exception(exc)
            return
        for w, result in zip(batch, results, strict=True):
            w.future.set_result(result)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
