"""The sharded service on a local Ray cluster (a head and a worker node on loopback): index, search, writes, failures.

One Ray Data index build and one Serve application for the whole module, and a second of each (`open_app`) for the
open vocabulary and the collection's statistics, on the cluster the Serve modules share (tests/cluster/conftest.py:
starting it is most of their time). Skipped with a message when Ray is not installed
(the `cluster` extra).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ray", reason="needs the cluster extra: pip install -e .[cluster]")

from cluster.index_job import build_index  # noqa: E402
from cluster.manifest import read_manifest  # noqa: E402
from cluster.sharding import shard_of  # noqa: E402
from ssi.records import Document  # noqa: E402
from tests.cluster.conftest import with_fields  # noqa: E402
from tests.service.service_testing import (  # noqa: E402
    TLS,
    Oracle,
    ThreadServer,
    assert_same_ranking,
    make_bundle,
    make_corpus,
    needle_of,
    probe_queries,
    wait_ready,
    write_corpus,
)

SHARDS = 2  # more shards start more replica processes; the merge is the same from two


@pytest.fixture(scope="module")
def cluster(world: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from cluster import deploy
    from service.settings import Settings
    from tests.cluster.conftest import shared_ray

    ray = shared_ray()
    index = tmp_path_factory.mktemp("ray-index") / "index"
    manifest = build_index(world["corpus"], world["bundle"], index, SHARDS, ray_address=ray.address, batch_size=50)
    settings = Settings(host="127.0.0.1", port=ray.port, insecure_writes=True)
    deploy.start(index, settings, deploy.ClusterOptions(shard_cpus=0, retry_seconds=30), address=ray.address)
    wait_ready(ray.url, timeout=60)
    try:
        with httpx.Client(base_url=ray.url, timeout=60, verify=TLS) as client:
            yield {"index": index, "manifest": manifest, "client": client, "local": ray.local}
    finally:
        deploy.stop()


def shard_replica(client: httpx.Client, shard: int) -> dict:
    return next(s for s in client.get("/cluster").json()["shards"] if s.get("shard") == shard)


def kill_replica(name: str) -> None:
    import ray

    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)


def test_ray_data_job_writes_the_shards_the_local_build_writes(world: dict, cluster: dict, tmp_path: Path) -> None:
    """Same documents in the same shards, same bundle hash, whoever computed them."""
    here = build_index(world["corpus"], world["bundle"], tmp_path / "here", SHARDS)
    on_ray = cluster["manifest"]
    assert on_ray.engine == "ray" and here.engine == "local"
    assert on_ray.bundle_hash == here.bundle_hash
    assert [(e.documents, e.ids_sha256) for e in on_ray.entries] == [(e.documents, e.ids_sha256) for e in here.entries]
    ids = json.loads((cluster["index"] / on_ray.entries[1].ids_file).read_text(encoding="utf-8"))
    assert ids and all(shard_of(doc_id, SHARDS) == 1 for doc_id in ids)


def write_parquet(path: Path, docs: list[Document], row_group_size: int) -> Path:
    """`docs` as a Parquet corpus in row groups of `row_group_size` (several row groups: several read blocks)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"id": [d.id for d in docs], "title": [d.title for d in docs], "text": [d.text for d in docs]}
    table = pa.table(columns | {"fields": [d.fields for d in docs]})  # a struct column: null where a document has none
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def test_sharded_search_equals_single_node_search(world: dict, cluster: dict, tmp_path: Path) -> None:
    """Over HTTP: the Ray Serve router's hits == `ssi serve`'s hits == brute force, on the same bundle and corpus."""
    client = cluster["client"]
    queries = probe_queries(world["docs"], 4, seed=21)
    with ThreadServer(bundle=world["bundle"], corpus=world["corpus"], cache_dir=tmp_path / "single") as single:
        for query in queries:
            sharded = client.post("/search", json={"query": query, "k": 10})
            assert sharded.status_code == 200, sharded.text
            one = single.client.post("/search", json={"query": query, "k": 10}).json()
            assert [(h["id"], h["snippet"]) for h in sharded.json()["hits"]] == [
                (h["id"], h["snippet"]) for h in one["hits"]
            ]
            assert_same_ranking(sharded.json()["hits"], world["oracle"], query, 10)
        doc = world["docs"][40]
        similar = client.get(f"/documents/{doc.id}/similar", params={"k": 5}).json()["hits"]
        assert [h["id"] for h in similar] == [
            h["id"] for h in single.client.get(f"/documents/{doc.id}/similar", params={"k": 5}).json()["hits"]
        ]
        # fields from the JSONL corpus through the Ray Data job: a filtered search with facets answers as one node
        assert client.get(f"/documents/{doc.id}").json()["fields"] == doc.fields
        node = {"or": [{"terms": {"color": ["c00", "c02"]}}, {"range": {"day": {"lt": "2024-05-06"}}}]}
        for query in queries[:2]:
            body = {"query": query, "k": 10, "filter": node, "facets": ["color", "tags"], "fields": ["day"]}
            sharded = client.post("/search", json=body).json()
            one = single.client.post("/search", json=body).json()
            assert [(h["id"], h["fields"]) for h in sharded["hits"]] == [(h["id"], h["fields"]) for h in one["hits"]]
            assert (sharded["matched"], sharded["facets"]) == (one["matched"], one["facets"])


