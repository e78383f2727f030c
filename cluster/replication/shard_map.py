"""The coordinator's record of every replicated shard: its term, its primary and its in-sync copies.

This is the cluster state of primary–backup replication as Elasticsearch keeps it (docs/operate/replication.md):
one authority (here the coordinator, cluster.replication.coordinator) decides who is primary, numbers each
primary's reign with a term that only grows, and keeps the set of copies that hold every acknowledged write.
A primary acknowledges a write only once every in-sync copy has it; to drop a copy that did not answer it must
ask here first, naming its term, and a primary that has been replaced (an older term) is refused. That refusal is
what keeps a cut-off or frozen primary from acknowledging anything after it was replaced.

The record is written to a JSON file (temporary file, fsync, rename) before any change is acted on, so a
coordinator that restarts carries on with the same terms.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from service.errors import Conflict


class StaleTerm(Conflict):
    """A request made under a term that has ended: its maker is no longer (or never was) the primary."""


@dataclass(frozen=True, slots=True)
class ShardView:
    """One shard's replication state. `in_sync`: the copies that hold every acknowledged write (the primary
    first); `replicas`: every copy the shard has; `starts`: how many times each copy has started."""

    shard: int
    term: int
    primary: str
    in_sync: tuple[str, ...]
    replicas: tuple[str, ...]
    starts: dict[str, int] = field(default_factory=dict)
    version: int = 0  # grows with every change of the map's record of this shard: a copy never goes back to an older

    def newer_than(self, other: ShardView) -> bool:
        return (self.term, self.version) > (other.term, other.version)

    def backups(self) -> tuple[str, ...]:
        return tuple(name for name in self.in_sync if name != self.primary)


F = TypeVar("F", bound=Any)


def locked(method: F) -> F:
    """One change of the map at a time: the coordinator's round and the primaries' calls come from several threads."""

    @functools.wraps(method)
    def wrapper(self: ShardMap, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def replica_name(shard: int, index: int) -> str:
    return f"shard-{shard:04d}-r{index}"


class ShardMap:
    """Every shard's `ShardView`, persisted at `path` (None: in memory only, for tests)."""

    def __init__(self, path: Path | None, shards: int, replicas: int) -> None:
        self.path = path
        self.lock = threading.RLock()
        if path is not None and path.is_file():
            raw = json.loads(path.read_text(encoding="utf-8"))
            self.views = [
                ShardView(
                    shard=v["shard"],
                    term=v["term"],
                    primary=v["primary"],
                    in_sync=tuple(v["in_sync"]),
                    replicas=tuple(v["replicas"]),
                    starts=dict(v["starts"]),
                    version=v.get("version", 0),
                )
                for v in raw["shards"]
            ]
            if len(self.views) != shards or any(len(v.replicas) != replicas for v in self.views):
                raise ValueError(
                    f"{path}: records {len(self.views)} shards of {len(self.views[0].replicas)} replicas, "
                    f"not {shards} of {replicas}: remove it to start the replication state afresh"
                )
            return
        # A new deployment: every copy is seeded from the built index, so all of them hold the same writes.
        self.views = []
        for shard in range(shards):
            names = tuple(replica_name(shard, i) for i in range(replicas))
            self.views.append(ShardView(shard, 1, names[0], names, names, {}))
        self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.partial")
        with partial.open("w", encoding="utf-8") as handle:
            json.dump({"shards": [asdict(v) for v in self.views]}, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.path)

    def _set(self, view: ShardView) -> ShardView:
        view = replace(view, version=self.views[view.shard].version + 1)
        views = list(self.views)
        views[view.shard] = view
        saved, self.views = self.views, views
        try:
            self._save()
        except BaseException:
            self.views = saved
            raise
        return view

    @locked
    def view(self, shard: int) -> ShardView:
        return self.views[shard]

    def _check(self, shard: int, term: int, primary: str) -> ShardView:
        view = self.views[shard]
        if term != view.term or primary != view.primary:
            raise StaleTerm(
                f"shard {shard}: {primary} asked under term {term}, but term {view.term} is {view.primary}'s"
            )
        return view

    @locked
    def commit(self, shard: int, term: int, primary: str, took: Sequence[str]) -> ShardView:
        """Before it acknowledges a write, the primary of `term` has its term confirmed (StaleTerm if it was replaced:
        the write is then not acknowledged) and every copy that did not take the write (`took`: the backups that did)
        leaves the in-sync set, whatever the primary believed the set to be: every copy left in it holds the write."""
        view = self._check(shard, term, primary)
        keep = tuple(n for n in view.in_sync if n == primary or n in set(took))
        return view if keep == view.in_sync else self._set(replace(view, in_sync=keep))

    @locked
    def add(self, shard: int, term: int, primary: str, replica: str) -> ShardView:
        """The primary of `term` adds a copy it has brought up to date (under its write lock) to the in-sync set."""
        view = self._check(shard, term, primary)
        if replica in view.in_sync:
            return view
        return self._set(replace(view, in_sync=(*view.in_sync, replica)))

    @locked
    def started(self, shard: int, replica: str) -> ShardView:
        """A copy (re)started: after its first start it may have missed writes, so it leaves the in-sync set until
        it has caught up; a primary that restarted is replaced (`fail`)."""
        view = self.views[shard]
        starts = dict(view.starts)
        starts[replica] = starts.get(replica, 0) + 1
        view = self._set(replace(view, starts=starts))
        if starts[replica] == 1:
            return view
        return self.fail(shard, replica)

    @locked
    def fail(self, shard: int, replica: str, positions: dict[str, tuple[int, int]] | None = None) -> ShardView:
        """`replica` is gone (dead, restarted, frozen past the failure timeout): out of the in-sync set; if it was
        the primary, the in-sync copy furthest along (`positions`: name -> (term of its last write, last seq)) is
        promoted under a new term, with the copies at the same position. With no in-sync copy left, the shard keeps
        its primary and waits for it."""
        view = self.views[shard]
        rest = tuple(n for n in view.in_sync if n != replica)
        if replica != view.primary:
            return view if rest == view.in_sync else self._set(replace(view, in_sync=rest))
        if not rest:
            return view
        known = positions or {}
        chosen = max(rest, key=lambda name: known.get(name, (-1, -1)))
        # A copy whose last write is the new primary's (same sequence, same term) holds the same history: it stays
        # in sync. Should the old primary still reach it with a write of the old term, the new primary's next write
        # no longer follows its last one, and it is dropped and caught up then.
        same = tuple(n for n in rest if n != chosen and chosen in known and known.get(n) == known[chosen])
        return self._set(replace(view, term=view.term + 1, primary=chosen, in_sync=(chosen, *same)))
