"""The coordinator's shard map in its two stores (cluster.replication.map_file, map_redis): epochs that fence an
older coordinator, a map that survives its coordinator and (Redis) a kill -9 of Redis, a map behind the copies
moved past their terms."""

from __future__ import annotations

import uuid
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

    with pytest.raises(ClusterIndexError, match="must be a redis:// URL"):
        check_map_store("/var/lib/ssi/map.json")
    with pytest.raises(ClusterIndexError, match="did not answer"):
        check_map_store(f"redis://127.0.0.1:{free_port()}/0")
    check_map_store(redis_server.url)
