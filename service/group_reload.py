"""A reload that reaches every worker of a group (SSI_WORKERS > 1, service.workers).

Each worker holds its own model state, so `POST /admin/reload`, answered by one of them, must reach the
others. The worker that takes it loads the new bundle, swaps its state, then publishes the bundle in a small
record in the collection's index folder (generation, path, content hash: written whole, then renamed over
the old one, under a lock between the workers). The others look at the record once a second from their
upkeep thread (service.collection) and load the same bundle off to the side while they keep serving the old
one; each acknowledges the generation it serves in a file of its own. The reload's answer waits for every
worker's acknowledgement (or says how many had it within SSI_RELOAD_WAIT seconds).

The record lives as long as the group: the supervisor removes it before starting the workers, so a restarted
server serves the bundle it is started with, and a worker started again after a crash loads the bundle the
group serves now, not the one of the command line.

The same acknowledgements tell when the whole group has loaded: `/readyz` says "loading" until every
worker has (service.collection), so a client that waits for it does not open its keep-alive connections
while only the first worker listens (they would all stay on that worker).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from service.instance_lock import FileLock

# Plain files beside the cache folders (service.snapshot.prune_cache removes folders it cannot load from).
RECORD = ".ssi-served-bundle.json"
ACK = ".ssi-served-bundle.ack-"  # + the worker's number
LOCK = ".ssi-served-bundle.lock"


@dataclass(frozen=True, slots=True)
class ServedBundle:
    generation: int
    path: str
    content_hash: str


def write_whole(path: Path, text: str) -> None:
    """Readers see the old text or the new one, never a part. The partial file is the writer's thread's own: a
    reload's handler and the upkeep thread of one worker may acknowledge the same generation at once."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


class GroupBundle:
    """The bundle a worker group serves for one collection (`folder`: its index folder), and who serves it."""

    def __init__(self, folder: Path, workers: int, worker: int) -> None:
        self.folder = folder
        self.workers = workers
        self.worker = worker
        self._record = folder / RECORD
        self._lock = FileLock(folder / LOCK)

    @staticmethod
    def clear(folder: Path) -> None:
        """Forget what an earlier group served (the supervisor, before it starts the workers)."""
        (folder / RECORD).unlink(missing_ok=True)
        for ack in folder.glob(f"{ACK}*"):
            ack.unlink(missing_ok=True)

    def read(self) -> ServedBundle | None:
        try:
            return ServedBundle(**json.loads(self._record.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None

    def publish(self, path: Path, content_hash: str) -> ServedBundle:
        """Record `path` as what the group serves now, one generation after the last one."""
        with self._lock:
            last = self.read()
            served = ServedBundle((last.generation if last else 0) + 1, str(path), content_hash)
            self.folder.mkdir(parents=True, exist_ok=True)
            write_whole(self._record, json.dumps(asdict(served)))
        return served

    def acknowledge(self, generation: int) -> None:
        """This worker serves `generation` now."""
        self.folder.mkdir(parents=True, exist_ok=True)
        write_whole(self.folder / f"{ACK}{self.worker}", str(generation))

    def acknowledged(self, generation: int) -> int:
        """How many workers serve `generation` (or a later one)."""
        count = 0
        for worker in range(self.workers):
            try:
                count += int((self.folder / f"{ACK}{worker}").read_text(encoding="utf-8")) >= generation
            except (FileNotFoundError, ValueError):
                continue
        return count

    def loaded(self) -> int:
        """How many workers of this group have loaded (each acknowledges its first bundle once loaded)."""
        return sum((self.folder / f"{ACK}{worker}").exists() for worker in range(self.workers))

    def wait(self, generation: int, timeout: float, poll: float = 0.1) -> int:
        """Wait until every worker serves `generation`, at most `timeout` seconds; how many do."""
        deadline = time.monotonic() + timeout
        while (count := self.acknowledged(generation)) < self.workers and time.monotonic() < deadline:
            time.sleep(poll)
        return count
