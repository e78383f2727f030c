"""The shard map in Redis: off the head's disk, so a head started again on another machine reads the same terms.

Two keys under a prefix: `<key>:epoch`, the newest coordinator's epoch (INCR), and `<key>:map`, the map as JSON,
replaced only by a Lua script that first checks the epoch (Redis runs a script atomically: no write of another
coordinator falls between the check and the set). The Redis must persist every write before it answers
(`appendonly yes`, `appendfsync always`, as cluster.redis_server starts it); with a replica, `min-replicas-to-write`
or Sentinel (docs/operate/replication.md).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis

from cluster.replication.map_store import Record, StaleEpoch, StoreUnavailable

log = logging.getLogger(__name__)

# KEYS[1]: the epoch, KEYS[2]: the map; ARGV[1]: the writer's epoch, ARGV[2]: the map as JSON. The newest epoch, or -1
# once the map is written.
SAVE = """
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
if newest ~= tonumber(ARGV[1]) then return newest end
redis.call('SET', KEYS[2], ARGV[2])
return -1
"""


class RedisMapStore:
    def __init__(self, url: str, key: str = "ssi", timeout: float = 2.0) -> None:
        self.url = url
        self.key = key
        self.client: Any = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True
        )
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

    def claim(self) -> int:
        return int(self._call("claim", lambda: self.client.incr(f"{self.key}:epoch")))

    def load(self) -> Record | None:
        raw = self._call("load", lambda: self.client.get(f"{self.key}:map"))
        return None if raw is None else list(json.loads(raw))

    def save(self, epoch: int, shards: Record) -> None:
        keys = [f"{self.key}:epoch", f"{self.key}:map"]
        newest = int(self._call("save", lambda: self._save(keys=keys, args=[epoch, json.dumps(shards)])))
        if newest != -1:
            raise StaleEpoch(f"coordinator epoch {epoch} has passed (epoch {newest} is the newest): map not changed")

    def check(self, epoch: int) -> None:
        newest = int(self._call("check", lambda: self.client.get(f"{self.key}:epoch")) or 0)
        if newest != epoch:
            raise StaleEpoch(f"coordinator epoch {epoch} has passed (epoch {newest} is the newest)")
