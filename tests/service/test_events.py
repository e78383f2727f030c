"""The traffic log: impressions named by every ranking answer, clicks reported against them, kept within bounds,
read back by the trainer's reader (ssi.traffic) exactly as shown."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import time
from pathlib import Path

import pytest
from service_testing import Oracle, ThreadServer, assert_same_ranking

from service.events.store import EventStore, issued_at, new_impression_id
from service.events.traffic import filter_shown
from service.fields.visibility import Visibility, read_key_id
from service.settings import CollectionSpec
from ssi.traffic import EVENTS_FILE, canonical_filter, export_events, read_events


@pytest.fixture(scope="module")
def server(small_world: dict, tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("cache")
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=cache) as s:
        yield s


def events_path(server: ThreadServer, collection: str = "documents") -> Path:
    """The collection's event store, with what the writer thread has queued committed (it commits every 0.1 s)."""
    server.app.state.traffic.flush()
    return server.settings.store_dir / collection / EVENTS_FILE


def test_a_search_names_its_impression_and_a_click_on_it_is_logged_once(
    server: ThreadServer, small_world: dict
) -> None:
    query = small_world["docs"][20].title
    answer = server.client.post("/search", json={"query": query, "k": 5}).json()
    impression, ids = answer["impression"], [h["id"] for h in answer["hits"]]
    assert impression and len(ids) == 5
    first = server.client.post("/clicks", json={"impression": impression, "id": ids[2]})
    assert first.status_code == 200, first.text
    assert first.json() == {"recorded": True, "position": 3}
    again = server.client.post("/clicks", json={"impression": impression, "id": ids[2], "dwell_ms": 1500})
    assert again.json() == {"recorded": False, "position": 3}  # counted once; the dwell time fills in
    lines = [r for r in read_events(events_path(server)) if r.impression == impression]
    assert [r.doc for r in lines] == ids
    assert [r.position for r in lines] == [1, 2, 3, 4, 5]
    assert [r.clicked for r in lines] == [False, False, True, False, False]
    assert lines[2].dwell_ms == 1500 and lines[0].text == query and lines[0].kind == "search"


def test_a_click_must_name_a_recent_impression_and_a_result_it_showed(server: ThreadServer, small_world: dict) -> None:
    answer = server.client.post("/search", json={"query": small_world["docs"][21].title, "k": 3}).json()
    unknown = server.client.post("/clicks", json={"impression": new_impression_id(time.time() - 60), "id": "x"})
    assert unknown.status_code == 404 and "impression" in unknown.json()["detail"]
    garbage = server.client.post("/clicks", json={"impression": "not-an-id", "id": "x"})
    assert garbage.status_code == 404
    not_shown = server.client.post("/clicks", json={"impression": answer["impression"], "id": "no-such-doc"})
    assert not_shown.status_code == 404 and "not shown" in not_shown.json()["detail"]
    for bad in ({}, {"impression": answer["impression"]}, {"impression": "", "id": "x"}, {"impression": 3, "id": "x"}):
        assert server.client.post("/clicks", json=bad).status_code == 422
    negative = server.client.post("/clicks", json={"impression": answer["impression"], "id": "x", "dwell_ms": -1})
    assert negative.status_code == 422


def test_paged_and_batched_answers_log_their_positions(server: ThreadServer, small_world: dict) -> None:
    titles = [d.title for d in small_world["docs"][22:25]]
    page = server.client.post("/search", json={"query": titles[0], "k": 3, "offset": 3}).json()
    click = server.client.post("/clicks", json={"impression": page["impression"], "id": page["hits"][0]["id"]})
    assert click.json()["position"] == 4  # the first hit of the second page of three
    batch = server.client.post("/search/batch", json={"queries": titles[1:], "k": 2}).json()
    impressions = [r["impression"] for r in batch["results"]]
    assert len(set(impressions)) == 2 and all(impressions)
    logged = {r.impression: r.text for r in read_events(events_path(server))}
    assert logged[impressions[0]] == titles[1] and logged[impressions[1]] == titles[2]


