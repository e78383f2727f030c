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

from pathlib import Path
from typing import Any

from service.events.traffic import Traffic
from service.settings import Settings

ROUTER_FOLDER = "router"  # the router's data folder inside the sharded index folder (cluster.deploy's default)


def served_model(about: dict[str, Any]) -> str:
    """The hash of the bundle the shards serve, read from `about` (the manifest's summary) at each answer, so
    impressions after an /admin/reload name the new model, as a single node's do."""
    return str(about.get("bundle_hash", ""))


def router_traffic(settings: Settings, data_dir: Path | None) -> Traffic:
    """The router's Traffic over `data_dir` (its stores/ folder holds the log); None: no log is kept, as with
    SSI_EVENTS=false (answers name no impression, /clicks answers 403)."""
    if data_dir is None:
        return Traffic(settings, enabled=False)
    return Traffic(settings.model_copy(update={"data_dir": Path(data_dir)}))
