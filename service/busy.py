"""How many of the server's searches run right now, across its worker processes: whether a core is idle.

`ssi serve` sizes its workers and threads to the cores (service.cores), so that a loaded server runs no
more busy threads than it has cores. A lone request then leaves cores idle: on 2 cores, with the
default 2 workers of 1 thread, one client's flat scan (half of a search's 3 ms at 100k passages) ran
on one core while the other waited. A search that knows a core is idle can split its scan over it
(service.index `every_score`), and one that finds every core busy does not, so the bound holds under
load and a lone request is answered sooner.

Each process counts the cores it uses in its own slot of an array of the group (made by the supervisor,
service.workers; a one-slot array of its own for a single process): its searches in flight, and at least
one while it handles any HTTP request (`BusyMiddleware`), since parsing, ranking's Python and answering take
a core too. Counting searches alone, a loaded 14-worker group looked half idle between its batches (each
worker's Python ran while its slot read 0), and searches spread their scans over cores that were busy. A
slot has one writer (its process, under a lock of its own), and any process reads the sum without a lock:
a stale read costs at most one search split while another started, for the length of one scan.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from multiprocessing.sharedctypes import RawArray
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from service.cores import usable_cores


class Board:
    """Searches in flight per worker process; `idle_cores` is what the whole group leaves free."""

    def __init__(self, slots: Any | None = None, slot: int = 0, cores: int | None = None) -> None:
        self._slots = slots if slots is not None else new_slots(1)
        self._slot = slot
        self.cores = cores if cores is not None else usable_cores().usable
        self._lock = threading.Lock()
        self._searches = 0  # searches running in this process
        self._borrowed = 0  # idle cores its spreads took
        self._requests = 0  # HTTP requests it is handling
        self._slots[self._slot] = 0  # a restarted worker's slot may hold its predecessor's count

    def _count(self, searches: int = 0, borrowed: int = 0, requests: int = 0) -> None:
        with self._lock:
            self._searches += searches
            self._borrowed += borrowed
            self._requests += requests
            self._slots[self._slot] = self._borrowed + max(self._searches, min(self._requests, 1))

    @contextmanager
    def _counted(self, searches: int = 0, borrowed: int = 0, requests: int = 0) -> Iterator[None]:
        self._count(searches, borrowed, requests)
        try:
            yield
        finally:
            self._count(-searches, -borrowed, -requests)

    def searching(self) -> AbstractContextManager[None]:
        """Count one search of this process while the block runs."""
        return self._counted(searches=1)

    def borrowing(self, cores: int) -> AbstractContextManager[None]:
        """Count `cores` more while the block runs: a search's scan split over idle cores, so that no other
        search of the group counts them idle meanwhile."""
        return self._counted(borrowed=cores)

    def handling(self) -> AbstractContextManager[None]:
        """Count an HTTP request while the block runs: a process handling any takes at least one core."""
        return self._counted(requests=1)

    def spread(self, tasks: Sequence[Callable[[], None]]) -> None:
        """Run `tasks` (independent; they release the GIL) on this thread and on the idle cores, each thread
        taking the next one in order until none is left; returns when all are done. Under load, all here."""
        helpers = min(self.idle_cores(), len(tasks) - 1)
        if helpers <= 0:
            for task in tasks:
                task()
            return
        queue = iter(tasks)
        lock = threading.Lock()

        def work() -> None:
            while True:
                with lock:
                    task = next(queue, None)
                if task is None:
                    return
                task()

        with self.borrowing(helpers):
            beside = [_helpers(self.cores).submit(work) for _ in range(helpers)]
            try:
                work()
            finally:
                for done in beside:
                    done.result()

    def idle_cores(self) -> int:
        """Cores no counted search is using (0 when at least as many run as there are cores)."""
        return max(0, self.cores - sum(self._slots))


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _helpers(cores: int) -> ThreadPoolExecutor:
    """The threads that take a spread's tasks beside the searching thread (made on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, cores), thread_name_prefix="ssi-spread")
        return _pool


class BusyMiddleware:
    """Counts every HTTP request on the process's board (pure ASGI: a request is counted until its answer is sent)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with _board.handling():
            await self.app(scope, receive, send)


def new_slots(workers: int) -> Any:
    """The shared array of a group of `workers` processes (a ctypes array; passed to each at its start)."""
    return RawArray("l", workers)


_board = Board(cores=1)  # until the process says otherwise (`use`): splits nothing


def use(board: Board) -> None:
    """Make `board` the one this process counts its searches on (a server's start, service.app)."""
    global _board
    _board = board


def board() -> Board:
    return _board
