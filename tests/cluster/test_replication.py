"""Replicated shards, the protocol on real copies in one process (cluster.replication): three copies of one shard,
each a ShardServer over its own folder ("its node's disk"), the coordinator's rounds run step by step, and a copy
made unreachable (dead, or frozen past the failure timeout) by the in-process transport."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.index_job import build_index
from cluster.replication.coordinator import Coordinator
from cluster.replication.local import LocalPeers
from cluster.replication.replica import Replica, ServerArgs
from cluster.replication.shard_map import ShardMap
from tests.service.service_testing import needle_of

COPIES = 3


class Shard:
    """One shard's three copies, their map and coordinator, under `root` (node-i/ stands for node i's disk)."""

    def __init__(self, index: Path, root: Path) -> None:
        self.root = root
        self.args = ServerArgs(str(index), 0)
        self.map = ShardMap(root / "coordinator" / "map.json", shards=1, replicas=COPIES)
        self.peers = LocalPeers()
        self.coordinator = Coordinator(self.map, self.peers)
        for name in self.map.view(0).replicas:
            self.start(name)

    def home(self, name: str) -> Path:
        return self.root / f"node-{name[-1]}" / name

    def start(self, name: str, seed: bool = True) -> Replica:
        """Start (or restart) copy `name` on its node, as its actor's start does on a cluster."""
        view = self.map.started(0, name)
        replica = Replica(name, self.args, self.home(name), self.peers, self.map, view, seed=seed)
        return self.peers.add(replica)

    def kill(self, name: str) -> None:
        self.peers.down.add(name)
        self.peers.replicas.pop(name).close()

    def primary(self) -> Replica:
        return self.peers.replicas[self.map.view(0).primary]

    def put(
        self, doc_id: str, text: str, fields: dict[str, Any] | None = None, types: dict[str, str] | None = None
    ) -> int:
        """Write through the primary; `fields` with the cluster's `types` of their names, as the router sends them."""
        replica = self.primary()
        reply = replica.put([{"id": doc_id, "title": doc_id, "text": text, "fields": fields}], types)
        assert reply.status == 200, reply.message
        return int(reply.value[0])

    def close(self) -> None:
        for replica in self.peers.replicas.values():
            replica.close()


def documents(replica: Replica) -> dict[str, tuple[int, str, str, Any]]:
    """Every document a copy's store holds, with its write sequence number and fields, and the store's field types
    (under the key "")."""
    store = replica.serving().collection.store
    assert store is not None
    with store.view() as view:
        held: dict[str, Any] = {
            d.id: (d.seq, d.title, d.text, d.fields) for batch in view.iter_batches(500) for d in batch
        }
        held[""] = view.field_types()
    return held


def ranking(replica: Replica, query: str) -> list[str]:
    reply = replica.call("search", [query], 10)
    assert reply.status == 200, reply.message
    return [hit["id"] for hit in reply.value.results[0]["hits"]]


def assert_copies_agree(shard: Shard, query: str) -> dict[str, Any]:
    held = {name: documents(r) for name, r in shard.peers.replicas.items() if name not in shard.peers.down}
    first = next(iter(held.values()))
    assert all(docs == first for docs in held.values()), "the copies hold different documents"
    rankings = {name: ranking(shard.peers.replicas[name], query) for name in held}
    assert len({tuple(r) for r in rankings.values()}) == 1, rankings
    return first


