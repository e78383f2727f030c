"""The cluster layer without Ray: sharded index build, the router's merge and write routing, errors, imports.

The router (cluster.http over cluster.fanout) runs in-process over ShardServer objects here
(LocalShards); tests/cluster/test_cluster_ray.py runs the same router and shards on Ray Serve.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.facet_merge import merge_facets
from cluster.fanout import Fanout, LocalShards, merge
from cluster.http import build_app
from cluster.index_job import build_index
from cluster.manifest import ClusterIndexError, read_manifest
from cluster.shard_server import ShardServer
from cluster.sharding import shard_of
from service.fields.facets import facet_order
from service.settings import Settings
from ssi.records import Document
from tests.cluster.router_testing import Router, call
from tests.service.service_testing import Oracle, assert_same_ranking, needle_of, probe_queries, write_corpus

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def indexes(world: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("indexes")
    return {
        n: build_index(world["corpus"], world["bundle"], root / f"s{n}", n, batch_size=64) and root / f"s{n}"
        for n in (1, 3)
    }


FACET_SIZE = 3  # the router's SSI_FACET_SIZE: below the world's 14 colours, so that the shards' lists differ


@pytest.fixture(scope="module")
def router(indexes: dict[int, Path]) -> Iterator[Router]:
    r = Router(indexes[3], insecure_writes=True, facet_size=FACET_SIZE)
    yield r
    r.close()


def test_manifest_records_bundle_and_every_document_once(world: dict, indexes: dict[int, Path]) -> None:
    from ssi.bundle import load_bundle

    manifest = read_manifest(indexes[3])
    assert manifest.bundle_hash == load_bundle(world["bundle"]).content_hash
    assert manifest.documents == len(world["docs"]) and manifest.shards == 3
    held: list[str] = []
    for entry in manifest.entries:
        ids = json.loads((indexes[3] / entry.ids_file).read_text(encoding="utf-8"))
        assert all(shard_of(doc_id, 3) == entry.shard for doc_id in ids)
        assert len(ids) == entry.documents > 0
        held += ids
    assert sorted(held) == sorted(d.id for d in world["docs"])
    with pytest.raises(ClusterIndexError, match="built with bundle"):
        read_manifest(indexes[3], bundle_hash="0" * 64)


def test_sharded_search_is_the_brute_force_ranking(world: dict, router: Router) -> None:
    """Merged top k over 3 shards == brute force of the form's reference score over the whole corpus."""
    for query in probe_queries(world["docs"], 6, seed=5):
        response = call(router, "POST", "/search", json={"query": query, "k": 10})
        assert response.status_code == 200, response.text
        assert_same_ranking(response.json()["hits"], world["oracle"], query, 10)
    query = probe_queries(world["docs"], 1, seed=9)[0]
    page = call(router, "POST", "/search", json={"query": query, "k": 5, "offset": 5}).json()["hits"]
    full = call(router, "POST", "/search", json={"query": query, "k": 10}).json()["hits"]
    assert [h["id"] for h in page] == [h["id"] for h in full[5:]]
    batch = call(router, "POST", "/search/batch", json={"queries": [query, "nothing-known"], "k": 10}).json()
    assert [h["id"] for h in batch["results"][0]["hits"]] == [h["id"] for h in full]
    assert batch["results"][1]["hits"] == []


def test_similar_leaves_the_document_out_and_ranks_exactly(world: dict, router: Router) -> None:
    doc = world["docs"][17]
    response = call(router, "GET", f"/documents/{doc.id}/similar", params={"k": 8})
    assert response.status_code == 200, response.text
    hits = response.json()["hits"]
    assert doc.id not in [h["id"] for h in hits]
    assert_same_ranking(hits, world["oracle"], doc.full_text, 8, exclude=doc.id)


