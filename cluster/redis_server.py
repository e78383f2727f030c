"""A Redis server this project starts itself: for `ssi cluster local` (Ray's GCS tables and the shard map, off the
head's processes) and for the tests. Debian's `redis-server`, persistence on: every write is in the append-only file
and fsynced before Redis answers it (`appendonly yes`, `appendfsync always`), so a Redis restarted on its folder
holds every change it acknowledged."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from service.bench.server import free_port

PERSISTENT = ("--appendonly", "yes", "--appendfsync", "always", "--save", "")


class RedisServer:
    """`redis-server` on 127.0.0.1:`port`, its files (append-only log) in `folder`; `restart` keeps them."""

    def __init__(self, folder: Path, port: int | None = None, binary: str = "redis-server") -> None:
        found = shutil.which(binary)
        if found is None:
            raise FileNotFoundError(f"{binary} not found: install Debian's redis-server (apt-get install redis-server)")
        self.binary = found
        self.folder = folder.resolve()  # redis-server changes into --dir: a relative log path would move with it
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"redis://{self.address}/0"

    def start(self, timeout: float = 20.0) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        command += [*PERSISTENT, "--logfile", str(self.folder / "redis.log"), "--protected-mode", "no"]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                return
            except redis.RedisError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = self.folder / "redis.log"
                    raise RuntimeError(f"redis-server did not start on {self.address}: see {log}") from None
                time.sleep(0.05)
            finally:
                client.close()

    def kill(self) -> None:
        """SIGKILL: what the append-only file holds is what survives."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
