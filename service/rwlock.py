"""A readers-writer lock: many searches at once, or one mutation of the in-memory index alone.

FAISS indexes are safe to search from several threads but not while another thread adds to them
(a FAISS lesson in STYLE.md). Searches take the shared side, one query at a time (a batch takes
and releases it per query, service.model_state); applying a write takes the exclusive side for the
few milliseconds the in-memory update needs. Waiting writers block new readers, so a steady stream
of searches cannot starve writes; and since no reader holds it for longer than one query, a write
never waits for a whole batch, nor do the searches queued behind that write.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadWriteLock:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._waiting_writers += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._waiting_writers -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
