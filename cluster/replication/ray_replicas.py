"""Replicated shards on Ray: each copy a Ray actor pinned to its own node, a coordinator actor, the router's view.

- Copy r of every shard runs on the node labelled `ssi.node=n<r>` (`ray start --labels '{"ssi.node": "n0"}'`;
  `ssi cluster local` labels its worker nodes so), in `<node_dir>/n<r>/<copy>` on that node's own disk. Ray
  restarts a copy whose process died (`max_restarts=-1`) on the same node, so it finds its folder again; a copy
  whose node is gone waits until a node with its label joins, and catches up there.
- The coordinator (cluster.replication.coordinator's round, every `tick_seconds`) runs in one detached actor on the
  head node (Ray starts it again, on a head that comes back too) and keeps the shard map in its store
  (cluster.replication.map_store): Redis, beside the GCS's own tables, where `map_store` names one; otherwise
  `<node_dir>/coordinator/map.json` on the head's disk. Every actor here is detached: none dies with the driver
  that started it (on the head).
- Every labelled node also keeps a copy of the router's traffic log (`EventCopyActor`, cluster.replication.events).
- The router (`ReplicatedShards`, the `Shards` of cluster.fanout) reads the map every second or after a failure:
  writes go to each shard's primary, reads to its in-sync copies in turn, a reload's steps to every in-sync copy.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util import list_named_actors

from cluster.manifest import ClusterIndexError
from cluster.replication.coordinator import Coordinator
from cluster.replication.events import EventCopy, Rows
from cluster.replication.map_store import open_store
from cluster.replication.replica import Position, Replica, ServerArgs, Unreachable
from cluster.replication.shard_map import ShardMap, ShardView, map_to_keep, replica_name
from cluster.shard_server import Reply
from service.errors import Unavailable
from ssi.traffic import EVENTS_FILE

NAMESPACE = "ssi"
HEAD_RESOURCE = "node:__internal_head__"  # Ray's resource of its head node
NODE_LABEL = "ssi.node"
WRITES = {"put", "delete"}
EVERY_COPY = {"prepare_reload", "commit_reload", "abort_reload", "drop_candidate"}
NOT_PRIMARY = "is not the primary"
MAP_READ_TIMEOUT = 2.0  # seconds the router waits for the map before it serves from the one it holds
MAP_TIMEOUT = 10.0  # seconds a primary waits for the coordinator's confirmation of a write (then a 503)
# Calls that do real work get longer than the failure timeout (a ping's): a write's apply on a backup (featurizing
# a batch), a catch-up, a whole copy unpacked and loaded, a recovery (all of those, run by the primary).
LONGER = {
    "replicate": 10.0,
    "catch_up": 120.0,
    "install": 600.0,
    "recover": 900.0,
    "call": 600.0,  # a reload step on a copy that missed one (Replica.recover)
    "add": 10.0,
    "dump": 120.0,
}


def node_label(index: int) -> str:
    return f"n{index}"


def actor_name(group: str, name: str) -> str:
    return f"{group}-{name}"


def on_node(label: str) -> str:
    """`label`, once checked to be the label of the node this actor runs on (the copy's disk is that node's)."""
    here = ray.get_runtime_context().get_node_labels().get(NODE_LABEL)
    if here != label:
        raise RuntimeError(f"placed on the node labelled {here!r}, not on {label!r}: its copy would not be its node's")
    return label


class RayPeers:
    """Copies reached as named actors of `group`; no answer within `timeout` is Unreachable."""

    def __init__(self, group: str, timeout: float) -> None:
        self.group = group
        self.timeout = timeout
        self._handles: dict[str, Any] = {}

    def handle(self, name: str) -> Any:
        if name not in self._handles:
            self._handles[name] = ray.get_actor(actor_name(self.group, name), namespace=NAMESPACE)
        return self._handles[name]

    def call(self, name: str, method: str, *args: Any) -> Any:
        try:
            ref = getattr(self.handle(name), method).remote(*args)
            return ray.get(ref, timeout=max(self.timeout, LONGER.get(method, 0.0)))
        except (GetTimeoutError, RayActorError, ValueError) as exc:  # ValueError: no such actor (yet)
            raise Unreachable(f"{name}: {type(exc).__name__}") from None
        except RayTaskError as exc:
            raise exc.as_instanceof_cause() from None


class RemoteMap:
    """The coordinator's calls a primary makes, sent to the coordinator actor."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def commit(self, shard: int, term: int, primary: str, took: Sequence[str]) -> ShardView:
        return self._get(self.handle.commit.remote(shard, term, primary, list(took)))

    def add(self, shard: int, term: int, primary: str, replica: str) -> ShardView:
        return self._get(self.handle.add.remote(shard, term, primary, replica))

    @staticmethod
    def _get(ref: Any) -> ShardView:
        try:
            return ray.get(ref, timeout=MAP_TIMEOUT)
        except RayTaskError as exc:
            raise exc.as_instanceof_cause() from None
        except (GetTimeoutError, RayActorError):  # the write is not acknowledged; the client may send it again
            raise Unavailable(
                "the replication coordinator did not answer: not acknowledged", headers={"Retry-After": "2"}
            ) from None


