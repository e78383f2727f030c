"""The coordinator's shard map in its two stores (cluster.replication.map_file, map_redis): epochs that fence an
older coordinator, a map that survives its coordinator and (Redis) a kill -9 of Redis, a map behind the copies
moved past their terms."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cluster.replication.map_store import MapStore, StaleEpoch, StoreUnavailable
from cluster.replication.shard_map import ShardMap


@pytest.fixture(params=["file", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> MapStore:
    """A fresh store of each kind (the Redis one under a key of its own on the module's server)."""
    from cluster.replication.map_store import open_store

    if request.param == "file":
        return open_store(tmp_path / "coordinator" / "map.json")
    server = request.getfixturevalue("redis_server")
    return open_store(server.url, key=f"test-{uuid.uuid4().hex[:8]}")


def test_a_newer_coordinator_fences_the_older_one_and_keeps_its_terms(store: MapStore) -> None:
    first = ShardMap(store, shards=2, replicas=3)
    promoted = first.fail(1, "shard-0001-r0", {"shard-0001-r1": (1, 4), "shard-0001-r2": (1, 9)})
    assert (promoted.term, promoted.primary, promoted.epoch) == (2, "shard-0001-r2", first.epoch)

    second = ShardMap(store, shards=2, replicas=3)  # a head started again while the first one still runs
    assert second.epoch == first.epoch + 1
    assert (second.view(1).term, second.view(1).primary, second.view(1).version) == (2, "shard-0001-r2", 1)
    assert second.view(1).newer_than(promoted) and second.view(1).epoch == second.epoch

    # the older coordinator changes nothing, and confirms no write: not even one that would change nothing
    with pytest.raises(StaleEpoch):
        first.fail(0, "shard-0000-r0", {"shard-0000-r1": (1, 3)})
    assert first.view(0).term == 1  # its refused change is not kept in its memory either
    with pytest.raises(StaleEpoch):
        first.commit(1, 2, "shard-0001-r2", [])
    assert second.commit(1, 2, "shard-0001-r2", []).term == 2
    assert ShardMap(store, shards=2, replicas=3).view(0).term == 1


def test_a_router_keeps_the_newer_coordinators_map_over_the_older_ones(store: MapStore) -> None:
    from cluster.replication.shard_map import map_to_keep

    older = ShardMap(store, shards=2, replicas=3)
    older.fail(0, "shard-0000-r0", {"shard-0000-r1": (1, 2)})
    newer = ShardMap(store, shards=2, replicas=3)  # a head started again while the old one still answers
    assert map_to_keep([], older.views) == older.views  # a router's first map: whatever answers
    assert map_to_keep(older.views, newer.views) == newer.views
    # the older head's map, read after the newer one's, is refused, even where its views are further along
    further = [replace(view, term=view.term + 5, version=99) for view in older.views]
    assert map_to_keep(newer.views, further) == newer.views


def test_a_map_behind_the_copies_is_moved_past_every_term_they_have_seen(store: MapStore) -> None:
    shard_map = ShardMap(store, shards=1, replicas=3)
    seen = {"shard-0000-r0": 3, "shard-0000-r1": 4, "shard-0000-r2": 4}
    ranks = {"shard-0000-r0": (3, 10), "shard-0000-r1": (4, 12), "shard-0000-r2": (4, 12)}
    view = shard_map.reconcile(0, seen, ranks)
    assert (view.term, view.primary, view.in_sync) == (5, "shard-0000-r1", ("shard-0000-r1", "shard-0000-r2"))
    assert shard_map.reconcile(0, seen, ranks) == view  # a map at or past every term is left as it is


def test_the_redis_map_survives_a_kill_of_redis_and_writes_wait_for_it(redis_server: Any) -> None:
    from cluster.replication.map_store import open_store

    key = f"test-{uuid.uuid4().hex[:8]}"
    shard_map = ShardMap(open_store(redis_server.url, key=key), shards=1, replicas=3)
    view = shard_map.fail(0, "shard-0000-r0", {"shard-0000-r1": (1, 7), "shard-0000-r2": (1, 7)})
    redis_server.kill()  # SIGKILL: only what the append-only file holds (fsynced before each answer) survives
    try:
        with pytest.raises(StoreUnavailable):  # a primary's write is not confirmed while the map cannot be read
            shard_map.commit(0, view.term, view.primary, ["shard-0000-r2"])
        with pytest.raises(StoreUnavailable):  # and no copy leaves the in-sync set (nor is promoted) without it
            shard_map.fail(0, "shard-0000-r2")
        assert shard_map.view(0) == view
    finally:
        redis_server.start()
    assert shard_map.commit(0, view.term, view.primary, ["shard-0000-r2"]) == view  # the client connects again
    again = ShardMap(open_store(redis_server.url, key=key), shards=1, replicas=3)
    assert (again.view(0).term, again.view(0).primary, again.view(0).in_sync) == (2, "shard-0000-r1", view.in_sync)


def test_a_map_store_that_is_not_a_reachable_redis_is_refused_before_anything_starts(redis_server: Any) -> None:
    pytest.importorskip("ray", reason="needs the cluster extra: pip install -e .[cluster]")
    from cluster.deploy import check_map_store
    from cluster.manifest import ClusterIndexError
    from service.bench.server import free_port

    with pytest.raises(ClusterIndexError, match="must be a redis:// or redis"):
        check_map_store("/var/lib/ssi/map.json")
    with pytest.raises(ClusterIndexError, match="did not answer"):
        check_map_store(f"redis://127.0.0.1:{free_port()}/0")
    check_map_store(redis_server.url)


def _until(what: str, ready: Any, seconds: float = 30.0) -> Any:
    """`ready()`'s first answer that is not None (StoreUnavailable counts as not yet), within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            answer = ready()
        except StoreUnavailable:
            answer = None
        if answer is not None:
            return answer
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


def test_behind_sentinel_the_map_outlives_its_primary_and_only_a_primary_with_a_replica_decides(
    tmp_path: Path,
) -> None:
    pytest.importorskip("redis", reason="needs the cluster extra: pip install -e .[cluster]")
    from cluster.redis_server import RedisServer, Sentinel
    from cluster.replication.map_store import open_store

    try:
        primary = RedisServer(tmp_path / "primary")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    replica = RedisServer(tmp_path / "replica", replica_of=primary.address)
    sentinel = Sentinel(tmp_path / "sentinel", primary.address, "ssi-map", down_after_ms=500)
    url = f"redis+sentinel://{sentinel.address}/ssi-map/0?replicas=1"
    try:
        _until("the replica in step", lambda: open_store(url).claim())  # WAIT answers once the replica is linked
        shard_map = ShardMap(open_store(url, key="m"), shards=1, replicas=3)
        view = shard_map.fail(0, "shard-0000-r0", {"shard-0000-r1": (1, 7), "shard-0000-r2": (1, 7)})
        primary.kill()  # the replica holds every change the store counted: WAIT saw it there
        assert _until("Sentinel's failover", lambda: sentinel.primary() == replica.address or None)

        # The new primary has no replica yet: it confirms nothing and changes nothing (nor would the old one, had it
        # lived on cut off from the others); the coordinator keeps its view. (Sentinel's clients may first not find a
        # primary at all for a moment: refused too.)
        def refused_for_want_of_a_replica() -> str | None:
            try:
                shard_map.commit(0, view.term, view.primary, ["shard-0000-r2"])
            except StoreUnavailable as exc:
                return exc.message if "0 of 1 replicas acknowledged" in exc.message else None
            raise AssertionError("a write confirmed by a primary without a replica")

        assert _until("the new primary found", refused_for_want_of_a_replica)
        with pytest.raises(StoreUnavailable, match="0 of 1 replicas"):
            shard_map.fail(0, "shard-0000-r2")
        assert shard_map.view(0) == view

        primary.replica_of = replica.address  # the old primary's machine comes back, as the new primary's replica
        primary.start()
        # The refused change reached the new primary, not a replica: the coordinator takes the map the store holds
        # as its own (r2 out of the in-sync set, its last decision) once a replica holds it, before confirming more.
        confirmed = _until("a replica again", lambda: shard_map.commit(0, view.term, view.primary, []))
        assert (confirmed.term, confirmed.primary, confirmed.in_sync) == (2, "shard-0000-r1", ("shard-0000-r1",))
        assert shard_map.view(0) == confirmed
        again = ShardMap(open_store(url, key="m"), shards=1, replicas=3)  # a head started again, through Sentinel
        assert again.epoch == shard_map.epoch + 1
        assert (again.view(0).term, again.view(0).in_sync, again.view(0).version) == (
            2,
            confirmed.in_sync,
            confirmed.version,
        )
    finally:
        for server in (sentinel, replica, primary):
            server.stop()


def test_a_map_store_url_is_read_or_refused_with_its_reason() -> None:
    pytest.importorskip("redis", reason="needs the cluster extra: pip install -e .[cluster]")
    from cluster.replication.map_redis import RedisAddress
    from cluster.replication.map_store import is_redis_url

    address = RedisAddress.parse("redis+sentinel://10.0.0.1:26379,10.0.0.2:26380/ssi-map/3?replicas=2")
    assert (address.sentinels, address.name, address.db, address.replicas) == (
        (("10.0.0.1", 26379), ("10.0.0.2", 26380)),
        "ssi-map",
        3,
        2,
    )
    assert RedisAddress.parse("redis://h:6379/0?replicas=1") == RedisAddress("redis://h:6379/0", replicas=1)
    assert RedisAddress.parse("redis://h:6379/0").replicas == 0
    for bad, reason in [
        ("redis+sentinel://h:26379", "NAME"),
        ("redis+sentinel://h/ssi-map", "HOST:PORT"),
        ("redis://h:6379/0?replicas=two", "whole number"),
        ("http://h:6379", "not a Redis URL"),
    ]:
        with pytest.raises(ValueError, match=reason):
            RedisAddress.parse(bad)
    assert is_redis_url("redis+sentinel://h:1/m") and not is_redis_url("/var/lib/ssi/redis://map.json")
