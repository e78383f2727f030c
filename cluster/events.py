"""The router's traffic log: the merged answers it gave and the clicks reported on them (service.events).

Why the router and not the shards: a shard only sees its part of a ranking, and the positions a user was
shown exist only after the merge, so the router names each merged answer's impression and answers `/clicks`
itself, with the single node's code (service.events.traffic.Traffic over service.events.store.EventStore: the
same ids, explore shuffle, bounds and file). The log is one service data folder of its own, by default
`<index>/router` beside the shards' (`<index>/router/stores/<collection>/events.sqlite`, the path a single node
with SSI_DATA_DIR=<index>/router writes), which every node mounts, so router replicas share one log as the
workers of a single node do (on a network file system, one whose locks SQLite can rely on).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from service.events.traffic import Traffic
from service.settings import Settings

if TYPE_CHECKING:
    from service.collection import Collection

ROUTER_FOLDER = "router"  # the router's data folder inside the sharded index folder (cluster.deploy's default)


@dataclass(frozen=True, slots=True)
class ServedBundle:
    content_hash: str


@dataclass(frozen=True, slots=True)
class ServedState:
    bundle: ServedBundle


class ShardedCollection:
    """What Traffic asks of a collection, answered for the sharded index: its name and the served bundle's hash.

    The hash is read from `about` (the manifest's summary) at each answer, so impressions after an
    /admin/reload name the new model, as a single node's do.
    """

    def __init__(self, name: str, about: dict[str, Any]) -> None:
        self.name = name
        self.about = about

    def ready_state(self) -> ServedState:
        return ServedState(ServedBundle(str(self.about.get("bundle_hash", ""))))

    def as_collection(self) -> Collection:
        """This object where Traffic's signature names a Collection (it reads nothing else of one)."""
        return cast("Collection", self)


def router_traffic(settings: Settings, data_dir: Path | None) -> Traffic:
    """The router's Traffic over `data_dir` (its stores/ folder holds the log); None: no log is kept, as with
    SSI_EVENTS=false (answers name no impression, /clicks answers 403)."""
    if data_dir is None:
        return Traffic(settings.model_copy(update={"events": False}))
    return Traffic(settings.model_copy(update={"data_dir": Path(data_dir)}))