class CoordinatorActor:
    """The shard map and the coordinator's round in one actor (threaded: primaries call it during a round)."""

    def __init__(
        self, group: str, map_store: str, map_key: str, shards: int, replicas: int, timeout: float, every: float
    ) -> None:
        self.map = ShardMap(open_store(map_store, map_key), shards, replicas)
        self.coordinator = Coordinator(self.map, RayPeers(group, timeout), background=True)
        self.every = every
        self.rounds = 0
        self.last_report: dict[str, Any] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._loop, name="coordinator", daemon=True).start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                report = self.coordinator.tick()
                self.rounds += 1
                self.last_report = report.__dict__
            except Exception as exc:  # noqa: BLE001 — the next round tries again; the reason is shown by describe
                self.last_report = {"error": f"{type(exc).__name__}: {exc}"}

    def views(self) -> list[ShardView]:
        return list(self.map.views)

    def commit(self, shard: int, term: int, primary: str, took: list[str]) -> ShardView:
        return self.map.commit(shard, term, primary, took)

    def add(self, shard: int, term: int, primary: str, replica: str) -> ShardView:
        return self.map.add(shard, term, primary, replica)

    def started(self, shard: int, replica: str) -> ShardView:
        return self.map.started(shard, replica)

    def describe(self) -> dict[str, Any]:
        shards = [asdict(v) for v in self.views()]
        return {"epoch": self.map.epoch, "rounds": self.rounds, "last": self.last_report, "shards": shards}

    def stop(self) -> None:
        self._stop.set()

    def pid(self) -> int:
        import os

        return os.getpid()


class ReplicaActor:
    """One copy of one shard on its node (cluster.replication.replica.Replica), reachable by name."""

    def __init__(
        self, group: str, name: str, label: str, args: ServerArgs, node_dir: str, min_copies: int, timeout: float
    ) -> None:
        node = on_node(label)
        coordinator = ray.get_actor(actor_name(group, "coordinator"), namespace=NAMESPACE)
        view = ray.get(coordinator.started.remote(args.shard, name))
        self.replica = Replica(
            name,
            args,
            Path(node_dir) / node / name,
            RayPeers(group, timeout),
            RemoteMap(coordinator),
            view,
            min_copies=min_copies,
        )

    def position(self) -> Position:
        return self.replica.position()

    def assign(self, view: ShardView) -> None:
        self.replica.assign(view)

    def put(self, docs: list[dict[str, Any]], types: dict[str, str] | None = None) -> Reply:
        return self.replica.put(docs, types)

    def delete(self, doc_id: str) -> Reply:
        return self.replica.delete(doc_id)

    def replicate(self, *args: Any) -> Reply:
        return self.replica.replicate(*args)

    def recover(self, joiner: str) -> None:
        self.replica.recover(joiner)

    def install(self, term: int, blob: bytes) -> Reply:
        return self.replica.install(term, blob)

    def catch_up(self, term: int, changes: Any) -> Reply:
        return self.replica.catch_up(term, changes)

    def call(self, method: str, *args: Any) -> Reply:
        return self.replica.call(method, *args)

    def fingerprint(self) -> tuple[int, int, str]:
        return self.replica.fingerprint()

    def node(self) -> str | None:
        return ray.get_runtime_context().get_node_labels().get(NODE_LABEL)

    def pid(self) -> int:
        import os

        return os.getpid()


