"""One serving process per data folder: an exclusive `flock` on a lock file inside it.

A group of worker processes (`SSI_WORKERS` > 1, service.workers) is one server: its supervisor holds
the folder locks, and the workers coordinate among themselves with `FileLock`s (who loads or writes
snapshots now, who keeps up the snapshots).

Two processes over the same store would each keep their own in-memory index, apply only their own
writes to it, and delete or trim each other's snapshots and write log. The lock is taken before a
collection opens anything and released when it closes (or when the process dies: the kernel drops
a flock with its file descriptor, so a SIGKILL never leaves a stale lock behind).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".ssi-serve.lock"


class FolderInUse(RuntimeError):
    """Another process serves this folder."""


class FolderLock:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        """Take the lock or raise `FolderInUse` naming the process that holds it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise FolderInUse(
                f"{self.folder} is already served by another process (pid {holder}, lock {self.path}); "
                "only one `ssi serve` may use a data folder: stop it, or give this one its own "
                "SSI_DATA_DIR and SSI_CACHE_DIR"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class FileLock:
    """An exclusive `flock` between the worker processes of one server (and between threads: each
    FileLock opens its own descriptor, and two descriptors' flocks exclude each other)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def acquire(self) -> None:
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; True if this one now holds it."""
        if self._fd is not None:
            return True
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
