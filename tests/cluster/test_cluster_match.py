"""POST /match on the sharded router: an adverts index (`ssi index --type adverts`) answers as the single node does.

The same adverts (the cluster world's 300 documents, each given a category, an advertiser, a budget flag and, for
some, a pause) and the same bundle are served by a real single node (`ssi serve` with an adverts collection) and by
2 shards behind the router on the local Ray cluster the Serve modules share (tests/cluster/conftest.py; the index
built in process): every page, a 1,000+ word one and filtered ones included, gets the same adverts with the same
scores, score split and explanations; a malformed request the same 4xx; and after a reload through the router both
serve the new bundle alike. The router's errors that need no Ray (a shard down, a documents index, `page_id`) are
checked in process (cluster.fanout.LocalShards), as in test_cluster_local.py.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster.index_job import build_index
from cluster.manifest import read_manifest
from cluster.shard_settings import shard_settings
from service.adverts import NOT_PAUSED, AdvertMeta, corpus_fields
from service.settings import CollectionSpec
from service.store import DocumentStore
from ssi.records import Document
from tests.cluster.conftest import jsonl_block
from tests.cluster.router_testing import Router, call
from tests.service.service_testing import API_KEY, TLS, ThreadServer, make_bundle, probe_queries, wait_ready

SHARDS = 2  # each shard a Serve replica (a process); the merge is the same from two
COLLECTION = "ads"
KEY = {"X-API-Key": API_KEY}
FILTERS = [{"category": ["cat1"]}, {"advertiser": ["adv0", "adv3"], "budget": False}]
# The general filter of the filter language (service.fields) on the same metadata fields, with `filters` ANDed.
GENERAL = {"filter": {"or": [{"term": {"advertiser": "adv1"}}, {"not": {"exists": "category"}}]}, "filters": FILTERS[0]}


def admits(body: dict, meta: dict[str, object]) -> bool:
    """Whether an advert of metadata `meta` may answer `body` (its `filters` and, for GENERAL, its `filter`)."""
    if meta.get("active") is False:
        return False
    filters = body.get("filters", {})
    for name in ("category", "advertiser"):
        if name in filters and meta.get(name) not in filters[name]:
            return False
    if "budget" in filters and meta.get("budget", True) != filters["budget"]:
        return False
    return "filter" not in body or meta.get("advertiser") == "adv1" or "category" not in meta


def meta_of(i: int) -> dict[str, object]:
    """Advert i's metadata: every 7th is paused, so a page's best adverts include paused ones to skip; every 10th
    line has no category or advertiser field (the defaults: none)."""
    meta: dict[str, object] = {"budget": i % 4 != 3, "active": i % 7 != 0}
    return meta if i % 10 == 9 else meta | {"category": f"cat{i % 3}", "advertiser": f"adv{i % 5}"}


def write_adverts(corpus: Path, docs: list[Document]) -> Path:
    """`docs` as an adverts corpus at `corpus`, advert i with metadata `meta_of(i)`."""
    with corpus.open("w", encoding="utf-8") as handle:
        for i, doc in enumerate(docs):
            handle.write(json.dumps({"id": doc.id, "title": doc.title, "text": doc.text, **meta_of(i)}) + "\n")
    return corpus


@pytest.fixture(scope="module")
def ad_world(world: dict) -> dict:
    """The world's documents as adverts with metadata, and the pages to match: short ones and a 1,000+ word one."""
    docs: list[Document] = world["docs"]
    corpus = write_adverts(world["root"] / "adverts.jsonl", docs)
    long_page = " ".join(doc.text for doc in docs[::5])
    assert len(long_page.split()) >= 1000
    pages = [*probe_queries(docs, 3, seed=7), docs[11].full_text, long_page]
    paused = {doc.id for i, doc in enumerate(docs) if not meta_of(i)["active"]}
    return {"corpus": corpus, "pages": pages, "paused": paused, "meta": {d.id: meta_of(i) for i, d in enumerate(docs)}}