def start_replicas(
    group: str,
    args: list[ServerArgs],
    replicas: int,
    node_dir: Path,
    *,
    min_copies: int = 2,
    timeout: float = 2.0,
    tick_seconds: float = 1.0,
    cpus: float = 0.0,
    map_store: str | None = None,
) -> list[Any]:
    """The coordinator and every copy of every shard (`args[i]` for shard i); returns their actor handles.
    `map_store`: where the coordinator keeps the map (a `redis://` URL; default the file under `node_dir`)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    labelled = {(n.get("Labels") or {}).get(NODE_LABEL) for n in nodes}
    missing = [node_label(r) for r in range(replicas) if node_label(r) not in labelled]
    if missing:
        raise ClusterIndexError(
            f"{replicas} copies need nodes labelled {NODE_LABEL}=n0…n{replicas - 1}; none is labelled "
            f'{", ".join(missing)} (start each with `ray start --labels \'{{"{NODE_LABEL}": "n0"}}\'`)'
        )
    coordinator = (
        ray.remote(CoordinatorActor)
        .options(
            name=actor_name(group, "coordinator"),
            namespace=NAMESPACE,
            lifetime="detached",
            max_restarts=-1,
            max_concurrency=32,
            num_cpus=0,
            resources={HEAD_RESOURCE: 0.001},  # the head's resource, not its node id: a head started again has it
        )
        .remote(
            group,
            map_store or str(node_dir / "coordinator" / "map.json"),
            f"ssi:shard-map:{node_dir}",
            len(args),
            replicas,
            timeout,
            tick_seconds,
        )
    )
    handles = [coordinator]
    ray.get(coordinator.views.remote())  # the map exists before the first copy says it started
    for r in range(replicas):
        handles.append(
            ray.remote(EventCopyActor)
            .options(
                name=actor_name(group, event_copy_name(node_label(r))),
                namespace=NAMESPACE,
                lifetime="detached",
                max_restarts=-1,
                max_concurrency=8,
                num_cpus=0,
                label_selector={NODE_LABEL: node_label(r)},
            )
            .remote(group, node_label(r), str(node_dir), replicas, timeout)
        )
    for shard_args, r in itertools.product(args, range(replicas)):
        name = replica_name(shard_args.shard, r)
        handles.append(
            ray.remote(ReplicaActor)
            .options(
                name=actor_name(group, name),
                namespace=NAMESPACE,
                lifetime="detached",
                max_restarts=-1,
                max_concurrency=16,
                num_cpus=cpus,
                label_selector={NODE_LABEL: node_label(r)},
            )
            .remote(group, name, node_label(r), shard_args, str(node_dir), min_copies, timeout)
        )
    return handles


def stop_replicas(handles: list[Any]) -> None:
    """Kill the actors of a deployment; those already gone (their cluster shut down) are passed over."""
    for handle in handles:
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 — an actor of a cluster that is no more
            continue


def coordinator_of(group: str) -> Any:
    """The coordinator actor of the replicated deployment `group` (its map: `views`, `describe`)."""
    return ray.get_actor(actor_name(group, "coordinator"), namespace=NAMESPACE)


def running_groups() -> dict[str, int]:
    """The replicated deployments on the cluster this process is connected to: group -> copies (its event copies)."""
    names = [a["name"] for a in list_named_actors(all_namespaces=True) if a.get("namespace") == NAMESPACE]
    groups = {name.removesuffix("-coordinator") for name in names if name.endswith("-coordinator")}
    return {g: sum(1 for name in names if name.startswith(f"{g}-events-")) for g in sorted(groups)}


def event_copy_name(label: str) -> str:
    return f"events-{label}"


class EventPeers(RayPeers):
    """The event copies of `group` (cluster.replication.events.Copies), one per labelled node."""

    def __init__(self, group: str, copies: int, timeout: float) -> None:
        super().__init__(group, timeout)
        self.names = [event_copy_name(node_label(r)) for r in range(copies)]


class EventCopyActor:
    """A node's copy of the router's traffic log (cluster.replication.events.EventCopy); on start it takes in what
    the other copies hold, so a copy on an emptied disk, or one that was down, holds the whole log again."""

    def __init__(self, group: str, label: str, node_dir: str, copies: int, timeout: float) -> None:
        on_node(label)
        self.copy = EventCopy(Path(node_dir) / label / "events" / EVENTS_FILE)
        self.caught_up = threading.Event()
        # In a thread: the other copies may be starting too, and a call to one waits until its start is over.
        peers = [n for n in EventPeers(group, copies, timeout).names if n != event_copy_name(label)]
        threading.Thread(target=self._take_in, args=(EventPeers(group, copies, timeout), peers), daemon=True).start()

    def _take_in(self, peers: EventPeers, names: list[str]) -> None:
        for name in names:
            try:
                self.copy.merge(peers.call(name, "dump"))
            except Exception:  # noqa: BLE001 — a peer not started yet, or down: the others are asked
                continue
        self.caught_up.set()

    def add(self, rows: Rows) -> int:
        return self.copy.add(rows)

    def dump(self) -> bytes:
        return self.copy.dump()

    def clicks(self) -> int:
        return self.copy.clicks()


class NoCopy(Exception):
    """No copy of the shard could answer this time (being replaced, catching up): the router tries again."""


class ReplicatedShards:
    """The router's `Shards` over replicated copies (cluster.fanout), reading the coordinator's map.

    A read that a copy does not answer within `read_timeout` is asked of another in-sync copy (the slow one is
    passed over for `read_timeout` seconds), so a copy on a node that is gone, frozen, or being restarted by Ray
    (a call sent to it meanwhile waits for the restart) costs a search that long once, not the router's whole
    shard timeout. A write is tried again only where nothing was written (the
    copy asked is not the primary, or there is no such copy): a primary lost during a write may have applied it,
    so that answer is a 503 saying so, and the client decides (a put can be sent again as it is)."""

    def __init__(self, group: str, count: int, refresh_seconds: float = 1.0, read_timeout: float = 5.0) -> None:
        self.group = group
        self.count = count
        self.refresh_seconds = refresh_seconds
        self.read_timeout = read_timeout
        self._views: list[ShardView] = []
        self._read_at = 0.0
        self._unanswered = False  # the last read of the map found no coordinator
        self._turn = itertools.count()
        self._slow: dict[str, float] = {}  # copy -> until when reads pass it over
        self._peers = RayPeers(group, timeout=0)

    async def views(self, refresh: bool = False) -> list[ShardView]:
        """The coordinator's map, read again after `refresh_seconds` (or a failure). While the coordinator does not
        answer (the head is away) the last map is kept and read again a `refresh_seconds` later; a map from an
        older coordinator epoch than the one held (two heads overlapping) is refused."""
        since = time.monotonic() - self._read_at
        if self._unanswered and since < self.refresh_seconds and self._views:
            return self._views  # asked less than a refresh ago, in vain: not again for every request
        if refresh or not self._views or since > self.refresh_seconds:
            self._read_at = time.monotonic()
            try:
                coordinator = self._peers.handle("coordinator")
                views = await asyncio.wait_for(coordinator.views.remote(), MAP_READ_TIMEOUT)
            except (TimeoutError, RayActorError, ValueError):
                self._unanswered = True
                if not self._views:
                    raise
                return self._views
            self._unanswered = False
            self._views = list(map_to_keep(self._views, views))
        return self._views

    async def call(self, shard: int, method: str, *args: Any) -> Reply:
        view = (await self.views())[shard]
        if method in WRITES:
            return await self._write(shard, view, method, *args)
        try:
            if method in EVERY_COPY:
                calls = [self._peers.handle(name).call.remote(method, *args) for name in view.in_sync]
                replies = await asyncio.gather(*calls)
                return next((r for r in replies if r.status != 200), replies[0])
            return await self._read(view, method, *args)
        except (RayActorError, ValueError, NoCopy, TimeoutError):
            await self.views(refresh=True)
            raise NoCopy(f"shard {shard}: no copy answered {method}") from None

    async def _read(self, view: ShardView, method: str, *args: Any) -> Reply:
        now = time.monotonic()
        ready = [name for name in view.in_sync if self._slow.get(name, 0.0) <= now] or list(view.in_sync)
        name = ready[next(self._turn) % len(ready)]
        try:
            reply = await asyncio.wait_for(self._peers.handle(name).call.remote(method, *args), self.read_timeout)
        except (TimeoutError, RayActorError):
            self._slow[name] = time.monotonic() + self.read_timeout
            raise
        if reply.status == 503 and "catching up" in reply.message:
            raise NoCopy(reply.message)
        return reply

    async def _write(self, shard: int, view: ShardView, method: str, *args: Any) -> Reply:
        try:
            handle = self._peers.handle(view.primary)
        except ValueError:  # no such copy (yet): nothing was sent
            await self.views(refresh=True)
            raise NoCopy(f"shard {shard}: its primary {view.primary} is not reachable") from None
        try:
            reply = await getattr(handle, method).remote(*args)
        except RayActorError:
            await self.views(refresh=True)
            raise Unavailable(
                f"shard {shard}: its primary was lost during the write, which may or may not have been applied: "
                "send it again (a put is idempotent; a delete answers 404 if it had been)",
                headers={"Retry-After": "2"},
            ) from None
        if reply.status == 503 and NOT_PRIMARY in reply.message:  # nothing was written: ask the new primary
            await self.views(refresh=True)
            raise NoCopy(reply.message)
        return reply