@pytest.fixture(scope="module")
def index(world: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replicated") / "index"
    build_index(world["corpus"], world["bundle"], out, 1, batch_size=64)
    return out


@pytest.fixture
def shard(index: Path, tmp_path: Path) -> Iterator[Shard]:
    s = Shard(index, tmp_path)
    yield s
    s.close()


def test_an_acknowledged_write_is_on_every_copy_under_the_same_sequence_number(world: dict, shard: Shard) -> None:
    needle = needle_of(world["docs"][0])
    seq = shard.put("new-1", f"{needle} fresh words", {"color": "c03", "day": "2024-06-01"}, {"color": "keyword"})
    deleted = world["docs"][5].id
    reply = shard.primary().delete(deleted)
    assert reply.status == 200, reply.message
    held = assert_copies_agree(shard, needle)
    assert held["new-1"][0] == seq and deleted not in held
    assert held["new-1"][3] == {"color": "c03", "day": "2024-06-01"} and held[""]["day"] == "date"
    assert ranking(shard.peers.replicas["shard-0000-r2"], needle)[0] == "new-1"
    # a write sent to a backup is not taken there: only the primary numbers writes
    refused = shard.peers.replicas["shard-0000-r1"].put([{"id": "x", "title": "x", "text": "x"}])
    assert refused.status == 503 and "not the primary" in refused.message


def test_a_frozen_primary_that_wakes_after_being_replaced_acknowledges_no_write(world: dict, shard: Shard) -> None:
    old = shard.primary()
    shard.put("before", "written before the freeze")
    shard.peers.down.add(old.name)  # frozen: it answers nobody within the failure timeout
    report = shard.coordinator.tick()
    view = shard.map.view(0)
    assert report.promoted == {0: view.primary} and view.primary != old.name and view.term == 2
    # the third copy was at the new primary's last write: it stayed in sync
    assert old.name not in view.in_sync and len(view.in_sync) == COPIES - 1
    shard.put("after", "written to the new primary")

    shard.peers.down.discard(old.name)  # it wakes up still believing it is the primary of term 1
    folder = old.serving().folder
    late = old.put([{"id": "late", "title": "late", "text": "sent to the frozen primary"}])
    assert late.status == 503 and "not acknowledged" in late.message
    assert all("late" not in documents(shard.peers.replicas[n]) for n in view.in_sync)

    shard.coordinator.tick()  # it rejoins: its history diverged at its last write, so it takes a whole copy
    assert set(shard.map.view(0).in_sync) == set(view.replicas)
    held = assert_copies_agree(shard, "written")
    assert "late" not in held and {"before", "after"} <= set(held)
    assert old.term == 2 and old.serving().folder != folder and not folder.exists()


def test_a_copy_whose_folder_was_deleted_comes_back_catches_up_and_serves(world: dict, shard: Shard) -> None:
    lost = "shard-0000-r2"
    shard.kill(lost)
    shard.coordinator.tick()
    assert lost not in shard.map.view(0).in_sync
    needle = needle_of(world["docs"][7])
    for i in range(3):  # two copies of three are in sync: writes go on
        shard.put(f"while-down-{i}", f"{needle} {i}", {"color": f"c{i}", "n": i})
    shutil.rmtree(shard.home(lost).parent)  # the node's disk is gone
    back = shard.start(lost, seed=False)  # and the node cannot read the built index either
    assert back.call("search", ["anything"], 10).status == 503  # holds nothing: does not serve
    shard.coordinator.tick()
    assert lost in shard.map.view(0).in_sync
    held = assert_copies_agree(shard, needle)  # the whole copy carries the documents' fields and their types
    assert {f"while-down-{i}" for i in range(3)} <= set(held) and held["while-down-2"][3] == {"color": "c2", "n": 2}
    assert ranking(back, needle)[:3] == ranking(shard.primary(), needle)[:3]


def test_a_copy_that_fell_behind_catches_up_from_the_write_log_without_a_whole_copy(shard: Shard) -> None:
    behind = shard.peers.replicas["shard-0000-r1"]
    folder = behind.serving().folder
    shard.peers.down.add(behind.name)
    shard.coordinator.tick()
    shard.put("missed-1", "a write it missed")
    shard.primary().delete("missed-1")
    # a keyword field whose first value here looks like a date: the catch-up carries its type (Changes.types)
    shard.put("missed-2", "another write it missed", {"sku": "2024-05-01", "tags": ["a", "b"]}, {"sku": "keyword"})
    shard.peers.down.discard(behind.name)
    report = shard.coordinator.tick()
    assert report.recovered == {0: [behind.name]}
    assert behind.serving().folder == folder  # the same folder: the writes after its last one, not a copy
    held = assert_copies_agree(shard, "missed")  # fields and field types equal on every copy
    assert "missed-1" not in held and held["missed-2"][3] == {"sku": "2024-05-01", "tags": ["a", "b"]}
    assert held[""]["sku"] == "keyword" and held[""]["tags"] == "keyword_list"


def test_a_copy_the_primary_did_not_send_a_write_to_leaves_the_in_sync_set_before_the_acknowledgement(
    shard: Shard,
) -> None:
    """The map, not the primary's belief, decides who is in sync: a primary whose view misses a copy the map lists
    (a view told to it before the copy rejoined) cannot acknowledge with that copy left in sync without the write."""
    from dataclasses import replace

    primary = shard.primary()
    left_out = "shard-0000-r2"
    primary.view = replace(primary.view, in_sync=tuple(n for n in primary.view.in_sync if n != left_out))
    seq = shard.put("unsent", "the third copy never got this write")
    view = shard.map.view(0)
    assert left_out not in view.in_sync and "unsent" not in documents(shard.peers.replicas[left_out])
    assert all(documents(shard.peers.replicas[n])["unsent"][0] == seq for n in view.in_sync)
    copy = shard.peers.replicas[left_out]
    copy.assign(view)
    copy.assign(replace(view, version=view.version - 1, in_sync=view.replicas))  # an older view arriving late
    assert copy.view == view
    shard.coordinator.tick()
    assert left_out in shard.map.view(0).in_sync and "unsent" in assert_copies_agree(shard, "third")


def test_a_copy_that_missed_a_reload_serves_the_new_bundle_before_it_rejoins(
    world: dict, shard: Shard, tmp_path: Path
) -> None:
    from tests.service.service_testing import make_bundle

    newer = make_bundle(tmp_path / "bundles" / "newer", world["docs"], n_dims=24, seed=9)
    away = "shard-0000-r2"
    shard.peers.down.add(away)
    shard.coordinator.tick()
    in_sync = shard.map.view(0).in_sync
    prepared = {name: shard.peers.replicas[name].call("prepare_reload", str(newer)) for name in in_sync}
    assert all(reply.status == 200 for reply in prepared.values())  # what the router asks of every in-sync copy
    content_hash = next(iter(prepared.values())).value["content_hash"]
    assert all(shard.peers.replicas[n].call("commit_reload", content_hash).status == 200 for n in in_sync)
    shard.peers.down.discard(away)
    shard.coordinator.tick()
    assert away in shard.map.view(0).in_sync
    hashes = {n: r.serving().collection.ready_state().bundle.content_hash for n, r in shard.peers.replicas.items()}
    assert len(set(hashes.values())) == 1 and shard.peers.replicas[away].position().bundle_hash == hashes[away]


def test_without_enough_copies_in_sync_a_write_is_refused_not_acknowledged_alone(shard: Shard) -> None:
    for name in ("shard-0000-r1", "shard-0000-r2"):
        shard.peers.down.add(name)
    reply = shard.primary().put([{"id": "alone", "title": "alone", "text": "only one copy would hold it"}])
    assert reply.status == 503 and "copies" in reply.message
    assert shard.map.view(0).in_sync == ("shard-0000-r0",)
    for name in ("shard-0000-r1", "shard-0000-r2"):
        shard.peers.down.discard(name)
    shard.coordinator.tick()
    shard.put("together", "three copies again")
    assert "together" in assert_copies_agree(shard, "copies")


def test_the_map_keeps_terms_across_a_coordinator_restart_and_refuses_a_replaced_primary(tmp_path: Path) -> None:
    from dataclasses import replace

    first = ShardMap(tmp_path / "map.json", shards=2, replicas=3)
    view = first.fail(1, "shard-0001-r0", {"shard-0001-r1": (0, 5), "shard-0001-r2": (0, 9)})
    assert (view.term, view.primary, view.in_sync) == (2, "shard-0001-r2", ("shard-0001-r2",))
    level = first.fail(0, "shard-0000-r0", {"shard-0000-r1": (1, 7), "shard-0000-r2": (1, 7)})
    assert level.term == 2 and set(level.in_sync) == {"shard-0000-r1", "shard-0000-r2"}
    again = ShardMap(tmp_path / "map.json", shards=2, replicas=3)
    assert again.view(1) == replace(view, epoch=again.epoch) and again.view(0) == replace(level, epoch=again.epoch)
    with pytest.raises(Exception, match="term 2"):
        again.commit(1, 1, "shard-0001-r0", [])
    with pytest.raises(ValueError, match="remove it"):
        ShardMap(tmp_path / "map.json", shards=3, replicas=3)


def test_a_second_coordinator_fences_the_first_its_views_and_confirmations_refused(shard: Shard) -> None:
    """Two heads overlapping: a coordinator started over the same map (a new epoch) while the first still runs."""
    from cluster.replication.map_store import StaleEpoch

    first = shard.map
    shard.put("before", "written under the first coordinator")
    second = ShardMap(shard.root / "coordinator" / "map.json", shards=1, replicas=COPIES)
    Coordinator(second, shard.peers).tick()  # it reconciles and tells every copy its epoch's view
    assert {r.view.epoch for r in shard.peers.replicas.values()} == {second.epoch}
    with pytest.raises(StaleEpoch):
        shard.peers.replicas["shard-0000-r1"].assign(first.view(0))
    late = shard.primary().put([{"id": "late", "title": "late", "text": "confirmed by the first coordinator"}])
    assert late.status == 503  # the first one can no longer confirm a term: not acknowledged
    for replica in shard.peers.replicas.values():
        replica.coordinator = second
    shard.map = second
    shard.put("after", "written under the second coordinator")
    assert {"before", "after"} <= set(assert_copies_agree(shard, "written"))


class EventNodes:
    """Event copies in this process, by name; a name in `down` does not answer."""

    def __init__(self, root: Path, names: list[str]) -> None:
        from cluster.replication.events import EventCopy

        self.names = names
        self.copies = {name: EventCopy(root / name / "events.sqlite") for name in names}
        self.down: set[str] = set()

    def call(self, name: str, method: str, *args: object) -> object:
        if name in self.down:
            raise ConnectionError(f"{name} is down")
        return getattr(self.copies[name], method)(*args)


def test_a_click_is_acknowledged_on_enough_nodes_and_the_log_is_their_union(tmp_path: Path) -> None:
    """The router's log shipped to event copies (cluster.replication.events): a click is acknowledged once two copies
    hold it with its impression; with two of three down it is refused; the union of the copies left holds every
    acknowledged click, and a copy that was down takes in the others' records."""
    from cluster.replication.events import ShippedTraffic, export
    from service.errors import Unavailable
    from service.events.traffic import Traffic
    from service.settings import Settings
    from ssi.traffic import read_events

    nodes = EventNodes(tmp_path / "nodes", ["events-n0", "events-n1", "events-n2"])
    local = Traffic(Settings(data_dir=tmp_path / "router", collection="documents", events_explore=0.0))
    traffic = ShippedTraffic(local, "documents", nodes, min_copies=2)
    try:
        acknowledged = []
        for i in range(6):
            impression, _ = traffic.show("documents", "m", "search", f"query {i}", ["a", "b", "c"], str)
            assert impression is not None
            if i == 3:
                nodes.down.add("events-n2")
            traffic.click("documents", impression, "b", 120.0)
            acknowledged.append((impression, "b"))
        nodes.down.add("events-n1")
        impression, _ = traffic.show("documents", "m", "search", "refused", ["a"], str)
        with pytest.raises(Unavailable, match="1 of the 2"):
            traffic.click("documents", impression, "a", None)
        nodes.down = {"events-n0"}  # the first node lost: the two others hold every acknowledged click
        read = export(nodes, tmp_path / "cluster.sqlite")
        assert read["copies_read"] == ["events-n1", "events-n2"]
        found = {(r.impression, r.doc) for r in read_events(tmp_path / "cluster.sqlite") if r.clicked}
        assert set(acknowledged) <= found
        nodes.copies["events-n2"].merge(nodes.copies["events-n1"].dump())  # a copy that was down catches up
        assert nodes.copies["events-n2"].clicks() >= len(acknowledged)
        with pytest.raises(FileExistsError):
            export(nodes, tmp_path / "cluster.sqlite")
    finally:
        traffic.close()


def test_an_adverts_shard_matches_alike_on_every_replica_after_a_whole_copy(world: dict, tmp_path: Path) -> None:
    """/match on replicas: a replica on a wiped disk gets the adverts' metadata (fields of their documents) in its
    whole copy, so every replica admits and ranks the same adverts for a filtered page."""
    from service.adverts import AdFilter, match_filter
    from tests.cluster.test_cluster_match import meta_of, write_adverts
    from tests.service.service_testing import probe_queries

    corpus = write_adverts(tmp_path / "adverts.jsonl", world["docs"])
    index = tmp_path / "ads-index"
    build_index(corpus, world["bundle"], index, 1, batch_size=64, collection_type="adverts")
    shard = Shard(index, tmp_path / "nodes")
    try:
        wiped = "shard-0000-r2"
        shard.kill(wiped)
        shutil.rmtree(shard.home(wiped).parent)
        shard.start(wiped, seed=False)
        shard.coordinator.tick()
        assert wiped in shard.map.view(0).in_sync
        category = {doc.id: meta_of(i).get("category") for i, doc in enumerate(world["docs"])}
        pages = probe_queries(world["docs"], 3, seed=41)
        answers = {}
        for name, replica in shard.peers.replicas.items():
            reply = replica.call("match", pages, 5, match_filter(AdFilter(category=["cat1"])))
            assert reply.status == 200, reply.message
            answers[name] = [[ad["id"] for ad in result["ads"]] for result in reply.value.results]
        assert len({str(a) for a in answers.values()}) == 1, answers
        matched = [ad for page in answers[wiped] for ad in page]
        assert matched and all(category[ad] == "cat1" for ad in matched)
    finally:
        shard.close()
