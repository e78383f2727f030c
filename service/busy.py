"""How many of the server's searches run right now, across its worker processes: whether a core is idle.

`ssi serve` sizes its workers and threads to the cores (service.cores), so that a loaded server runs no
more busy threads than it has cores. A lone request then leaves cores idle: on 2 cores, with the
default 2 workers of 1 thread, one client's flat scan (half of a search's 3 ms at 100k passages) ran
on one core while the other waited. A search that knows a core is idle can split its scan over it
(service.index `every_score`), and one that finds every core busy does not, so the bound holds under
load and a lone request is answered sooner.

Each process counts its searches in flight in its own slot of an array of the group (made by the
supervisor, service.workers; a one-slot array of its own for a single process). A slot has one writer
(its process, under a lock of its own), and any process reads the sum without a lock: a stale read
costs at most one search split while another started, for the length of one scan.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from multiprocessing.sharedctypes import RawArray
from typing import Any

from service.cores import usable_cores


class Board:
    """Searches in flight per worker process; `idle_cores` is what the whole group leaves free."""

    def __init__(self, slots: Any | None = None, slot: int = 0, cores: int | None = None) -> None:
        self._slots = slots if slots is not None else new_slots(1)
        self._slot = slot
        self.cores = cores if cores is not None else usable_cores().usable
        self._lock = threading.Lock()
        self._slots[self._slot] = 0  # a restarted worker's slot may hold its predecessor's count

    def searching(self) -> AbstractContextManager[None]:
        """Count one search of this process while the block runs."""
        return self.borrowing(1)

    @contextmanager
    def borrowing(self, cores: int) -> Iterator[None]:
        """Count `cores` more while the block runs: a search's scan split over idle cores, so that no other
        search of the group counts them idle meanwhile."""
        with self._lock:
            self._slots[self._slot] += cores
        try:
            yield
        finally:
            with self._lock:
                self._slots[self._slot] -= cores

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
