"""Where the coordinator keeps the shard map: one interface, two stores.

- `cluster.replication.map_file`: a JSON file (one machine, and the tests that need no Redis);
- `cluster.replication.map_redis`: Redis, off the head's disk, so that a head that is lost and started again (or a
  second head, while the first is not yet gone) reads the same terms.

Every coordinator that starts takes a new **epoch** (`claim`, an atomic increment in the store) and writes the map
only while its epoch is still the newest (`save`, a compare-and-set on the epoch). A coordinator whose epoch has
passed can neither change the map nor confirm a primary's write (`check`): two coordinators that overlap for a while
never both decide.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from service.errors import Unavailable

Record = list[dict[str, Any]]  # the map as stored: one dict per shard (ShardView's fields)
SENTINEL_SCHEME = "redis+sentinel"  # redis+sentinel://HOST:PORT[,HOST:PORT…]/NAME[/DB] (cluster.replication.map_redis)
REDIS_SCHEMES = (
    "redis",
    "rediss",
    "unix",
    SENTINEL_SCHEME,
)  # a `--map-store` URL starting with one of these and :// names a Redis


class StaleEpoch(Unavailable):
    """A coordinator whose epoch has passed: a newer one has started, and only it may change or confirm anything."""


class StoreUnavailable(Unavailable):
    """The store did not answer (Redis down or restarting): nothing is changed, a write is not acknowledged."""


class MapStore(Protocol):
    def claim(self) -> int:
        """A new epoch, higher than any handed out before (atomically)."""
        ...

    def load(self) -> Record | None:
        """The map as last saved; None when there is none yet."""
        ...

    def save(self, epoch: int, shards: Record) -> None:
        """Replace the map, only while `epoch` is still the newest (StaleEpoch otherwise)."""
        ...

    def check(self, epoch: int) -> None:
        """StaleEpoch if a newer epoch has been claimed."""
        ...


def open_store(spec: str | Path, key: str = "ssi") -> MapStore:
    """A Redis URL (`redis://host:port[/db]`, `redis+sentinel://…`: REDIS_SCHEMES): the Redis store, its keys under
    `key`; anything else: the JSON file at that path."""
    text = str(spec)
    if is_redis_url(text):
        from cluster.replication.map_redis import RedisMapStore

        return RedisMapStore(text, key)
    from cluster.replication.map_file import FileMapStore

    return FileMapStore(Path(text))


def is_redis_url(text: str) -> bool:
    """Whether a `--map-store` names a Redis (REDIS_SCHEMES) rather than a file."""
    scheme, separator, _ = text.partition("://")
    return bool(separator) and scheme in REDIS_SCHEMES
