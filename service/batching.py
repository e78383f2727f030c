"""Micro-batching of concurrent single searches: queries that wait at the same moment share one search call.

Each `POST /search` runs in its own worker thread (service.admission). Instead of each thread
featurizing, encoding and scanning alone, a thread hands its query to the collection's
`QueryBatcher` and one of the waiting threads — the leader — runs every query waiting at that
moment as one `Collection.search` call: one ONNX call and one FAISS search for the chunk (the same
path as `POST /search/batch`, so each query's ranking is exactly the one it would get alone).
Nothing waits on a timer: a lone query is led at once by its own thread, and queries that arrive
while a batch runs form the next one, so batches grow only when the machine is busy (the
"opportunistic" batching of inference servers).

At most `leaders` batches run at once (one per core: FAISS and onnxruntime release the GIL, so
two batches overlap where the numpy parts of one do not), and a batch holds at most `max_batch`
queries, so no query waits behind an unbounded one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.model_state import QueryResult

BatchKey = tuple[int, int, int | None, int | None]  # k, offset, ef_search, nprobe
SearchFn = Callable[[Sequence[str], BatchKey], list[QueryResult]]


@dataclass(eq=False, slots=True)
class _Waiting:
    query: str
    key: BatchKey
    result: QueryResult | None = None
    error: BaseException | None = None
    done: bool = False
    lead: bool = False  # this waiter's thread is to lead the next batch
    wake: threading.Event = field(default_factory=threading.Event)
    extra: dict[str, Any] = field(default_factory=dict)


class QueryBatcher:
    """Each waiting thread sleeps on its own event, woken once when its result is in and once if it is
    to lead: a shared condition woke every waiter after every batch, and under 32 clients those wake-ups
    held the GIL for a quarter of the server's Python time (py-spy --gil)."""

    def __init__(self, search: SearchFn, leaders: int = 2, max_batch: int = 32) -> None:
        self._search = search
        self._leaders = max(1, leaders)
        self._max_batch = max(1, max_batch)
        self._lock = threading.Lock()
        self._pending: list[_Waiting] = []
        self._running = 0
        self.batches = 0  # batches run (for tests and metrics)
        self.largest = 0  # most queries in one batch so far

    def search(self, query: str, key: BatchKey) -> QueryResult:
        """The result of `query` under `key`, searched together with whatever else is waiting."""
        mine = _Waiting(query, key)
        with self._lock:
            self._pending.append(mine)
            if self._running < self._leaders:
                self._running += 1
                mine.lead = True
        while True:
            if mine.lead:
                mine.lead = False
                self._lead()
            if mine.done:
                break
            mine.wake.wait()
            mine.wake.clear()
        if mine.error is not None:
            raise mine.error
        assert mine.result is not None
        return mine.result

    def _lead(self) -> None:
        """Run the oldest waiting batch (if another leader has not taken everything), then pass the lead on."""
        with self._lock:
            batch = self._take() if self._pending else []
        try:
            if batch:
                self._run(batch)
        finally:
            with self._lock:
                self._running -= 1
                if self._pending and self._running < self._leaders:
                    nxt = self._pending[0]  # the oldest query waiting leads the next batch
                    nxt.lead = True
                    self._running += 1
                    nxt.wake.set()

    def _take(self) -> list[_Waiting]:
        """The oldest waiting queries with the first one's key (at most max_batch), removed from the queue."""
        key = self._pending[0].key
        batch = [w for w in self._pending if w.key == key][: self._max_batch]
        chosen = set(map(id, batch))
        self._pending = [w for w in self._pending if id(w) not in chosen]
        return batch

    def _run(self, batch: list[_Waiting]) -> None:
        self.batches += 1
        self.largest = max(self.largest, len(batch))
        try:
            results = self._search([w.query for w in batch], batch[0].key)
        except BaseException as exc:  # every waiter gets the error its own search would have raised
            for w in batch:
                w.error, w.done = exc, True
                w.wake.set()
            return
        for w, result in zip(batch, results, strict=True):
            w.result, w.done = result, True
            w.wake.set()
