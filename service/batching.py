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

Under a steady load of many clients, batches alone settled into alternating halves: with 16 clients
on one worker, one batch of ~4 while ~12 queries arrived, then those 12 while the first 4 came back,
so each flat scan (a matrix product that streams every vector once, whatever the batch) served 8
queries on average. So after batches of many (a running mean of at least GATHER_FROM), a leader that
finds fewer queries waiting than that mean waits up to `gather_s` (SSI_BATCH_GATHER_MS) for the rest,
whose senders were just answered and are about to ask again. A lone client never waits (its batches
hold one query), and after a burst the mean falls below GATHER_FROM within a few batches. Measured
with wrk on 100k passages, flat, 32 clients, 2 workers of 1 thread, interleaved twice: 1,140 / 1,111
q/s without it, 1,292 / 1,376 with 5 ms (server CPU a search 1.71–1.76 → 1.41–1.51 ms; p50 28 → 23 ms,
p99 unchanged at 33–38 ms); 2 ms did as well (1,400), 10 ms less (1,327). One process of 2 threads:
828 → 874 q/s, p99 69 → 44 ms.

Earlier each request ran in a worker thread of its own that slept on a shared condition; under 32
clients the wake-ups of those threads held the GIL for a quarter of the server's Python time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from service import busy

GATHER_FROM = 6  # batches of at least this many on average before a leader waits for more (see above)

# What queries must share to be run together: for /search (k, offset, ef_search, nprobe), for /match (k, filters).
BatchKey = Hashable
SearchFn = Callable[[Sequence[str], Any], Sequence[Any]]


@dataclass(eq=False, slots=True)
class _Waiting:
    query: str
    key: BatchKey
    future: Future[Any] = field(default_factory=Future)


class QueryBatcher:
    def __init__(self, search: SearchFn, leaders: int = 2, max_batch: int = 32, gather_s: float = 0.0) -> None:
        self._search = search
        self._leaders = max(1, leaders)
        self._max_batch = max(1, max_batch)
        self._gather_s = max(0.0, gather_s)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._mean = 0.0  # running mean of the queries per batch
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
            self._arrived.notify()
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
                self._gather()
                batch = self._take()
                if not batch:
                    self._running -= 1
                    return
                self._mean = 0.8 * self._mean + 0.2 * len(batch)
            self._run(batch)

    def _gather(self) -> None:
        """After batches of many, wait (at most `gather_s`, the lock released meanwhile) until as many queries
        wait as the recent batches held."""
        wanted = min(int(self._mean), self._max_batch)
        if self._gather_s <= 0 or wanted < GATHER_FROM or not self._pending:
            return
        deadline = time.monotonic() + self._gather_s
        while len(self._pending) < wanted:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._arrived.wait(left)

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
            with busy.board().searching():
                results = self._search([w.query for w in batch], batch[0].key)
        except BaseException as exc:  # every waiter gets the error its own search would have raised
            for w in batch:
                w.future.set_exception(exc)
            return
        for w, result in zip(batch, results, strict=True):
            w.future.set_result(result)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