@pytest.fixture(scope="module")
def single(world: dict, ad_world: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    """`ssi serve` with the adverts as collection 'ads' (beside the world's documents, the default collection)."""
    spec = CollectionSpec(bundle=world["bundle"], corpus=ad_world["corpus"], type="adverts")
    with ThreadServer(
        bundle=world["bundle"],
        corpus=world["corpus"],
        cache_dir=tmp_path_factory.mktemp("single-adverts"),
        api_key=API_KEY,
        collections={COLLECTION: spec},
    ) as server:
        yield server


def adverts_index(world: dict, ad_world: dict, out: Path) -> Path:
    """`ssi index --type adverts --shards 2` without --ray (the Ray Data job's tasks: test_the_ray_data_tasks_...)."""
    build_index(ad_world["corpus"], world["bundle"], out, SHARDS, batch_size=64, collection_type="adverts")
    return out


@pytest.fixture(scope="module")
def ray_router(world: dict, ad_world: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The adverts index served by Ray Serve on a local cluster: 2 shards and the router. Built in process: the
    Ray Data job would add ~10 s, and its two tasks are checked on their own (test_the_ray_data_tasks_...)."""
    pytest.importorskip("ray", reason="needs the cluster extra: pip install -e .[cluster]")
    from ray import serve

    from cluster.deploy import ClusterOptions, application
    from service.settings import Settings
    from tests.cluster.conftest import shared_ray

    ray = shared_ray()
    index = adverts_index(world, ad_world, tmp_path_factory.mktemp("ray-adverts") / "index")
    settings = Settings(api_key=API_KEY, collection=COLLECTION)
    options = ClusterOptions(shard_cpus=0, retry_seconds=30)
    serve.run(application(index, settings, options), name="adverts", route_prefix="/adverts")
    url = f"{ray.url}/adverts"
    try:
        wait_ready(url, timeout=60)
        with httpx.Client(base_url=url, timeout=60, verify=TLS) as client:
            yield {"index": index, "client": client}
    finally:
        serve.delete("adverts")


@pytest.fixture(scope="module")
def local_index(world: dict, ad_world: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same adverts index again, for the in-process router (a shard's folder is served by one process)."""
    return adverts_index(world, ad_world, tmp_path_factory.mktemp("local-adverts") / "index")


def match(client: httpx.Client, body: dict) -> httpx.Response:
    return client.post("/match", json=body)


def assert_same_matches(sharded: dict, single: dict) -> None:
    """Same adverts in the same order, scores to 1e-5, and the same split, metadata and words of each."""
    assert len(sharded["results"]) == len(single["results"])
    for mine, theirs in zip(sharded["results"], single["results"], strict=True):
        assert [a["id"] for a in mine["ads"]] == [a["id"] for a in theirs["ads"]]
        assert mine["page_words"] == theirs["page_words"]
        for a, b in zip(mine["ads"], theirs["ads"], strict=True):
            for score in ("score", "semantic", "lexical"):
                assert a[score] == pytest.approx(b[score], abs=1e-5), (a["id"], score)
            same = ("title", "text", "category", "advertiser", "budget", "shared_words", "related_words")
            assert {f: a[f] for f in same} == {f: b[f] for f in same}, a["id"]


def test_each_shard_keeps_its_adverts_metadata(ad_world: dict, local_index: Path) -> None:
    """Each shard's store holds its adverts' metadata as fields, as `ssi serve` reads them from the corpus
    (service.adverts.corpus_fields), with the four types declared, and only its own adverts."""
    manifest = read_manifest(local_index)
    assert manifest.type == "adverts" and manifest.documents == len(ad_world["meta"])
    for entry in manifest.entries:
        ids = json.loads((local_index / entry.ids_file).read_text(encoding="utf-8"))
        store_dir = shard_settings(local_index / entry.folder, Path(manifest.bundle)).store_dir
        path = DocumentStore.path_for(store_dir, "documents")
        with sqlite3.connect(path) as stored:
            held = {i: json.loads(f) for i, f in stored.execute("SELECT id, fields FROM documents")}
            types = dict(stored.execute("SELECT name, type FROM field_types").fetchall())
        assert held == {ad_id: corpus_fields(ad_world["meta"][ad_id]) for ad_id in ids}
        assert types == {"category": "keyword", "advertiser": "keyword", "active": "boolean", "budget": "boolean"}
        assert len(ids) == entry.documents
        assert all(AdvertMeta.of_fields(held[i]) == AdvertMeta.from_record(ad_world["meta"][i]) for i in ids)


def test_the_ray_data_tasks_carry_the_same_metadata(world: dict, ad_world: dict) -> None:
    """The Ray Data job's embedding task, on the lines a JSONL block gives it and on the same records as Parquet
    columns (Arrow's, None for a field a line lacks), gives each advert the metadata the in-process build gives it
    (a paused advert stays paused)."""
    import pyarrow as pa

    from cluster.index_job import _corpus_rows
    from cluster.ray_index import embed_batch

    lines = jsonl_block(ad_world["corpus"])
    columns = pa.Table.from_pylist([json.loads(line) for line in lines.column("text").to_pylist()])
    expected = {doc.id: meta for doc, meta in _corpus_rows(ad_world["corpus"], "adverts")}
    for block, as_lines in ((lines, True), (columns, False)):
        rows = embed_batch(block, str(world["bundle"]), SHARDS, adverts=True, lines=as_lines)
        assert dict(zip(rows["id"].tolist(), rows["meta"].tolist(), strict=True)) == expected
    paused = {ad_id for ad_id, meta in expected.items() if json.loads(meta).get("active") is False}
    assert paused == ad_world["paused"]


def test_match_on_the_router_equals_the_single_node(ad_world: dict, ray_router: dict, single: ThreadServer) -> None:
    """Every page (a 1,000+ word one included), alone and as a batch, with and without filters: the single node's
    adverts, scores and explanations; no paused advert."""
    client = ray_router["client"]
    pages = ad_world["pages"]
    bodies = [{"page": page, "k": 10} for page in pages]
    bodies += [{"page": pages[-1], "k": 7, "filters": filters} for filters in FILTERS]
    bodies += [{"pages": pages, "k": 5, "filters": FILTERS[0]}, {"page": pages[0], "k": 6, **GENERAL}]
    for body in bodies:
        sharded, one = match(client, body), match(single.client, body)
        assert sharded.status_code == one.status_code == 200, (sharded.text, one.text)
        assert sharded.json()["collection"] == one.json()["collection"] == COLLECTION
        assert_same_matches(sharded.json(), one.json())
        for result in sharded.json()["results"]:
            assert len(result["ads"]) == body["k"]
            assert not {a["id"] for a in result["ads"]} & ad_world["paused"]
            assert all(admits(body, ad_world["meta"][a["id"]]) for a in result["ads"])


def test_a_malformed_match_gets_the_single_nodes_4xx(ray_router: dict, single: ThreadServer) -> None:
    """Bad requests are refused by the router as by the single node: same status, same message."""
    client = ray_router["client"]
    bad = [
        {"page": "spam", "k": 0},
        {"page": "spam", "pages": ["eggs"]},
        {"k": 3},
        {"page": "   "},
        {"pages": []},
        {"page": "spam", "filters": {"colour": ["red"]}},
        {"page": "spam", "filters": {"budget": "yes"}},
        {"page": "spam", "filter": {"term": {"colour": "red"}}},
        {"page": "spam", "documents": "docs"},
        {"page": "spam", "unknown": 1},
    ]
    for body in bad:
        sharded, one = match(client, body), match(single.client, body)
        assert 400 <= one.status_code < 500, body
        assert (sharded.status_code, sharded.json()["detail"]) == (one.status_code, one.json()["detail"]), body
    not_json = client.post("/match", content=b"{", headers={"Content-Type": "application/json"})
    assert not_json.status_code == single.client.post("/match", content=b"{").status_code == 422


def test_a_reload_through_the_router_keeps_matching_as_the_single_node(
    world: dict, ad_world: dict, ray_router: dict, single: ThreadServer
) -> None:
    """POST /admin/reload on the router and on the single node, to the same new bundle: the pages get the same
    adverts again (the metadata, fields of the adverts, is untouched by a reload); reloaded back afterwards."""
    client = ray_router["client"]
    other = make_bundle(world["bundle"].parent / "bundle-match-reloaded", world["docs"], seed=37)
    page = {"page": ad_world["pages"][-1], "k": 10, "filters": FILTERS[0]}
    before = match(client, page).json()
    try:
        ask = {"bundle": str(other), "collection": COLLECTION}
        reloaded = [t.post("/admin/reload", json=ask, headers=KEY, timeout=300) for t in (client, single.client)]
        assert [r.status_code for r in reloaded] == [200, 200], [r.text for r in reloaded]
        assert client.get("/model").json()["content_hash"] == reloaded[1].json()["content_hash"]
        after = match(client, page).json()
        assert [a["id"] for a in after["results"][0]["ads"]] != [a["id"] for a in before["results"][0]["ads"]]
        assert_same_matches(after, match(single.client, page).json())
    finally:
        back = {"bundle": str(world["bundle"]), "collection": COLLECTION}
        for target in (client, single.client):
            assert target.post("/admin/reload", json=back, headers=KEY, timeout=300).status_code == 200
    assert_same_matches(match(client, page).json(), before)


def test_a_shard_down_a_documents_index_and_page_id_get_clear_errors(
    world: dict, ad_world: dict, local_index: Path, tmp_path: Path
) -> None:
    """In process: a shard that stays down is a 503 naming it (never a partial ranking); /match on a documents
    index is the single node's 404 when it hosts no adverts; `page_id` (no documents collection here) a 404."""
    from cluster.fanout import retrying

    router = Router(local_index, collection=COLLECTION)
    try:
        page = {"page": ad_world["pages"][0], "k": 5}
        assert call(router, "POST", "/match", json=page).status_code == 200
        by_id = call(router, "POST", "/match", json={"page_id": world["docs"][0].id})
        assert by_id.status_code == 404 and "send the page's text" in by_id.json()["detail"]
        shards = router.client._transport.app.state.fanout.shards  # type: ignore[attr-defined]
        real = shards.call

        async def dead() -> None:
            raise ConnectionError("replica died")

        async def one_down(shard: int, method: str, *args: object) -> object:
            if shard == 1:
                return await retrying(dead, shard, 0.2, (ConnectionError,))
            return await real(shard, method, *args)

        shards.call = one_down
        try:
            down = call(router, "POST", "/match", json=page)
        finally:
            shards.call = real
        assert down.status_code == 503
        assert "shard 1 did not answer" in down.json()["detail"] and "no partial ranking" in down.json()["detail"]
    finally:
        router.close()
    documents = tmp_path / "documents"
    build_index(world["corpus"], world["bundle"], documents, 2, batch_size=100)
    plain = Router(documents)
    try:
        refused = call(plain, "POST", "/match", json={"page": "anything"})
        assert refused.status_code == 404 and "hosts no adverts collection" in refused.json()["detail"]
        shard = plain.servers[0].match(["anything"], 3, NOT_PAUSED)
        assert shard.status == 409  # a shard asked anyway refuses as the single node's collection does
    finally:
        plain.close()
