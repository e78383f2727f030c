"""One learner at a time on a bundles folder: an exclusive `flock` on a file in it.

Two rounds at once would each read the history, pick the same judges and the same served bundle, and race to
reload the server; two `--every` loops would run twice the rounds. The kernel drops a flock with its process,
so a killed learner never leaves a stale lock. (The service has its own locks, service.instance_lock; training
does not import the service.)
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

ROUND_LOCK = "learn.lock"  # held while a round or a rollback runs
LOOP_LOCK = "learn-loop.lock"  # held by an `ssi learn --every` loop for its whole life


class LearnerBusy(RuntimeError):
    """Another `ssi learn` holds the lock."""


class LearnerLock:
    """`with LearnerLock(path, what):` takes the lock or raises LearnerBusy at once, naming who holds it."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what  # what the holder is doing, for the other's message
        self._fd: int | None = None

    def __enter__(self) -> LearnerLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise LearnerBusy(f"{holder} holds {self.path}") from None
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.pwrite(fd, f"{self.what} (pid {os.getpid()}, since {started})".encode(), 0)
        self._fd = fd
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
