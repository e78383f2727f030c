"""`ssi serve --workers N` (SSI_WORKERS): N server processes answering on one port over one data folder.

Why: one process runs the request path's Python (HTTP, JSON, tokenizing, the exact rerank) under one
GIL, so it uses about one core however many the machine has; FAISS alone runs outside it. Several
processes use several cores (docs/operate/workers.md).

How it stays one server:

- This process, the supervisor, takes the data folders' locks (service.instance_lock), so a second
  `ssi serve` on them is still refused, checks that the port is free and starts the workers. Workers
  are forked from a fork server (multiprocessing's forkserver): a fresh interpreter that has only imported
  the server's modules (PRELOAD), never loaded a model, run a search or started FAISS's or OpenMP's threads,
  so none of that state crosses a fork, and a worker starts without importing them again (2-3 s of CPU
  each on two cores, at every start and every replacement).
- Each worker listens on the port with its own SO_REUSEPORT socket, and the kernel spreads new
  connections over them by a hash of the client's address. One listening socket shared by all the
  workers did not spread them: the worker that woke first accepted the whole burst, and 32 keep-alive
  clients were found on one worker of two (32/0, 30/2, 13/19 in three runs), leaving the other idle.
- A worker loads its collections before it listens, so no request meets a loading worker. Workers
  load one at a time (service.collection): the first imports the corpus, builds the index and
  snapshots it; the others load that snapshot.
- Each worker holds its own index in memory (N copies). A write is committed to the shared store and
  reaches every worker's index through the store's write log: the worker that took it replays the log
  at once, the others before their next search (and every second when idle). A write acknowledged by
  one worker is therefore in the next search on any worker.
- One worker at a time keeps up the snapshots and the log trim (an upkeep lock); each compacts its own index.
- A worker whose collections cannot load exits with LOAD_FAILED and the supervisor stops the server
  with its message (exit 1). A worker that dies later (a crash, the OOM killer) is replaced; more than
  MAX_RESTARTS deaths within RESTART_WINDOW seconds stop the server instead of looping.
- SIGTERM or SIGINT: every worker shuts down gracefully (requests in flight finish; the upkeep worker
  saves a snapshot), then the supervisor releases the folders. If the supervisor itself is killed,
  the kernel kills its fork server and its workers too (service.parent_death): the folder locks die with the
  supervisor, and orphaned workers writing on would be a second server over the same folders.

What is per worker: /metrics counts the answering worker's requests. A reload reaches every worker: the one
that takes it publishes the new bundle, the others load it within a second or so, and the answer waits for
all of them (service.group_reload).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from service.busy import Board, new_slots
from service.group_reload import GroupBundle
from service.instance_lock import FolderInUse, FolderLock
from service.parent_death import die_with_parent
from service.settings import Settings

log = logging.getLogger("service")

LOAD_FAILED = 3  # a worker's exit code when its collections cannot load: fatal for the whole server
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
STOP_GRACE = 90.0  # seconds a worker gets to finish its requests and final snapshot after SIGTERM
# What the fork server imports once for every worker: service.fork_server first (it dies with the supervisor), then
# worker_main's own imports. Module imports only: a module that started a thread on import would lose it in a fork.
PRELOAD = ["service.fork_server", "service.app", "service.server", "uvicorn"]


def _socket(settings: Settings, share_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if share_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def check_port_free(settings: Settings) -> None:
    """Raise OSError if something listens on the port: the workers' SO_REUSEPORT sockets must not join
    another server's group (binding a socket without SO_REUSEPORT fails on any port in use)."""
    with _socket(settings, share_port=False) as probe:
        probe.bind((settings.host, settings.port))


def listen(settings: Settings) -> socket.socket:
    """This worker's listening socket on the server's port (one per worker, SO_REUSEPORT)."""
    sock = _socket(settings, share_port=True)
    sock.bind((settings.host, settings.port))
    sock.listen(2048)
    return sock


def worker_main(settings: Settings, number: int, parent: int, searching: Any) -> None:
    """A worker process: load, then listen and serve until told to stop. `searching`: the group's counts of
    searches in flight (service.busy), this worker's at `number`."""
    die_with_parent(parent)
    from service.server import configure_process, uvicorn_config

    configure_process(settings)
    import uvicorn

    from service.app import create_app

    fatal: list[str] = []
    board = Board(searching, number, cores=settings.workers * settings.threads)
    app = create_app(settings, on_fatal=fatal.append, board=board)
    catalog = app.state.catalog
    catalog.start_loading(fatal.append)
    catalog.wait_loaded()
    if fatal:
        print(f"ssi serve: worker {number}: {fatal[0]}", file=sys.stderr, flush=True)
        catalog.close()
        sys.exit(LOAD_FAILED)
    sock = listen(settings)
    log.info("worker %d ready", number)
    uvicorn.Server(uvicorn_config(app, settings)).run(sockets=[sock])


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)
        self._stop = threading.Event()
        self._deaths: deque[float] = deque()
        self._searching = new_slots(settings.workers)  # each worker's searches in flight (service.busy)

    def _start(self, number: int) -> BaseProcess:
        process = self._context.Process(
            target=worker_main,
            args=(self.settings.model_copy(update={"worker_number": number}), number, os.getpid(), self._searching),
            name=f"ssi-worker-{number}",
            daemon=False,
        )
        process.start()
        return process

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop.set()

    def _too_many_deaths(self) -> bool:
        now = time.monotonic()
        self._deaths.append(now)
        while self._deaths and now - self._deaths[0] > RESTART_WINDOW:
            self._deaths.popleft()
        return len(self._deaths) > MAX_RESTARTS

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT; returns the process exit code."""
        locks: list[FolderLock] = []
        try:
            for name in self.settings.collection_specs():
                for folder in (self.settings.store_dir / name, self.settings.index_dir / name):
                    locks.append(FolderLock(folder).acquire())
                GroupBundle.clear(self.settings.index_dir / name)  # this group serves the bundle it is started with
            check_port_free(self.settings)
        except (FolderInUse, OSError) as exc:
            for lock in locks:
                lock.release()
            print(f"ssi serve: {exc}", file=sys.stderr)
            return 1
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        log.info(
            "serving on %s:%d with %d worker processes", self.settings.host, self.settings.port, self.settings.workers
        )
        workers = {number: self._start(number) for number in range(self.settings.workers)}
        try:
            while not self._stop.wait(0.5):
                for number, process in list(workers.items()):
                    if process.exitcode is None:
                        continue
                    if process.exitcode == LOAD_FAILED:
                        log.error("worker %d could not load its collections: stopping the server", number)
                        return 1
                    log.warning(
                        "worker %d (pid %s) exited with %s: starting another", number, process.pid, process.exitcode
                    )
                    if self._too_many_deaths():
                        log.error(
                            "more than %d workers died within %.0f s: stopping the server", MAX_RESTARTS, RESTART_WINDOW
                        )
                        return 1
                    workers[number] = self._start(number)
        finally:
            self._stop_all(list(workers.values()))
            for lock in locks:
                lock.release()
        return 0

    @staticmethod
    def _stop_all(processes: list[BaseProcess]) -> None:
        for process in processes:
            if process.exitcode is None:
                process.terminate()  # SIGTERM: uvicorn's graceful shutdown
        deadline = time.monotonic() + STOP_GRACE
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.exitcode is None:
                log.error("worker pid %s did not stop within %.0f s: killing it", process.pid, STOP_GRACE)
                process.kill()
                process.join()


def supervise(settings: Settings) -> int:
    return Supervisor(settings).run()