# Filters over the world's fields (tests/cluster/conftest.with_fields), each with the same test on a document's fields.
FILTERS: list[tuple[dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
    ({"term": {"color": "c01"}}, lambda f: f.get("color") == "c01"),
    (
        {"and": [{"range": {"n": {"gte": 40, "lt": 200}}}, {"terms": {"tags": ["a", "c"]}}]},
        lambda f: 40 <= f.get("n", -1) < 200 and bool({"a", "c"} & set(f.get("tags", []))),
    ),
    (
        {"or": [{"range": {"day": {"gte": "2024-05-20"}}}, {"not": {"exists": {"field": "tags"}}}]},
        lambda f: f.get("day", "") >= "2024-05-20" or "tags" not in f,
    ),
]


def brute_facets(docs: list[Document], among: set[str], names: list[str], size: int) -> dict[str, Any]:
    """Facets as one node counts them (service.fields.facets), by brute force over the documents `among`."""
    out: dict[str, Any] = {}
    for name in names:
        counts: Counter[Any] = Counter()
        for doc in docs:
            value = (doc.fields or {}).get(name)
            if doc.id in among and value is not None:
                counts.update(value if isinstance(value, list) else [value])
        ranked = sorted(counts.items(), key=facet_order)
        values = [{"value": v, "count": n} for v, n in ranked[:size]]
        out[name] = {"values": values, "other": sum(n for _, n in ranked[size:])}
    return out


def test_a_filtered_search_through_the_router_is_the_brute_force_with_exact_facets(world: dict, router: Router) -> None:
    """Each shard filters, the router merges the top k, sums `matched` and merges the facets exactly (a value below
    one shard's cut still counted there): the brute force over the whole corpus, for /search, /search/batch and
    similar, with the fields asked for on each hit."""
    docs: list[Document] = world["docs"]
    by_id = {d.id: d for d in docs}
    queries = probe_queries(docs, 1, seed=13)
    for (node, test), query in zip(FILTERS, queries, strict=True):
        among = {d.id for d in docs if test(d.fields or {})}
        body = {"query": query, "k": 10, "filter": node, "facets": ["color", "tags"], "fields": ["color", "n"]}
        answer = call(router, "POST", "/search", json=body).json()
        assert_same_ranking(answer["hits"], world["oracle"], query, 10, among=among)
        assert answer["matched"] == len(among)
        assert answer["facets"] == brute_facets(docs, among, ["color", "tags"], FACET_SIZE)
        for hit in answer["hits"]:
            held = by_id[hit["id"]].fields or {}
            assert hit["fields"] == {name: held[name] for name in ("color", "n") if name in held}
        many = {name: value for name, value in body.items() if name != "query"} | {"queries": [query, queries[0]]}
        batch = call(router, "POST", "/search/batch", json=many)
        first = batch.json()["results"][0]
        assert [h["id"] for h in first["hits"]] == [h["id"] for h in answer["hits"]]
        assert (first["matched"], first["facets"]) == (answer["matched"], answer["facets"])
    every = call(router, "POST", "/search", json={"query": queries[0], "facets": ["color", "tags"]}).json()
    assert every["matched"] == len(docs)
    assert every["facets"] == brute_facets(docs, set(by_id), ["color", "tags"], FACET_SIZE)
    node, test = FILTERS[1]
    doc = docs[17]
    similar = call(router, "GET", f"/documents/{doc.id}/similar", params={"k": 8, "filter": json.dumps(node)})
    among = {d.id for d in docs if test(d.fields or {})}
    assert_same_ranking(similar.json()["hits"], world["oracle"], doc.full_text, 8, exclude=doc.id, among=among)
    unknown = call(router, "POST", "/search", json={"query": "x", "filter": {"term": {"nope": 1}}})
    assert unknown.status_code == 422 and "unknown field 'nope'" in unknown.json()["detail"]
    deep = call(
        router,
        "POST",
        "/search",
        json={
            "query": "x",
            "filter": {"not": {"not": {"not": {"not": {"not": {"not": {"not": {"not": {"exists": "n"}}}}}}}}},
        },
    )
    assert deep.status_code == 422 and "levels deep" in deep.json()["detail"]


def test_facets_merged_from_shards_count_what_a_shard_left_out(tmp_path: Path) -> None:
    """cluster.facet_merge over three rounds, against shards' true counts: `e` is below the cut of both shards
    (it ties their last value, which wins by name), and is the most frequent value of the cluster."""
    import asyncio

    held = [{"a": 5, "b": 4, "e": 4}, {"c": 5, "d": 4, "e": 4}]
    size = 2
    first = []
    for counts in held:
        ranked = sorted(counts.items(), key=facet_order)
        first.append({"f": {"values": ranked[:size], "other": sum(n for _, n in ranked[size:])}})
    asked: list[tuple[int, dict[str, Any]]] = []

    async def count_values(shard: int, wanted: dict[str, list[Any] | None]) -> dict[str, list[tuple[Any, int]]]:
        asked.append((shard, wanted))
        values = wanted["f"]
        return {"f": [(v, held[shard].get(v, 0)) for v in (held[shard] if values is None else values)]}

    (merged,) = asyncio.run(merge_facets(first, ["f"], size, count_values)).values()
    assert merged.values == [("e", 8), ("a", 5)] and merged.other == 5 + 4 + 4
    assert asked == [(0, {"f": ["c", "d"]}), (1, {"f": ["a", "b"]}), (0, {"f": None}), (1, {"f": None})]


def test_writes_with_fields_are_typed_alike_on_every_shard_and_a_conflict_writes_nothing(
    world: dict, router: Router
) -> None:
    """The router checks a write's fields against the cluster's types (every shard's) and gives the owning shard
    the types of the names it uses: a date-like string of a keyword field is a keyword on a shard that never saw the
    field. A value of another type is a 409 and nothing of the batch is written on any shard; shards that typed a
    name two ways (two routers racing, here written to the shards directly) make any use of it a 409 naming it."""
    one_per_shard = {shard_of(f"typed-{i}", 3): f"typed-{i}" for i in range(30)}
    a, b, c = (one_per_shard[s] for s in range(3))
    words = needle_of(world["docs"][3])
    put = call(
        router, "PUT", f"/documents/{a}", json={"title": "", "text": "sku one", "fields": {"sku": "ab-1", "price": 3}}
    )
    assert put.status_code == 200, put.text
    assert call(router, "GET", f"/documents/{a}").json()["fields"] == {"sku": "ab-1", "price": 3}
    put = call(router, "PUT", f"/documents/{b}", json={"text": words, "fields": {"sku": "2024-05-01", "price": 4.0}})
    assert put.status_code == 200, put.text
    assert call(router, "GET", f"/documents/{b}").json()["fields"] == {"sku": "2024-05-01", "price": 4}
    assert router.servers[1].collection.store.field_types()["sku"] == "keyword"  # type: ignore[union-attr]
    found = call(router, "POST", "/search", json={"query": words, "filter": {"term": {"sku": "2024-05-01"}}}).json()
    assert [h["id"] for h in found["hits"]] == [b] and found["matched"] == 1
    batch = [
        {"id": c, "text": "fine", "fields": {"sku": "x"}},
        {"id": "typed-late", "text": "bad", "fields": {"price": "cheap"}},
    ]
    refused = call(router, "POST", "/documents", json={"documents": batch})
    assert (
        refused.status_code == 409 and "field 'price' has type integer, was given keyword" in refused.json()["detail"]
    )
    assert [call(router, "GET", f"/documents/{d['id']}").status_code for d in batch] == [404, 404]
    bad = call(router, "PUT", f"/documents/{c}", json={"text": "x", "fields": {"nested": {"no": 1}}})
    assert bad.status_code == 422 and "document.fields.nested" in bad.json()["detail"]
    odd = {shard_of(f"odd-{i}", 3): f"odd-{i}" for i in range(30)}
    assert router.servers[0].put([{"id": odd[0], "title": "", "text": "odd", "fields": {"odd": 1}}]).status == 200
    assert router.servers[2].put([{"id": odd[2], "title": "", "text": "odd", "fields": {"odd": "one"}}]).status == 200
    for response in (
        call(router, "POST", "/search", json={"query": "odd", "filter": {"exists": {"field": "odd"}}}),
        call(router, "PUT", f"/documents/{c}", json={"text": "odd", "fields": {"odd": 2}}),
    ):
        assert response.status_code == 409, response.text
        assert "field 'odd' has different types on the shards (integer on shard 0, keyword on shard 2)" in response.text
    assert call(router, "GET", f"/documents/{c}").status_code == 404
    for doc_id in (a, b, odd[0], odd[2]):  # the module's later rankings are over the world's documents
        assert call(router, "DELETE", f"/documents/{doc_id}").status_code == 200


def test_the_router_refuses_filtered_read_keys_at_start() -> None:
    """Per-key visibility is a single server's: a router given SSI_READ_KEYS does not start (never a filtered key
    that sees every document)."""
    settings = Settings(read_keys={"acme-read-key-0001": {"term": {"tenant": "acme"}}})
    with pytest.raises(ClusterIndexError, match="SSI_READ_KEYS .* not supported by the sharded cluster"):
        build_app(settings, Fanout(LocalShards([])))


def test_one_shard_and_three_shards_answer_alike(world: dict, indexes: dict[int, Path], router: Router) -> None:
    single = Router(indexes[1])
    try:
        for query in probe_queries(world["docs"], 3, seed=11):
            one = call(single, "POST", "/search", json={"query": query, "k": 10}).json()
            three = call(router, "POST", "/search", json={"query": query, "k": 10}).json()
            assert [h["id"] for h in one["hits"]] == [h["id"] for h in three["hits"]]
            assert [h["snippet"] for h in one["hits"]] == [h["snippet"] for h in three["hits"]]
    finally:
        single.close()


def test_a_write_goes_to_its_owner_shard_only(world: dict, router: Router) -> None:
    doc_id = "written/by api"
    owner = shard_of(doc_id, 3)
    words = f"{needle_of(world['docs'][0])} {needle_of(world['docs'][1])}"
    response = call(router, "PUT", "/documents/written%2Fby%20api", json={"title": "Zyxwv", "text": words})
    assert response.status_code == 200, response.text
    held = [server.collection.store.get(doc_id) is not None for server in router.servers]  # type: ignore[union-attr]
    assert held == [shard == owner for shard in range(3)]
    hits = call(router, "POST", "/search", json={"query": words, "k": 3}).json()["hits"]
    assert hits and hits[0]["id"] == doc_id
    assert call(router, "GET", "/documents/written%2Fby%20api").json()["title"] == "Zyxwv"
    batch = [{"id": f"batch-{i}", "title": "", "text": f"{needle_of(world['docs'][i + 2])} {words}"} for i in range(6)]
    assert call(router, "POST", "/documents", json={"documents": batch}).status_code == 200
    assert call(router, "DELETE", "/documents/written%2Fby%20api").status_code == 200
    assert call(router, "GET", "/documents/written%2Fby%20api").status_code == 404
    hits = call(router, "POST", "/search", json={"query": words, "k": 10}).json()["hits"]
    now = Oracle(world["bundle"], [*world["docs"], *(Document(**d) for d in batch)])  # the collection after the writes
    assert_same_ranking(hits, now, words, 10)
    assert {h["id"] for h in hits} >= {d["id"] for d in batch[:3]}


def test_bad_requests_get_the_single_nodes_errors(world: dict, indexes: dict[int, Path], router: Router) -> None:
    assert call(router, "POST", "/search", json={"query": "x", "k": 0}).status_code == 422
    assert call(router, "POST", "/search", json={"query": "x" * 5000}).status_code == 422
    assert call(router, "GET", "/documents/no-such-doc").status_code == 404
    assert call(router, "GET", "/documents/no-such-doc/similar").status_code == 404
    assert call(router, "PUT", "/documents/x", json={"title": "", "text": ""}).status_code == 422
    twice = {"documents": [{"id": "t1", "text": "a"}, {"id": "t1", "text": "b"}]}
    assert call(router, "POST", "/documents", json=twice).status_code == 409
    for url in ("/documents/no-such-doc/similar?k=2&k=3", "/words/any/nearest?k=abc&k=3"):
        repeated = call(router, "GET", url)
        assert repeated.status_code == 422 and "given 2 times" in repeated.json()["detail"], url
    keyless = Router(indexes[1])  # no SSI_API_KEY, no insecure writes: writes are refused as by `ssi serve`
    try:
        assert call(keyless, "PUT", "/documents/x", json={"text": "a"}).status_code == 403
    finally:
        keyless.close()
    with pytest.raises(ClusterIndexError, match="already holds an index"):
        build_index(world["corpus"], world["bundle"], indexes[1], 2)


def test_merge_orders_by_score_then_id_and_pages() -> None:
    def hit(doc_id: str, score: float) -> dict:
        return {"id": doc_id, "title": "", "snippet": "", "score": score, "semantic": score, "lexical": 0.0}

    a = {"hits": [hit("a1", 3.0), hit("a2", 1.0)], "query_words": 2, "candidates": 5}
    b = {"hits": [hit("b1", 2.0), hit("a0", 1.0)], "query_words": 2, "candidates": 7}
    result = merge([a, b], k=2, offset=1)
    assert [h.id for h in result.hits] == ["b1", "a0"] and result.candidates == 12


def test_an_index_whose_corpus_types_a_field_two_ways_is_refused(world: dict, tmp_path: Path) -> None:
    """Each shard's store types a field by its first document there; the build refuses shards that disagree (one
    type per name in a cluster), naming the field and the shards, and leaves nothing behind."""
    ids = {shard_of(f"two-{i}", 2): f"two-{i}" for i in range(10)}
    docs = [Document(ids[0], "", "first words", {"size": 3}), Document(ids[1], "", "other words", {"size": "large"})]
    out = tmp_path / "index"
    with pytest.raises(
        ClusterIndexError, match="field 'size' has values of different types .*integer on shard 0, keyword on shard 1"
    ):
        build_index(write_corpus(tmp_path / "two.jsonl", docs), world["bundle"], out, 2)
    assert not out.exists()


def test_a_schema_file_types_a_field_alike_on_every_shard(world: dict, tmp_path: Path) -> None:
    """`ssi index --schema`: declared types are fixed on every shard before its documents, so a whole number on one
    shard and a fraction on another are one float field (undeclared, the build refuses them: integer and float)."""
    ids = {shard_of(f"two-{i}", 2): f"two-{i}" for i in range(10)}
    docs = [Document(ids[0], "", "first words", {"size": 3}), Document(ids[1], "", "other words", {"size": 2.5})]
    corpus = write_corpus(tmp_path / "sizes.jsonl", docs)
    with pytest.raises(ClusterIndexError, match="field 'size' has values of different types"):
        build_index(corpus, world["bundle"], tmp_path / "undeclared", 2)
    manifest = build_index(corpus, world["bundle"], tmp_path / "declared", 2, declared={"size": "float"})
    assert [entry.fields for entry in manifest.entries] == [{"size": "float"}] * 2


def test_cli_index_and_its_errors(world: dict, tmp_path: Path) -> None:
    ssi = Path(sys.executable).with_name("ssi")
    out = tmp_path / "idx"
    args = [str(ssi), "index", "--bundle", str(world["bundle"]), "--corpus", str(world["corpus"]), "--out", str(out)]
    ok = subprocess.run([*args, "--shards", "2"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "indexed 300 documents into 2 shards" in ok.stdout
    again = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "already holds an index" in again.stderr and "Traceback" not in again.stderr
    missing = subprocess.run(
        [*args[:5], str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "other")], capture_output=True, text=True
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    schema = tmp_path / "schema.json"
    schema.write_text('{"size": "huge"}', encoding="utf-8")
    bad = subprocess.run(
        [*args[:-1], str(tmp_path / "third"), "--schema", str(schema)], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "field 'size' has unknown type 'huge'" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "third").exists()


def test_the_single_node_path_never_imports_ray() -> None:
    """`ssi serve`, `ssi --help` and `ssi index` without --ray load no Ray module."""
    code = (
        "import sys; from ssi_cli.main import build_app; "
        "[build_app(c) for c in (None, 'serve', 'index', 'cluster')]; "
        "import service.app, cluster.index_job, cluster.http, cluster.fanout; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'ray'))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_the_entry_routes_index_and_cluster_to_the_cluster_layer() -> None:
    import typer

    from cluster.cli import register
    from ssi_cli.main import CLUSTER_COMMANDS, halves_for

    app = typer.Typer()
    register(app)
    assert {info.name for info in [*app.registered_commands, *app.registered_groups]} == CLUSTER_COMMANDS
    assert all(halves_for(command) == ("cluster",) for command in CLUSTER_COMMANDS)
    assert "cluster" in halves_for(None)  # `ssi --help` lists them


def test_a_shard_that_stays_down_is_a_503_naming_it_never_a_partial_ranking(router: Router) -> None:
    """`retrying` retries a dead replica, then gives up with ShardUnavailable; the router answers 503."""
    import asyncio

    from cluster.fanout import ShardUnavailable, retrying

    calls = 0

    async def dead() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("replica died")

    with pytest.raises(ShardUnavailable, match="shard 2 did not answer within 0.5s") as raised:
        asyncio.run(retrying(dead, 2, 0.5, (ConnectionError,)))
    assert calls >= 2 and raised.value.status_code == 503

    shards = router.client._transport.app.state.fanout.shards  # type: ignore[attr-defined]
    real = shards.call

    async def one_down(shard: int, method: str, *args: object) -> object:
        if shard == 1:
            return await retrying(dead, 1, 0.2, (ConnectionError,))
        return await real(shard, method, *args)

    shards.call = one_down
    try:
        response = call(router, "POST", "/search", json={"query": "anything", "k": 5})
    finally:
        shards.call = real
    assert response.status_code == 503
    assert "shard 1 did not answer" in response.json()["detail"] and "no partial ranking" in response.json()["detail"]


def test_a_shard_call_that_never_answers_is_a_503_naming_it_after_the_timeout() -> None:
    """Ray Serve queues a call while a shard has no live replica: `timeout_seconds` bounds that wait."""
    import asyncio

    from cluster.fanout import ShardUnavailable, retrying

    async def queued() -> None:
        await asyncio.sleep(3600)

    started = time.monotonic()
    with pytest.raises(ShardUnavailable, match=r"shard 4 did not answer within 0.3s \(no answer\)"):
        asyncio.run(retrying(queued, 4, 30.0, (ConnectionError,), timeout_seconds=0.3))
    assert time.monotonic() - started < 2.0

    async def dead() -> None:
        raise ConnectionError("replica died")

    with pytest.raises(ShardUnavailable, match=r"shard 0 did not answer within 0.4s \(ConnectionError\)"):
        asyncio.run(retrying(dead, 0, 30.0, (ConnectionError,), timeout_seconds=0.4))


def test_model_words_and_metrics_answer_as_on_the_single_node(world: dict, router: Router) -> None:
    """GET /model, /words/{word}/nearest and /metrics exist on the router with the single node's bodies."""
    from ssi.bundle import load_bundle
    from ssi.words import nearest_words

    bundle = load_bundle(world["bundle"])
    model = call(router, "GET", "/model")
    assert model.status_code == 200, model.text
    body = model.json()
    assert body["content_hash"] == bundle.content_hash and body["form"] == bundle.manifest.form
    assert body["index"]["shards"] == 3 and len(body["index"]["per_shard"]) == 3
    assert body["index"]["documents"] == sum(s["documents"] for s in body["index"]["per_shard"]) >= len(world["docs"])
    word = bundle.vocab.words[5]
    nearest = call(router, "GET", f"/words/{word}/nearest", params={"k": 4})
    assert nearest.status_code == 200, nearest.text
    expected = [n.word for n in nearest_words(bundle.form, bundle.vocab, word, 4)]
    assert [n["word"] for n in nearest.json()["neighbours"]] == expected
    assert call(router, "GET", "/words/qqqxxyz/nearest").status_code == 404
    assert call(router, "GET", f"/words/{word}/nearest", params={"k": 0}).status_code == 422
    call(router, "POST", "/search", json={"query": word, "k": 3})
    exposition = call(router, "GET", "/metrics").text
    assert 'ssi_http_requests_total{method="POST",route="/search",status="200"}' in exposition


def test_the_router_turns_away_what_its_admission_limits_cannot_take(world: dict, indexes: dict[int, Path]) -> None:
    """One search slot, no queue: of two searches at once, one is answered and one gets 429 with Retry-After."""
    import asyncio

    busy = Router(indexes[1], max_concurrency=1, max_queue=0)
    try:
        query = probe_queries(world["docs"], 1, seed=21)[0]

        async def both() -> list[httpx.Response]:
            ask = {"json": {"query": query, "k": 10}}
            return list(await asyncio.gather(*(busy.client.post("/search", **ask) for _ in range(2))))

        statuses = sorted(r.status_code for r in asyncio.run(both()))
        assert statuses == [200, 429]
        assert call(busy, "POST", "/search", json={"query": query, "k": 10}).status_code == 200  # the slot is back
    finally:
        busy.close()


@pytest.mark.parametrize("index_type", ["hnsw", "ivf"])
def test_shards_of_an_approximate_index_build_load_and_answer(world: dict, tmp_path: Path, index_type: str) -> None:
    """HNSW and IVF shards go through the same build, snapshot and load; on ~100 documents a shard
    (efSearch 128 ≥ its size; IVF's few lists all probed) their merged answer is the exact ranking."""
    out = tmp_path / index_type
    manifest = build_index(world["corpus"], world["bundle"], out, 3, index_type=index_type, batch_size=64)
    assert manifest.index_type == index_type
    router = Router(out)
    try:
        assert all(s.collection.ready_state().config.index_type == index_type for s in router.servers)
        for query in probe_queries(world["docs"], 4, seed=13):
            response = call(router, "POST", "/search", json={"query": query, "k": 10})
            assert response.status_code == 200, response.text
            assert_same_ranking(response.json()["hits"], world["oracle"], query, 10)
    finally:
        router.close()


def test_a_shard_whose_store_is_missing_refuses_to_start_instead_of_serving_empty(
    indexes: dict[int, Path], tmp_path: Path
) -> None:
    """An empty shard folder (a volume not mounted on the node a replica restarts on: its mount point is there,
    empty) must not come back as an empty shard, searched as if it held nothing."""
    import shutil

    copy = Path(shutil.copytree(indexes[3], tmp_path / "idx"))
    entry = read_manifest(copy).entries[1]
    shutil.move(copy / entry.folder, tmp_path / "away")
    (copy / entry.folder).mkdir()
    with pytest.raises(ClusterIndexError, match="shard 1: its store .* is missing"):
        ShardServer(str(copy), 1)
    assert not any((copy / entry.folder).iterdir())  # nothing was created in its place
    (copy / entry.folder).rmdir()
    shutil.move(tmp_path / "away", copy / entry.folder)
    server = ShardServer(str(copy), 1)
    try:
        assert server.collection.describe()["documents"] >= entry.documents > 0  # other tests wrote to this index
    finally:
        server.close()


def test_a_reload_through_the_router_swaps_every_shard_or_none(world: dict, tmp_path: Path) -> None:
    """POST /admin/reload on the router: keys and allowed folders as on the single node; a bundle a shard cannot
    load swaps no shard; a good one swaps all three, the merged ranking is the new bundle's brute force, and the
    manifest records it, so a shard started again serves it too. Read-only replicas refuse (403), none swapped."""
    from ssi.bundle import load_bundle
    from tests.service.service_testing import API_KEY, make_bundle

    docs: list[Document] = world["docs"]
    other = make_bundle(world["bundle"].parent / "bundle-reloaded", docs, seed=23)
    new_oracle = Oracle(other, docs)
    old_hash = load_bundle(world["bundle"]).content_hash
    index = tmp_path / "s3"
    build_index(world["corpus"], world["bundle"], index, 3, batch_size=64)
    router = Router(index, api_key=API_KEY)
    key = {"X-API-Key": API_KEY}
    query = probe_queries(docs, 1, seed=31)[0]
    try:
        assert call(router, "POST", "/admin/reload", json={"bundle": str(other)}).status_code == 401
        outside = call(router, "POST", "/admin/reload", json={"bundle": str(tmp_path)}, headers=key)
        assert outside.status_code == 403 and "allowed bundle folder" in outside.json()["detail"]
        broken = world["bundle"].parent / "not-a-bundle"
        broken.mkdir(exist_ok=True)
        refused = call(router, "POST", "/admin/reload", json={"bundle": str(broken)}, headers=key)
        assert refused.status_code == 422 and "cannot reload" in refused.json()["detail"]
        nul = call(router, "POST", "/admin/reload", json={"bundle": f"{other}\x00"}, headers=key)
        assert nul.status_code == 422 and "NUL byte" in nul.text
        assert call(router, "GET", "/model").json()["content_hash"] == old_hash
        assert all(s.collection.ready_state().bundle.content_hash == old_hash for s in router.servers)
        hits = call(router, "POST", "/search", json={"query": query, "k": 10}).json()["hits"]
        assert_same_ranking(hits, world["oracle"], query, 10)

        response = call(router, "POST", "/admin/reload", json={"bundle": str(other)}, headers=key)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["previous_content_hash"] == old_hash
        assert answer["content_hash"] == new_oracle.bundle.content_hash and answer["documents"] == len(docs)
        assert all(s.collection.ready_state().bundle.content_hash == answer["content_hash"] for s in router.servers)
        for probe in probe_queries(docs, 5, seed=32):
            hits = call(router, "POST", "/search", json={"query": probe, "k": 10}).json()["hits"]
            assert_same_ranking(hits, new_oracle, probe, 10)
        assert read_manifest(index).bundle_hash == answer["content_hash"]
        assert call(router, "GET", "/cluster").json()["index"]["bundle_hash"] == answer["content_hash"]
        router.servers[1].close()  # a replica started again reads the manifest: the new bundle
        router.servers[1] = ShardServer(str(index), 1)
        assert router.servers[1].collection.ready_state().bundle.content_hash == answer["content_hash"]
        hits = call(router, "POST", "/search", json={"query": query, "k": 10}).json()["hits"]
        assert_same_ranking(hits, new_oracle, query, 10)
    finally:
        router.close()