def test_answers_stay_exact_with_recording_on(server: ThreadServer, small_world: dict) -> None:
    oracle: Oracle = small_world["oracle"]
    for doc in small_world["docs"][:10]:
        hits = server.client.post("/search", json={"query": doc.title, "k": 10}).json()["hits"]
        assert_same_ranking(hits, oracle, doc.title, 10)


def test_a_collection_can_stay_out_of_the_log_while_another_feeds_it(small_world: dict, tmp_path: Path) -> None:
    quiet = CollectionSpec(bundle=small_world["bundle"], corpus=small_world["corpus"], events=False)
    with ThreadServer(
        bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path, collections={"quiet": quiet}
    ) as s:
        query = small_world["docs"][25].title
        logged = s.client.post("/search", json={"query": query, "k": 3}).json()
        unlogged = s.client.post("/collections/quiet/search", json={"query": query, "k": 3}).json()
        assert logged["impression"] and unlogged["impression"] is None
        assert [h["id"] for h in unlogged["hits"]] == [h["id"] for h in logged["hits"]]
        refused = s.client.post("/collections/quiet/clicks", json={"impression": logged["impression"], "id": "x"})
        assert refused.status_code == 403 and "'quiet' records no traffic" in refused.json()["detail"]
        s.app.state.traffic.flush()
        assert (s.settings.store_dir / "documents" / EVENTS_FILE).exists()
        assert not (s.settings.store_dir / "quiet" / EVENTS_FILE).exists()


def test_explore_shuffles_the_top_of_a_share_of_answers_and_marks_them(small_world: dict, tmp_path: Path) -> None:
    settings = dict(events_explore=1.0, events_explore_depth=4)
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path, **settings) as s:
        oracle: Oracle = small_world["oracle"]
        orders = set()
        query = small_world["docs"][30].text[:60]
        for _ in range(12):
            answer = s.client.post("/search", json={"query": query, "k": 6}).json()
            ids = [h["id"] for h in answer["hits"]]
            exact, _ = oracle.top(query, 6)
            assert len(exact) == 6
            assert sorted(ids[:4]) == sorted(exact[:4]) and ids[4:] == exact[4:]
            orders.add(tuple(ids[:4]))
        assert len(orders) > 1
        store_file = s.settings.store_dir / "documents" / EVENTS_FILE
    rows = list(read_events(store_file))
    assert rows and all(r.randomized for r in rows)


def test_a_seeded_service_shuffles_the_same_answers_the_same_way(small_world: dict, tmp_path: Path) -> None:
    """SSI_RANDOM_SEED: the same requests in the same order get the same shuffles (a simulation can be repeated);
    another seed, other ones."""
    query = small_world["docs"][30].text[:60]

    def orders(seed: int, run: str) -> list[tuple[str, ...]]:
        settings = dict(events_explore=0.5, events_explore_depth=4, random_seed=seed, cache_dir=tmp_path / run)
        with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], **settings) as s:
            answers = [s.client.post("/search", json={"query": query, "k": 6}).json() for _ in range(16)]
        return [tuple(h["id"] for h in answer["hits"]) for answer in answers]

    first = orders(7, "a")
    assert len(set(first)) > 1  # some answers shuffled, some not, at a share of 0.5
    assert orders(7, "b") == first
    assert orders(8, "c") != first


def test_hashed_text_keeps_no_query_and_none_keeps_nothing(tmp_path: Path) -> None:
    for mode in ("hash", "none"):
        store = EventStore(tmp_path / mode, text_mode=mode, max_age=3600, max_bytes=1 << 30, start_writer=False)
        store.record("search", "secret disease name", "m", ["a", "b"], 1, False)
        store.record("search", "secret disease name", "m", ["a"], 1, False)
        store.flush()
        rows = list(read_events(store.path))
        assert all(r.text is None for r in rows)
        hashes = {r.text_hash for r in rows}
        assert (hashes == {None}) if mode == "none" else (len(hashes) == 1 and None not in hashes)
        raw = store.path.read_bytes() + (store.path.with_name(EVENTS_FILE + "-wal").read_bytes())
        assert b"secret disease" not in raw
        store.close()


