"""The coordinator's record of every replicated shard: its term, its primary and its in-sync copies.

This is the cluster state of primary–backup replication as Elasticsearch keeps it (docs/operate/replication.md):
one authority (here the coordinator, cluster.replication.coordinator) decides who is primary, numbers each
primary's reign with a term that only grows, and keeps the set of copies that hold every acknowledged write.
A primary acknowledges a write only once every in-sync copy has it; to drop a copy that did not answer it must
ask here first, naming its term, and a primary that has been replaced (an older term) is refused. That refusal is
what keeps a cut-off or frozen primary from acknowledging anything after it was replaced.

The record is written to its store (cluster.replication.map_store: a JSON file, or Redis off the head's disk) before
any change is acted on, so a coordinator that restarts carries on with the same terms. Each coordinator that starts
takes a new epoch from the store and writes only while it is the newest; every view it hands out carries its
epoch, and a copy or router that has seen a newer epoch refuses an older one (two heads may overlap for seconds).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from cluster.replication.map_store import MapStore, Record, StaleEpoch, open_store
from service.errors import Conflict

log = logging.getLogger(__name__)


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
    epoch: int = 0  # the epoch of the coordinator that handed it out (map_store): an older one's views are refused

    def newer_than(self, other: ShardView) -> bool:
        """Within one coordinator's epoch the (term, version) order; a newer coordinator read every view an older
        one saved, so its views never go back on one, and nothing from an older epoch is newer."""
        return (self.epoch, self.term, self.version) > (other.epoch, other.term, other.version)

    def backups(self) -> tuple[str, ...]:
        return tuple(name for name in self.in_sync if name != self.primary)


F = TypeVar("F", bound=Any)


def map_to_keep(held: Sequence[ShardView], offered: Sequence[ShardView]) -> Sequence[ShardView]:
    """What a router keeps when a coordinator hands it `offered`: that map, unless it comes from an older coordinator
    epoch than the one `held` (two heads overlapping for a while: the older one's map would send writes to primaries
    it no longer decides for)."""
    return offered if not held or offered[0].epoch >= held[0].epoch else held


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
    """Every shard's `ShardView`, kept in `store` (a MapStore, or the path of a JSON file; None: in memory only, for
    tests). Starting takes a new epoch: from then on a coordinator of an older epoch changes and confirms nothing."""

    def __init__(self, store: MapStore | Path | None, shards: int, replicas: int) -> None:
        self.store = open_store(store) if isinstance(store, Path) else store
        self.lock = threading.RLock()
        # The epoch first, then the map: whatever an older coordinator saves after this is refused, so the map read
        # is the last one any coordinator could act on.
        self.epoch = 0 if self.store is None else self.store.claim()
        # Set when a save failed without an answer: the store may hold the change or not; settled (`_settle`) before
        # anything else is decided.
        self._unsettled = False
        raw = None if self.store is None else self.store.load()
        if raw is not None:
            self.views = self._read(raw)
            if len(self.views) != shards or any(len(v.replicas) != replicas for v in self.views):
                raise ValueError(
                    f"{self.store!r}: records {len(self.views)} shards of {len(self.views[0].replicas)} replicas, "
                    f"not {shards} of {replicas}: remove it to start the replication state afresh"
                )
            return
        # A new deployment: every copy is seeded from the built index, so all of them hold the same writes.
        self.views = []
        for shard in range(shards):
            names = tuple(replica_name(shard, i) for i in range(replicas))
            self.views.append(ShardView(shard, 1, names[0], names, names, {}, epoch=self.epoch))
        self._save()

    def _read(self, raw: Record) -> list[ShardView]:
        return [
            ShardView(
                shard=v["shard"],
                term=v["term"],
                primary=v["primary"],
                in_sync=tuple(v["in_sync"]),
                replicas=tuple(v["replicas"]),
                starts=dict(v["starts"]),
                version=v.get("version", 0),
                epoch=self.epoch,
            )
            for v in raw
        ]

    def _save(self) -> None:
        if self.store is not None:
            self.store.save(self.epoch, [asdict(v) for v in self.views])

    def _set(self, view: ShardView) -> ShardView:
        self._settle()
        view = replace(view, version=self.views[view.shard].version + 1, epoch=self.epoch)
        views = list(self.views)
        views[view.shard] = view
        saved, self.views = self.views, views
        try:
            self._save()
        except StaleEpoch:
            self.views = saved
            raise
        except BaseException:
            # No answer (a timeout; Redis's replicas not acknowledging in time): the store may have taken it.
            self.views, self._unsettled = saved, True
            raise
        return view

    def _settle(self) -> None:
        """After a save that went unanswered, the map as the store holds it is taken as this coordinator's (only this
        epoch writes there: it is either the map before that save or the one it sent) and saved again, so that the
        store has answered for it (and, behind Sentinel with replicas=N, its replicas hold it) before anything else
        is decided or confirmed on it. StoreUnavailable (nothing decided) while the store does not answer."""
        if not self._unsettled or self.store is None:
            return
        raw = self.store.load()
        if raw is not None:
            self.views = self._read(raw)
        self._save()
        self._unsettled = False

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
        self._settle()
        view = self._check(shard, term, primary)
        keep = tuple(n for n in view.in_sync if n == primary or n in set(took))
        if keep != view.in_sync:
            return self._set(replace(view, in_sync=keep))
        if self.store is not None:  # nothing to change: still the newest coordinator, or the write is not confirmed
            self.store.check(self.epoch)
        return view

    @locked
    def add(self, shard: int, term: int, primary: str, replica: str) -> ShardView:
        """The primary of `term` adds a copy it has brought up to date (under its write lock) to the in-sync set."""
        self._settle()
        view = self._check(shard, term, primary)
        if replica in view.in_sync:
            return view
        return self._set(replace(view, in_sync=(*view.in_sync, replica)))

    @locked
    def started(self, shard: int, replica: str) -> ShardView:
        """A copy (re)started: after its first start it may have missed writes, so it leaves the in-sync set until
        it has caught up; a primary that restarted is replaced (`fail`)."""
        self._settle()
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
        self._settle()
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

    @locked
    def reconcile(self, shard: int, seen: dict[str, int], ranks: dict[str, tuple[int, int]]) -> ShardView:
        """A starting coordinator's first look at the copies that answered (`seen`: name -> the highest term it has
        seen; `ranks`: name -> (term of its last write, last seq)). A map behind them (a store restored from an older
        copy of itself) is moved past every term a copy has seen, with the copy furthest along as primary: a
        term that is reused would let a replaced primary's writes through."""
        self._settle()
        view = self.views[shard]
        newest = max(seen.values(), default=0)
        if newest <= view.term:
            return view
        chosen = max(ranks, key=lambda name: ranks[name]) if ranks else view.primary
        same = tuple(n for n in ranks if n != chosen and ranks[n] == ranks[chosen])
        log.warning(
            "shard %d: the map is at term %d, a copy has seen %d: %s primary under %d",
            shard,
            view.term,
            newest,
            chosen,
            newest + 1,
        )
        return self._set(replace(view, term=newest + 1, primary=chosen, in_sync=(chosen, *same)))
