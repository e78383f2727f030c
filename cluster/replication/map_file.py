"""The shard map in a JSON file (temporary file, fsync, rename), its epoch beside it in the same file.

For one machine, or a head whose disk outlives it; the claim and the compare-and-set hold an exclusive lock on a
file beside the map (flock), so two coordinators on one machine do not interleave.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cluster.replication.map_store import Record, StaleEpoch


class FileMapStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"FileMapStore({self.path})"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.with_name(f".{self.path.name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        if not self.path.is_file():
            return {"epoch": 0, "shards": None}
        raw = json.loads(self.path.read_text(encoding="utf-8"))
        return {"epoch": int(raw.get("epoch", 0)), "shards": raw.get("shards")}

    def _write(self, epoch: int, shards: Record | None) -> None:
        partial = self.path.with_name(f".{self.path.name}.partial")
        with partial.open("w", encoding="utf-8") as handle:
            json.dump({"epoch": epoch, "shards": shards}, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.path)

    def claim(self) -> int:
        with self._locked():
            raw = self._read()
            self._write(raw["epoch"] + 1, raw["shards"])
            return int(raw["epoch"]) + 1

    def load(self) -> Record | None:
        return self._read()["shards"]

    def save(self, epoch: int, shards: Record) -> None:
        with self._locked():
            self._fenced(epoch, self._read()["epoch"])
            self._write(epoch, shards)

    def check(self, epoch: int) -> None:
        self._fenced(epoch, self._read()["epoch"])

    def _fenced(self, epoch: int, newest: int) -> None:
        if newest != epoch:
            raise StaleEpoch(f"{self.path}: coordinator epoch {epoch} has passed (epoch {newest} is the newest)")
