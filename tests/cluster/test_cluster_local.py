"""The cluster layer without Ray: sharded index build, the router's merge and write routing, errors, imports.

The router (cluster.http over cluster.fanout) runs in-process over ShardServer objects here
(LocalShards); tests/cluster/test_cluster_ray.py runs the same router and shards on Ray Serve.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster.fanout import merge
from cluster.index_job import build_index
from cluster.manifest import ClusterIndexError, read_manifest
from cluster.shard_server import ShardServer
from cluster.sharding import shard_of
from ssi.records import Document
from tests.cluster.router_testing import Router, call
from tests.service.service_testing import Oracle, assert_same_ranking, needle_of, probe_queries

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def indexes(world: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("indexes")
    return {
        n: build_index(world["corpus"], world["bundle"], root / f"s{n}", n, batch_size=64) and root / f"s{n}"
        for n in (1, 3)
    }


@pytest.fixture(scope="module")
def router(indexes: dict[int, Path]) -> Iterator[Router]:
    r = Router(indexes[3], insecure_writes=True)
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