def test_age_and_size_bounds_keep_the_newest(tmp_path: Path) -> None:
    store = EventStore(tmp_path, text_mode="plain", max_age=100.0, max_bytes=400_000, start_writer=False)
    ids = [
        store.record("search", f"query number {i} " * 5, "m", [f"d{j}" for j in range(10)], 1, False)
        for i in range(3000)
    ]
    store.flush()
    assert ids[-1] is not None
    store.click(ids[-1], "d3", None)
    old = store.record("search", "old", "m", ["d1"], 1, False)
    store.flush()
    store._writer.execute("UPDATE impressions SET at = at - 1000 WHERE id = ?", (old,))
    deleted = store.prune()
    assert deleted > 1
    assert store.used_bytes() <= 400_000 and store.file_bytes() <= 2 * 400_000
    left = {r.impression for r in read_events(store.path)}
    assert old not in left and ids[-1] in left and ids[0] not in left
    assert any(r.clicked for r in read_events(store.path) if r.impression == ids[-1])
    with pytest.raises(Exception, match="unknown or expired"):
        store.click(ids[0], "d1", None)
    store.close()


def _ids_in_child(out: multiprocessing.connection.Connection) -> None:
    out.send([new_impression_id(time.time()) for _ in range(50)])


def test_ids_are_distinct_in_a_process_and_in_the_workers_it_forks() -> None:
    # Ids draw on a buffer of the system's random bytes: a forked worker must not hand out the parent's.
    now = time.time()
    parent = [new_impression_id(now) for _ in range(50)]  # the buffer is part used when the workers fork
    context = multiprocessing.get_context("fork")
    children = []
    for _ in range(2):
        receive, send = context.Pipe(duplex=False)
        worker = context.Process(target=_ids_in_child, args=(send,))
        worker.start()
        children.append(receive.recv())
        worker.join()
    parent += [new_impression_id(now) for _ in range(50)]
    every = parent + children[0] + children[1]
    assert len(set(every)) == len(every) == 200
    assert len({i[8:] for i in every}) == 200  # the random part alone (the time part is the same)


def test_ids_carry_their_time_and_export_writes_the_click_log(tmp_path: Path) -> None:
    now = time.time()
    assert abs(issued_at(new_impression_id(now)) - now) < 0.002
    assert issued_at("short") is None
    store = EventStore(tmp_path, text_mode="plain", max_age=3600, max_bytes=1 << 30, start_writer=False)
    imp = store.record("match", "a page about boats", "hash1", ["ad1", "ad2"], 1, True)
    store.click(imp, "ad2", 20.0)  # not yet committed by the writer: the click commits it first
    out = tmp_path / "log.jsonl"
    assert export_events(store.path, out) == 2
    lines = out.read_text().splitlines()
    assert '"ad":"ad2"' in lines[1] and '"clicked":true' in lines[1] and '"page_text":"a page about boats"' in lines[1]
    assert '"randomized":true' in lines[0] and '"position":1' in lines[0]
    store.close()
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental: pruning gives pages back
    conn.close()