def test_a_write_is_visible_and_survives_a_replica_restart(world: dict, cluster: dict) -> None:
    client = cluster["client"]
    words = f"{needle_of(world['docs'][5])} {needle_of(world['docs'][6])}"
    doc = Document(id="ray-written", title="Written on the cluster", text=words)
    owner = shard_of(doc.id, SHARDS)
    assert client.put(f"/documents/{doc.id}", json={"title": doc.title, "text": doc.text}).status_code == 200
    oracle = Oracle(world["bundle"], [*world["docs"], doc])
    hits = client.post("/search", json={"query": words, "k": 5}).json()["hits"]
    assert hits[0]["id"] == doc.id
    assert_same_ranking(hits, oracle, words, 5)

    before = shard_replica(client, owner)
    kill_replica(before["replica"])
    deadline = time.monotonic() + 60
    after = before
    while time.monotonic() < deadline:  # Serve notices the dead replica and starts another
        after = shard_replica(client, owner)
        if after.get("pid") not in (None, before["pid"]):
            break
        time.sleep(0.5)
    assert after.get("pid") not in (None, before["pid"]), after
    assert client.get(f"/documents/{doc.id}").json()["title"] == doc.title
    hits = client.post("/search", json={"query": words, "k": 5}).json()["hits"]
    assert_same_ranking(hits, oracle, words, 5)
    assert hits[0]["id"] == doc.id


