"""A Redis server this project starts itself: for `ssi cluster local` (Ray's GCS tables and the shard map, off the
head's processes) and for the tests. Debian's `redis-server`, persistence on: every write is in the append-only file
and fsynced before Redis answers it (`appendonly yes`, `appendfsync always`), so a Redis restarted on its folder
holds every change it acknowledged. `replica_of` makes it a replica of another; `Sentinel` watches a primary and
promotes a replica when it is gone (Redis's own failover, what a deployment's Redis runs behind)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from service.bench.server import free_port

PERSISTENT = ("--appendonly", "yes", "--appendfsync", "always", "--save", "")
# A replica that (re)connects is sent the data at once: Redis otherwise waits 5 s for others to share the transfer.
REPLICATION = ("--repl-diskless-sync-delay", "0")


class RedisServer:
    """`redis-server` on 127.0.0.1:`port`, its files (append-only log) in `folder`; `restart` keeps them."""

    def __init__(
        self, folder: Path, port: int | None = None, binary: str = "redis-server", replica_of: str | None = None
    ) -> None:
        self.binary = redis_binary(binary)
        self.folder = folder.resolve()  # redis-server changes into --dir: a relative log path would move with it
        self.port = port or free_port()
        self.replica_of = replica_of  # host:port of the primary this one copies
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
        command += [*PERSISTENT, *REPLICATION, "--logfile", str(self.folder / "redis.log"), "--protected-mode", "no"]
        if self.replica_of is not None:
            command += ["--replicaof", *self.replica_of.split(":")]
        self.process = _answering(command, self.port, self.folder / "redis.log", timeout)

    def kill(self) -> None:
        """SIGKILL: what the append-only file holds is what survives."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        _stop(self.process)


class Sentinel:
    """Redis Sentinel (`redis-server CONFIG --sentinel`) on 127.0.0.1:`port`, watching the primary at `primary` under
    `name`: it finds the primary's replicas itself and, once the primary has not answered for `down_after_ms`,
    promotes one of them (one Sentinel decides alone: quorum 1, enough for one machine's tests; a deployment runs
    three on three machines with quorum 2). Clients ask it where the primary is (redis+sentinel:// URLs)."""

    def __init__(
        self, folder: Path, primary: str, name: str, down_after_ms: int = 1000, port: int | None = None
    ) -> None:
        self.binary = redis_binary("redis-server")
        self.folder = folder.resolve()
        self.port = port or free_port()
        self.name = name
        folder.mkdir(parents=True, exist_ok=True)
        host, primary_port = primary.split(":")
        config = self.folder / "sentinel.conf"  # Sentinel rewrites it with what it learns (replicas, failovers)
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.folder}\n"
            f"logfile {self.folder / 'sentinel.log'}\n"
            f"sentinel monitor {name} {host} {primary_port} 1\n"
            f"sentinel down-after-milliseconds {name} {down_after_ms}\n"
            f"sentinel failover-timeout {name} {max(3 * down_after_ms, 3000)}\n",
            encoding="utf-8",
        )
        self.process = _answering([self.binary, str(config), "--sentinel"], self.port, self.folder / "sentinel.log")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def primary(self) -> str:
        """host:port of the primary Sentinel knows now."""
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, decode_responses=True)
        try:
            host, port = client.sentinel_get_master_addr_by_name(self.name)
        finally:
            client.close()
        return f"{host}:{port}"

    def stop(self) -> None:
        _stop(self.process)


def redis_binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: install Debian's redis-server (apt-get install redis-server)")
    return found


def _answering(command: list[str], port: int, log: Path, timeout: float = 20.0) -> subprocess.Popen[bytes]:
    """`command` started, once a PING on `port` answers; RuntimeError naming its log where it does not in time."""
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.ping()
            return process
        except redis.RedisError:
            if process.poll() is not None or time.monotonic() > deadline:
                _stop(process)
                raise RuntimeError(f"{command[0]} did not start on 127.0.0.1:{port}: see {log}") from None
            time.sleep(0.05)
        finally:
            client.close()


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