def test_a_filtered_impression_keeps_its_filter_and_an_older_log_reads_as_unfiltered(tmp_path: Path) -> None:
    """An impression ranked under a filter records it (ssi.traffic's `filtered`: the request's filter, the filtered
    read key's hash and filter, never the key), exported as JSON objects, pruned with its impression; a store
    written before the table reads every impression as unfiltered."""
    key = "acme-read-key-0001"
    store = EventStore(tmp_path, text_mode="plain", max_age=3600, max_bytes=1 << 30, start_writer=False)
    plain = store.record("search", "boats", "m", ["a"], 1, False, filtered=filter_shown(None))
    asked = {"range": {"price": {"lt": 20}}}
    visible = Visibility({"term": {"tenant": "acme"}}, read_key_id(key))
    filtered = store.record("search", "boats", "m", ["b", "c"], 1, False, filtered=filter_shown(asked, visible))
    store.flush()
    rows = {r.impression: r for r in read_events(store.path)}
    assert rows[plain].filter is rows[plain].read_key is rows[plain].key_filter is None
    one = rows[filtered]
    assert (one.filter, one.key_filter) == (canonical_filter(asked), canonical_filter({"term": {"tenant": "acme"}}))
    assert one.read_key == read_key_id(key) and len(one.read_key) == 16
    assert json.loads(one.shown_filter()) == {"and": [{"term": {"tenant": "acme"}}, asked]}
    raw = store.path.read_bytes() + store.path.with_name(EVENTS_FILE + "-wal").read_bytes()
    assert key.encode() not in raw
    out = tmp_path / "log.jsonl"
    assert export_events(store.path, out) == 3
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert "filter" not in lines[0] and lines[1]["filter"] == asked and lines[2]["read_key"] == one.read_key
    store._writer.execute("UPDATE impressions SET at = at - 7200")
    assert store.prune() == 2
    assert store._writer.execute("SELECT COUNT(*) FROM filtered").fetchone()[0] == 0
    store.close()
    older = tmp_path / "older"
    store = EventStore(older, text_mode="plain", max_age=3600, max_bytes=1 << 30, start_writer=False)
    store.record("search", "boats", "m", ["a"], 1, False)
    store.close()
    with sqlite3.connect(older / EVENTS_FILE) as conn:
        conn.execute("DROP TABLE filtered")  # as a store written before the table was
    (result,) = read_events(older / EVENTS_FILE)
    assert result.filter is None and result.shown_filter() is None


def test_metrics_count_answers_clicks_and_the_logs_size(server: ThreadServer, small_world: dict) -> None:
    answer = server.client.post("/search", json={"query": small_world["docs"][40].title, "k": 2}).json()
    server.client.post("/clicks", json={"impression": answer["impression"], "id": answer["hits"][0]["id"]})
    text = server.client.get("/metrics").text
    # counted by the writer as it commits them: the click committed this one (and every earlier one)
    recorded = [
        line
        for line in text.splitlines()
        if line.startswith('ssi_impressions_total{collection="documents",outcome="recorded"}')
    ]
    assert recorded and float(recorded[0].split()[-1]) >= 1
    assert 'ssi_clicks_total{collection="documents",outcome="recorded"}' in text
    size = [line for line in text.splitlines() if line.startswith('ssi_traffic_log_bytes{collection="documents"}')]
    assert size and float(size[0].split()[-1]) > 0


def test_the_log_stays_within_its_size_bound_over_a_long_run(tmp_path: Path) -> None:
    """60,000 answers through the writer thread into a 1 MB bound: the bounds are checked as traffic flows, so the
    database file never grows far past its bound (its write-ahead log briefly holds the pages a prune rewrites),
    and the newest impressions are the ones kept."""
    bound = 1 << 20
    store = EventStore(tmp_path, text_mode="plain", max_age=3600, max_bytes=bound)
    sizes, totals = [], []
    last = None
    for i in range(60_000):
        last = store.record("search", f"query {i % 7000} about things", "m", [f"doc-{j}" for j in range(10)], 1, False)
        if i % 5000 == 4999:
            time.sleep(0.3)  # the writer commits (every 0.1 s) and checks the bound
            sizes.append(store.path.stat().st_size)
            totals.append(store.file_bytes())
    # What the writer does within PRUNE_EVERY seconds or 5 % of the bound written: commit the queue, then prune
    # (flushed here first: on a loaded machine the writer may still hold a backlog that would land after the prune).
    store.flush()
    store.prune()
    settled = store.file_bytes()
    store.close()
    # Between two checks the file grows by what was written since (on a bound this small, page and WAL
    # granularity make that up to about 1.6x, measured on the 2-core machine under load); after one it is within.
    assert max(sizes) <= 2 * bound and max(totals) <= 3 * bound, (sizes, totals)
    assert settled <= bound
    kept = list(read_events(store.path))
    assert kept and kept[-1].impression == last
    assert len({r.impression for r in kept}) < 60_000  # the oldest went