def test_a_replica_killed_during_queries_never_gives_a_wrong_ranking(world: dict, cluster: dict) -> None:
    """Searches run while a shard's replica is killed: each answer is the exact ranking or a clear 503."""
    client = cluster["client"]
    query = probe_queries(world["docs"], 1, seed=33)[0]
    expected = [h["id"] for h in client.post("/search", json={"query": query, "k": 10}).json()["hits"]]
    outcomes: list[tuple[int, object]] = []
    stop = threading.Event()

    def searcher() -> None:
        with httpx.Client(base_url=str(client.base_url), timeout=60, verify=TLS) as own:
            while not stop.is_set():
                response = own.post("/search", json={"query": query, "k": 10})
                body = response.json()
                outcomes.append(
                    (response.status_code, [h["id"] for h in body["hits"]] if response.status_code == 200 else body)
                )

    threads = [threading.Thread(target=searcher) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    victim = shard_replica(client, 0)
    kill_replica(victim["replica"])
    time.sleep(6.0)
    stop.set()
    for thread in threads:
        thread.join(timeout=90)
    print(f"searches while a replica was killed: {Counter(status for status, _ in outcomes)}")
    assert outcomes and any(status == 200 for status, _ in outcomes)
    for status, body in outcomes:
        if status == 200:
            assert body == expected
        else:
            assert status == 503 and "no partial ranking" in body["detail"], body  # type: ignore[index]
    assert client.post("/search", json={"query": query, "k": 10}).status_code == 200
    assert read_manifest(cluster["index"]).shards == SHARDS


def test_a_reload_through_the_router_swaps_every_shard_on_ray(world: dict, cluster: dict) -> None:
    """POST /admin/reload on the Serve router: every shard replica serves the new bundle and the merged ranking is
    its brute force; reloaded back, the old one (the module's other tests expect it, in any order)."""
    client = cluster["client"]
    other = make_bundle(world["bundle"].parent / "bundle-ray-reloaded", world["docs"], seed=29)
    oracle = Oracle(other, world["docs"])
    response = client.post("/admin/reload", json={"bundle": str(other)}, timeout=300)
    assert response.status_code == 200, response.text
    assert response.json()["content_hash"] == oracle.bundle.content_hash
    try:
        hashes = {s["content_hash"] for s in client.get("/cluster").json()["shards"]}
        assert hashes == {oracle.bundle.content_hash}
        assert client.get("/model").json()["content_hash"] == oracle.bundle.content_hash
        for query in probe_queries(world["docs"], 4, seed=41):
            hits = client.post("/search", json={"query": query, "k": 10}).json()["hits"]
            assert_same_ranking(hits, Oracle(other, [*world["docs"], *written(client)]), query, 10)
    finally:
        back = client.post("/admin/reload", json={"bundle": str(world["bundle"])}, timeout=300)
        assert back.status_code == 200, back.text


def test_the_serve_router_interleaves_a_candidate_over_every_shard(world: dict, cluster: dict) -> None:
    """POST /admin/interleave on the Serve router: each shard replica loads the candidate, a first page merges
    both rankings (the router's log says who placed each hit), and DELETE ends it (tests/cluster/
    test_cluster_interleave.py checks the merge against brute force without Ray)."""
    from ssi.traffic import EVENTS_FILE, read_events

    client = cluster["client"]
    candidate = make_bundle(world["bundle"].parent / "bundle-ray-candidate", world["docs"], seed=31)
    started = client.post("/admin/interleave", json={"bundle": str(candidate), "share": 1.0}, timeout=300)
    assert started.status_code == 200, started.text
    content_hash = Oracle(candidate, world["docs"]).bundle.content_hash
    try:
        assert started.json()["comparison"]["content_hash"] == content_hash
        answer = client.post("/search", json={"query": world["docs"][61].title, "k": 6}).json()
        log = cluster["index"] / "router" / "stores" / "documents" / EVENTS_FILE
        deadline = time.monotonic() + 10
        while not (rows := [r for r in read_events(log) if r.impression == answer["impression"]]):
            assert time.monotonic() < deadline, "the router did not log the interleaved answer"
            time.sleep(0.1)
        assert [r.doc for r in rows] == [h["id"] for h in answer["hits"]]
        assert {r.placed_by for r in rows} == {content_hash, rows[0].model}  # both teams placed hits
    finally:
        ended = client.delete("/admin/interleave")
        assert ended.status_code == 200 and ended.json()["running"] is False


def written(client: httpx.Client) -> list[Document]:
    """Documents other tests of the module wrote through the router (they stay in the shards' stores)."""
    found = client.get("/documents/ray-written")
    if found.status_code != 200:
        return []
    body = found.json()
    return [Document(id=body["id"], title=body["title"], text=body["text"])]


def test_the_serve_router_logs_its_answers_and_clicks_under_the_index(world: dict, cluster: dict) -> None:
    """The deployed router names each merged answer's impression and records clicks in its own log, by default
    `<index>/router/stores/documents/events.sqlite` (cluster.events), read back as the trainer reads it."""
    from service.events.store import new_impression_id
    from ssi.traffic import EVENTS_FILE, read_events

    client = cluster["client"]
    answer = client.post("/search", json={"query": world["docs"][60].title, "k": 4}).json()
    impression, ids = answer["impression"], [h["id"] for h in answer["hits"]]
    assert impression and len(ids) == 4
    click = client.post("/clicks", json={"impression": impression, "id": ids[1]})
    assert click.status_code == 200, click.text
    assert click.json() == {"recorded": True, "position": 2}
    unknown = client.post("/clicks", json={"impression": new_impression_id(time.time() - 60), "id": ids[1]})
    assert unknown.status_code == 404
    rows = list(read_events(cluster["index"] / "router" / "stores" / "documents" / EVENTS_FILE))
    assert [(r.position, r.doc) for r in rows if r.impression == impression and r.clicked] == [(2, ids[1])]


@pytest.fixture(scope="module")
def open_app(cluster: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A second Serve application on the module's cluster, for the open vocabulary and the collection's statistics
    (SSI_OPEN_VOCAB_STATISTICS=collection): a BM25 bundle trained on 60 documents, two shards over 90 documents (30
    of them bring words it never saw) that the Ray Data job built from a Parquet corpus, and the local build of the
    same documents from JSONL. One application for both tests: each replica costs a process and its imports. `live`:
    the documents it serves, kept by the tests that write."""
    from ray import serve

    from cluster.deploy import ClusterOptions, application
    from service.settings import Settings

    root = tmp_path_factory.mktemp("ray-open")
    docs = with_fields(make_corpus(120, seed=9, vocab_words=300))
    bundle = make_bundle(root / "bundle", docs[:60], n_dims=16, seed=3, lexical="bm25")
    here = build_index(
        write_corpus(root / "corpus.jsonl", docs[30:]),
        bundle,
        root / "here",
        2,
        open_vocab=True,
        statistics="collection",
    )
    parquet = write_parquet(root / "corpus.parquet", docs[30:], row_group_size=25)
    index = root / "index"
    built = build_index(
        parquet, bundle, index, 2, ray_address=cluster["local"].address, batch_size=25, open_vocab=True,
        statistics="collection",
    )  # fmt: skip
    settings = Settings(insecure_writes=True, open_vocab=True, open_vocab_statistics="collection")
    serve.run(application(index, settings, ClusterOptions(shard_cpus=0)), name="open", route_prefix="/open")
    url = str(cluster["client"].base_url).rstrip("/") + "/open"
    try:
        wait_ready(url, timeout=120)
        yield {"docs": docs, "live": list(docs[30:]), "bundle": bundle, "here": here, "built": built, "url": url}
    finally:
        serve.delete("open")


def test_a_word_written_after_training_is_found_through_the_ray_router(cluster: dict, open_app: dict) -> None:
    """SSI_OPEN_VOCAB on the router (the module's second Serve application, `open_app`: a BM25 bundle's two shards,
    built with their open postings): a document written after training is the first hit for a word only it holds,
    over HTTP and through the Python API (ssi.Client); with a new word on both shards, in different numbers, the
    ranking is one node's (the collection's statistics, the application's); deleting the documents takes the words
    out.

    Slow: a second Serve application (a Ray Data build of its index) on the module's cluster."""
    from ssi.api.client import Client

    docs, bundle, avg_len = open_app["docs"], open_app["bundle"], open_app["built"].avg_len
    http = cluster["client"]
    new = Document("open-written-later", "Glorptwizzle notes", "glorptwizzle fermentation of glorptwizzle in barley")
    away = [f"twin-{i}" for i in range(200) if shard_of(f"twin-{i}", 2) != shard_of(new.id, 2)][:3]
    twins = [Document(doc_id, "", f"zymurgical glorptwizzle {docs[30 + i].text}") for i, doc_id in enumerate(away)]
    with Client(open_app["url"], timeout=60) as api:
        words_before = [s["open_vocab"]["words"] for s in http.get("/open/model").json()["index"]["per_shard"]]
        assert api.search("glorptwizzle", k=5).hits == []
        api.put_document(new.id, title=new.title, text=new.text)
        try:
            assert api.search("glorptwizzle", k=5).hits[0].id == new.id
            for twin in twins:
                api.put_document(twin.id, title=twin.title, text=twin.text)
            live = [*open_app["live"], new, *twins]
            oracle = Oracle(bundle, live, open_vocab=True, statistics="collection", avg_len=avg_len)
            for query in ("glorptwizzle", "fermentation zymurgical glorptwizzle", f"glorptwizzle {docs[35].title}"):
                hits = http.post("/open/search", json={"query": query, "k": 8}).json()["hits"]
                assert_same_ranking(hits, oracle, query, 8)
            barley = http.post("/open/search", json={"query": "barley glorptwizzle"}).json()["hits"]
            assert barley[0]["id"] == new.id
        finally:
            for doc in [new, *twins]:
                api.delete_document(doc.id)
        assert api.search("glorptwizzle", k=5).hits == [] and api.search("zymurgical", k=5).hits == []
        per_shard = http.get("/open/model").json()["index"]["per_shard"]
        assert [s["open_vocab"]["words"] for s in per_shard] == words_before


def test_the_collections_statistics_are_served_through_the_ray_router(cluster: dict, open_app: dict) -> None:
    """SSI_OPEN_VOCAB_STATISTICS=collection on the router starts (it was refused before) over an index the Ray Data
    job built with them from a Parquet corpus (`open_app`): its shards and avg_len are the local build's from JSONL,
    and the ranking is the brute force over every document with the collection's statistics at that avg_len, through
    a write and a delete. (The Ray Data job's Parquet reader is tested here: the same documents land in the same
    shards.)

    Slow: a Ray Data index build and a second Serve application on the module's cluster (`open_app`)."""
    docs, bundle, built, here = open_app["docs"], open_app["bundle"], open_app["built"], open_app["here"]
    # `ssi index --ray` reads Parquet as well as JSONL: the same documents in the same shards as the local build's
    assert built.engine == "ray" and built.documents == len(docs[30:])
    assert [(e.documents, e.ids_sha256) for e in built.entries] == [(e.documents, e.ids_sha256) for e in here.entries]
    assert built.avg_len is not None and built.avg_len == here.avg_len
    # the Parquet `fields` struct column gives the JSONL objects' fields and types (a date stays a date)
    assert [e.fields for e in built.entries] == [e.fields for e in here.entries] and built.entries[0].fields[
        "day"
    ] == "date"
    http = cluster["client"]
    new = Document("written-later", "Quuxblarg notes", f"quuxblarg {docs[40].text}")
    live = open_app["live"]
    for step in ("built", "written", "deleted"):
        if step == "written":
            assert http.put(f"/open/documents/{new.id}", json={"title": new.title, "text": new.text}).is_success
            live.append(new)
        if step == "deleted":
            assert http.delete(f"/open/documents/{docs[40].id}").is_success
            live[:] = [d for d in live if d.id != docs[40].id]
        oracle = Oracle(bundle, live, open_vocab=True, statistics="collection", avg_len=built.avg_len)
        for query in (docs[35].title, " ".join(docs[40].text.split()[:4]), f"quuxblarg {docs[50].title}"):
            hits = http.post("/open/search", json={"query": query, "k": 8}).json()["hits"]
            assert_same_ranking(hits, oracle, query, 8)
    per_shard = http.get("/open/model").json()["index"]["per_shard"]
    assert [s["open_vocab"]["avg_len"] for s in per_shard] == [built.avg_len] * 2
    assert [http.get(f"/open/documents/{d.id}").json()["fields"] for d in docs[30:36]] == [
        d.fields or {} for d in docs[30:36]
    ]
