"""The shard map in Redis: off the head's disk, so a head started again on another machine reads the same terms.

Two keys under a prefix: `<key>:epoch`, the newest coordinator's epoch (INCR), and `<key>:map`, the map as JSON,
replaced only by a Lua script that first checks the epoch (Redis runs a script atomically: no write of another
coordinator falls between the check and the set). The Redis must persist every write before it answers
(`appendonly yes`, `appendfsync always`, as cluster.redis_server starts it).

Behind Sentinel (`redis+sentinel://SENTINEL[,SENTINEL…]/NAME[/DB]`), the store asks the Sentinels where the primary
is, and asks again after a failover. Redis copies to its replicas after it answers, so a failover may lose the last
changes a primary acknowledged; `?replicas=N` closes that gap the way Redis's `WAIT` allows: a change (a new epoch,
a saved map) counts only once N replicas hold it, and a confirmation (`check`) only from a primary that still has N
replicas in step. A change the primary took but no replica acknowledged in time raises StoreUnavailable and is not
acted on: lost in a failover, it was never relied on; kept, it is read by the next coordinator like any other.
A primary cut off from its replicas (the one a failover left behind) can then confirm nothing.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import redis
from redis.sentinel import Sentinel

from cluster.replication.map_store import REDIS_SCHEMES, SENTINEL_SCHEME, Record, StaleEpoch, StoreUnavailable

log = logging.getLogger(__name__)

# KEYS[1]: the epoch, KEYS[2]: the map; ARGV[1]: the writer's epoch, ARGV[2]: the map as JSON. The newest epoch, or -1
# once the map is written.
SAVE = """
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
if newest ~= tonumber(ARGV[1]) then return newest end
redis.call('SET', KEYS[2], ARGV[2])
return -1
"""


@dataclass(frozen=True)
class RedisAddress:
    """A map store's URL taken apart: Redis's own URL (redis-py reads it), or the Sentinels and the name they watch
    the primary under; and the replicas a change must reach (`?replicas=N`, 0 by default)."""

    url: str  # without `replicas`
    sentinels: tuple[tuple[str, int], ...] = ()
    name: str = ""
    db: int = 0
    replicas: int = 0

    @classmethod
    def parse(cls, url: str) -> RedisAddress:
        """ValueError naming what is wrong with `url`."""
        parts = urlsplit(url)
        if parts.scheme not in REDIS_SCHEMES:
            raise ValueError(f"{url!r}: not a Redis URL ({'://, '.join(REDIS_SCHEMES)}://)")
        query = parse_qs(parts.query)
        try:
            replicas = int(query.pop("replicas", ["0"])[-1])
        except ValueError:
            raise ValueError(f"{url!r}: replicas= must be a whole number") from None
        if replicas < 0:
            raise ValueError(f"{url!r}: replicas= must be 0 or more")
        rest = "&".join(f"{k}={v}" for k, values in query.items() for v in values)
        plain = parts._replace(query=rest).geturl()
        if parts.scheme != SENTINEL_SCHEME:
            return cls(plain, replicas=replicas)
        path = [piece for piece in parts.path.split("/") if piece]
        if not path or len(path) > 2 or not (len(path) == 1 or path[1].isdigit()):
            raise ValueError(f"{url!r}: a Sentinel URL is redis+sentinel://HOST:PORT[,HOST:PORT...]/NAME[/DB]")
        sentinels = []
        for host_port in parts.netloc.rpartition("@")[2].split(","):
            host, _, port = host_port.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"{url!r}: {host_port!r} is not a Sentinel's HOST:PORT")
            sentinels.append((host, int(port)))
        return cls(plain, tuple(sentinels), path[0], int(path[1]) if len(path) == 2 else 0, replicas)

    def client(self, timeout: float) -> Any:
        """A redis-py client of the primary: a Sentinel-managed one (it finds the primary again after a failover), or
        one of the URL's server."""
        common = {"socket_timeout": timeout, "socket_connect_timeout": timeout, "decode_responses": True}
        if not self.sentinels:
            return redis.Redis.from_url(self.url, **common)
        sentinels = Sentinel(list(self.sentinels), socket_timeout=timeout, sentinel_kwargs={"socket_timeout": timeout})
        return sentinels.master_for(self.name, db=self.db, **common)


class RedisMapStore:
    def __init__(self, url: str, key: str = "ssi", timeout: float = 2.0) -> None:
        self.url = url
        self.key = key
        self.address = RedisAddress.parse(url)
        self.replicas = self.address.replicas
        self.wait_ms = int(500 * timeout)  # WAIT gives up before the socket does, so its answer is read
        self.client: Any = self.address.client(timeout)
        self._save = self.client.register_script(SAVE)
        self._warn_without_persistence()

    def __repr__(self) -> str:
        return f"RedisMapStore({self.url}, {self.key!r})"

    def _warn_without_persistence(self) -> None:
        try:
            config = self.client.config_get("append*")
        except redis.RedisError:  # CONFIG refused (a managed Redis) or not reachable yet: the docs say what it needs
            return
        if config.get("appendonly") != "yes" or config.get("appendfsync") != "always":
            log.warning(
                "%s: appendonly=%s appendfsync=%s: a Redis restart may lose the last changes of the shard map "
                "(set appendonly yes, appendfsync always)",
                self.url,
                config.get("appendonly"),
                config.get("appendfsync"),
            )

    def _call(self, what: str, work: Any) -> Any:
        try:
            return work()
        except redis.RedisError as exc:
            raise StoreUnavailable(
                f"the shard map's Redis at {self.url} did not answer ({what}: {type(exc).__name__}); nothing changed",
                headers={"Retry-After": "2"},
            ) from None

    def ping(self) -> None:
        """StoreUnavailable if the Redis does not answer (checked before a deployment starts its coordinator)."""
        self._call("ping", self.client.ping)

    def _held(self, what: str, queue: Any) -> Any:
        """The answer of the command `queue` puts on a pipeline, once `self.replicas` replicas hold every change sent
        on its connection (WAIT, on the same connection: the pipeline's); StoreUnavailable where fewer did in time."""

        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            queue(pipe)
            if self.replicas:
                pipe.wait(self.replicas, self.wait_ms)
            return list(pipe.execute())

        answers = self._call(what, run)
        if self.replicas and int(answers[-1]) < self.replicas:
            raise StoreUnavailable(
                f"the shard map's Redis at {self.url}: {answers[-1]} of {self.replicas} replicas acknowledged "
                f"({what}) within {self.wait_ms} ms; not acted on",
                headers={"Retry-After": "2"},
            )
        return answers[0]

    def claim(self) -> int:
        return int(self._held("claim", lambda pipe: pipe.incr(f"{self.key}:epoch")))

    def load(self) -> Record | None:
        raw = self._call("load", lambda: self.client.get(f"{self.key}:map"))
        return None if raw is None else list(json.loads(raw))

    def save(self, epoch: int, shards: Record) -> None:
        keys = [f"{self.key}:epoch", f"{self.key}:map"]
        newest = int(
            self._held("save", lambda pipe: self._save(keys=keys, args=[epoch, json.dumps(shards)], client=pipe))
        )
        if newest != -1:
            raise StaleEpoch(f"coordinator epoch {epoch} has passed (epoch {newest} is the newest): map not changed")

    def check(self, epoch: int) -> None:
        newest = int(self._held("check", lambda pipe: pipe.get(f"{self.key}:epoch")) or 0)
        if newest != epoch:
            raise StaleEpoch(f"coordinator epoch {epoch} has passed (epoch {newest} is the newest)")
