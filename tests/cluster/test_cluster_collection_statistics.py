"""The collection's statistics on a sharded index (SSI_OPEN_VOCAB_STATISTICS=collection on the router): every shard
weighs its lexical rows with the avg_len of the whole cluster's documents (counted by the index job, kept in
cluster.json), and every query word by the cluster's live document frequency (summed by the router, cluster.fanout),
so the merged ranking is that of ONE node holding every document with the same setting.

The router runs in process over ShardServer objects (cluster.fanout.LocalShards); the one node is the service's own
collection (service.collection.Collection) over the same documents, written and deleted alike, and both are checked
against the brute force (tests.service.service_testing.Oracle). The bundle (BM25) is trained on the first 150
documents of the corpus; the index serves the last 150, of which 50 bring words it never saw, so the collection's
statistics differ from the bundle's.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cluster.index_job import build_index
from cluster.manifest import MANIFEST_FILE, ClusterIndexError, ClusterManifest, read_manifest
from cluster.shard_server import ShardServer
from cluster.shard_settings import statistics_of
from cluster.sharding import shard_of
from service.collection import Collection
from service.metrics import Metrics
from service.settings import CollectionSpec, Settings
from ssi.records import Document
from ssi.tokenize import tokenize
from ssi.weighting import average_length
from tests.cluster.router_testing import Router, call
from tests.cluster.test_cluster_open_vocab import CountingShards, cli, id_on, new_word_of
from tests.service.service_testing import Oracle, assert_same_ranking, make_bundle, make_corpus, write_corpus

SHARDS = 3
COLLECTION_STATS = {"open_vocab": True, "open_vocab_statistics": "collection"}


@pytest.fixture(scope="module")
def stats_world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("stats-world")
    docs = make_corpus(300, seed=9, vocab_words=400)
    bundle = make_bundle(root / "bundle", docs[:150], n_dims=16, seed=3, lexical="bm25")
    served = docs[150:]
    corpus = write_corpus(root / "corpus.jsonl", served)
    index = root / "index"
    args = ["index", "--bundle", str(bundle), "--corpus", str(corpus), "--out", str(index), "--shards", str(SHARDS)]
    built = CliRunner().invoke(cli(), [*args, "--open-vocab", "--statistics", "collection"])
    assert built.exit_code == 0, built.output
    return {"root": root, "docs": docs, "served": served, "bundle": bundle, "corpus": corpus, "index": index}


@pytest.fixture(scope="module")
def router(stats_world: dict) -> Iterator[Router]:
    r = Router(stats_world["index"], shards=CountingShards, insecure_writes=True, **COLLECTION_STATS)
    yield r
    r.close()


@pytest.fixture(scope="module")
def one_node(stats_world: dict) -> Iterator[Collection]:
    """The single node: the service's collection over every document, with the collection's statistics."""
    settings = Settings(
        bundle=stats_world["bundle"],
        corpus=stats_world["corpus"],
        cache_dir=stats_world["root"] / "one-node",
        insecure_writes=True,
        **COLLECTION_STATS,  # type: ignore[arg-type]
    )
    spec = CollectionSpec(bundle=settings.bundle, corpus=settings.corpus)  # type: ignore[arg-type]
    collection = Collection("documents", spec, settings, Metrics())
    collection.load()
    yield collection
    collection.close()


def search(router: Router, query: str, k: int = 10) -> list[dict]:
    response = call(router, "POST", "/search", json={"query": query, "k": k})
    assert response.status_code == 200, response.text
    return response.json()["hits"]


def assert_as_one_node(router: Router, one_node: Collection, live: list[Document], query: str, k: int = 10) -> None:
    """The router's top k is the single node's (the same documents and scores, up to ties and float rounding) and
    the brute force's with the collection's statistics at the cluster's avg_len."""
    hits = search(router, query, k)
    single = one_node.search([query], k, 0)[0]
    scale = max(1.0, max((abs(s) for s in single.scores), default=0.0))
    assert len(hits) == len(single.doc_ids), (query, hits, single.doc_ids)
    for position, (hit, doc_id, score) in enumerate(zip(hits, single.doc_ids, single.scores, strict=True)):
        assert hit["score"] == pytest.approx(score, abs=1e-5 * scale), (query, position)
        if hit["id"] != doc_id:  # only documents of equal score may change places
            tied = [s for d, s in zip(single.doc_ids, single.scores, strict=True) if d == hit["id"]]
            assert tied and tied[0] == pytest.approx(score, abs=1e-5 * scale), (query, position)
    avg_len = one_node.ready_state().embedder.avg_len
    assert_same_ranking(hits, Oracle(router_bundle(router), live, statistics="collection", avg_len=avg_len), query, k)


def router_bundle(router: Router) -> Path:
    return router.servers[0].collection.ready_state().bundle.path


def queries_of(world: dict) -> list[str]:
    """Bundle words only, bundle words with new words, and new words alone."""
    served, bundle = world["served"], world["bundle"]
    out = [d.title for d in served[:6]] + [" ".join(d.text.split()[:4]) for d in served[10:60:10]]
    later = served[-50:]
    out += [f"{new_word_of(d, bundle)} {served[i].title}" for i, d in enumerate(later[::10])]
    out += [new_word_of(later[3], bundle), f"{new_word_of(later[5], bundle)} {new_word_of(later[8], bundle)}"]
    return out


def test_the_index_job_gives_every_shard_the_clusters_avg_len(
    stats_world: dict, router: Router, one_node: Collection
) -> None:
    """`ssi index --statistics collection` counts every document's tokens as the single node does, records their
    avg_len in cluster.json and in every shard's open_vocab.json, and each shard loads its snapshot with it."""
    served = stats_world["served"]
    avg_len = average_length(sum(len(tokenize(d.full_text)) for d in served), len(served))
    manifest = read_manifest(stats_world["index"])
    assert manifest.avg_len == avg_len == one_node.ready_state().embedder.avg_len
    bundle_avg_len = one_node.ready_state().bundle.vocab.bm25.avg_len  # type: ignore[union-attr]
    assert abs(avg_len - bundle_avg_len) > 1.0  # the collection is not the training corpus
    for server in router.servers:
        state = server.collection.ready_state()
        assert state.report.source == "cache", state.report
        assert state.embedder.avg_len == avg_len  # not the shard's own documents'
        saved = json.loads((Path(state.report.snapshot or "") / "open_vocab.json").read_text(encoding="utf-8"))
        assert saved["avg_len"] == avg_len
        described = state.describe()["open_vocab"]
        assert (described["statistics"], described["avg_len"]) == ("collection", avg_len)
    own = [d for d in served if shard_of(d.id, SHARDS) == 0]
    assert average_length(sum(len(tokenize(d.full_text)) for d in own), len(own)) != avg_len  # the test can fail


def test_the_manifest_keeps_the_avg_len_and_reads_an_index_without_one(stats_world: dict, tmp_path: Path) -> None:
    """cluster.json round-trips avg_len; a manifest written before it existed reads as built with the bundle's."""
    manifest = read_manifest(stats_world["index"])
    assert ClusterManifest.model_validate_json(manifest.model_dump_json()) == manifest
    assert manifest.index_tag.endswith("-statscollection")
    older = tmp_path / "older"
    shutil.copytree(stats_world["index"], older)
    data = json.loads((older / MANIFEST_FILE).read_text(encoding="utf-8"))
    del data["avg_len"]
    (older / MANIFEST_FILE).write_text(json.dumps(data), encoding="utf-8")
    assert read_manifest(older).avg_len is None


def test_sharded_ranking_is_one_nodes_through_writes_and_deletes(
    stats_world: dict, router: Router, one_node: Collection
) -> None:
    """Queries of bundle words only, with new words, and of new words alone rank as on one node, before and after
    writes and deletes routed through the router (a new word, and bundle words whose document frequency moves), and
    after a shard starts again from its snapshot or computes its index again."""
    served, bundle = list(stats_world["served"]), stats_world["bundle"]
    queries = queries_of(stats_world)
    for query in queries:
        assert_as_one_node(router, one_node, served, query)
    # The test can fail: the bundle's statistics (or each shard's own) rank otherwise.
    own = Oracle(bundle, served, statistics="collection", avg_len=one_node.ready_state().embedder.avg_len)
    bundled = Oracle(bundle, served)
    assert any(np.abs(own.scores(q) - bundled.scores(q)).max() > 1e-3 for q in queries)
    common = " ".join(served[0].text.split()[:3])
    written = [
        Document(id=id_on(0, "new"), title="Quuxblarg notes", text=f"quuxblarg fermentation {common}"),
        *(Document(id=id_on(1, f"more{i}"), title="", text=f"{common} {served[i + 1].text}") for i in range(6)),
        Document(id=id_on(2, "lone"), title="", text=f"quuxblarg {served[7].text}"),
    ]
    for doc in written:
        response = call(router, "PUT", f"/documents/{doc.id}", json={"title": doc.title, "text": doc.text})
        assert response.status_code == 200, response.text
        one_node.put([doc])
    deleted = [served[2].id, served[40].id, served[-3].id]
    for doc_id in deleted:
        assert call(router, "DELETE", f"/documents/{doc_id}").status_code == 200
        one_node.delete(doc_id)
    live = [d for d in [*served, *written] if d.id not in deleted]
    for query in [*queries, "quuxblarg", f"quuxblarg {common}", common]:
        assert_as_one_node(router, one_node, live, query)
    similar = call(router, "GET", f"/documents/{written[0].id}/similar", params={"k": 6}).json()["hits"]
    avg_len = one_node.ready_state().embedder.avg_len
    oracle = Oracle(bundle, live, statistics="collection", avg_len=avg_len)
    assert_same_ranking(similar, oracle, written[0].full_text, 6, exclude=written[0].id)
    # Shard 1 started again from its snapshot and write log, then with its snapshot gone (its index computed again
    # from its store): the cluster's avg_len either way, not its own documents'.
    for recompute in (False, True):
        router.servers[1].close()
        if recompute:
            shutil.rmtree(router.servers[1].collection.ready_state().folder)
        restarted = ShardServer(str(stats_world["index"]), 1, 1, True, 1_000_000, "collection")
        router.servers[1] = router.shards.servers[1] = restarted  # type: ignore[attr-defined]
        state = restarted.collection.ready_state()
        assert state.report.source == ("computed" if recompute else "cache")
        assert state.embedder.avg_len == avg_len
        for query in queries[:4] + ["quuxblarg"]:
            assert_as_one_node(router, one_node, live, query)


def test_every_query_with_a_held_word_takes_the_second_round_trip(stats_world: dict, router: Router) -> None:
    """With the collection's statistics a query's bundle words need the cluster's counts: the shards holding one are
    asked again; a query whose words no shard holds is answered in one round trip."""
    shards: CountingShards = router.shards  # type: ignore[assignment]
    query = stats_world["served"][4].title  # bundle words only
    states = [server.collection.ready_state() for server in router.servers]
    assert all(not state.embedder.query_words([query])[0].new for state in states)  # type: ignore[index]
    holding = [s for s, state in enumerate(states) if state.shard_counts([query])[0][0] is not None]
    assert holding  # shards holding one of its bundle words
    first = [(s, "search") for s in range(SHARDS)]
    shards.calls.clear()
    search(router, query)
    assert sorted(shards.calls) == sorted([*first, *((s, "search") for s in holding)]), shards.calls
    shards.calls.clear()
    search(router, "nowordanyshardholds")
    assert sorted(shards.calls) == first, shards.calls


def test_an_index_built_without_the_collections_statistics_is_refused(stats_world: dict, tmp_path: Path) -> None:
    """Served with SSI_OPEN_VOCAB_STATISTICS=collection, an index whose cluster.json has no avg_len (built with the
    bundle's statistics) is refused with what to do, before a cluster starts and by a shard; closed, or with the
    bundle's statistics, it serves."""
    index = tmp_path / "bundle-index"
    build_index(stats_world["corpus"], stats_world["bundle"], index, 2, open_vocab=True)
    manifest = read_manifest(index)
    assert manifest.avg_len is None
    with pytest.raises(ClusterIndexError, match="built without the collection's statistics"):
        statistics_of(Settings(**COLLECTION_STATS), manifest)  # type: ignore[arg-type]
    with pytest.raises(ClusterIndexError, match="ssi index --statistics collection"):
        ShardServer(str(index), 0, 1, True, 1_000_000, "collection")
    assert statistics_of(Settings(open_vocab=False, open_vocab_statistics="collection"), manifest) == "bundle"
    assert statistics_of(Settings(open_vocab=True), manifest) == "bundle"
    env = {"SSI_OPEN_VOCAB_STATISTICS": "collection"}  # SSI_OPEN_VOCAB unset: on
    served = CliRunner().invoke(cli(), ["cluster", "serve", "--index", str(index)], env=env)
    assert served.exit_code == 2, served.output
    assert "built without the collection's statistics" in served.output


def test_match_weighs_every_word_by_the_cluster_as_the_single_node(stats_world: dict, tmp_path: Path) -> None:
    """POST /match on an adverts index served with the collection's statistics: the single node's adverts, scores
    and shared words (bundle words weighed by the cluster's idf, new words among them), filtered or not."""
    from tests.cluster.test_cluster_match import assert_same_matches, write_adverts
    from tests.service.service_testing import ThreadServer

    served, bundle = stats_world["served"], stats_world["bundle"]
    corpus = write_adverts(tmp_path / "adverts.jsonl", served)
    index = tmp_path / "index"
    build_index(corpus, bundle, index, SHARDS, collection_type="adverts", open_vocab=True, statistics="collection")
    later = served[-50:]
    pages = [
        f"{new_word_of(later[4], bundle)} {served[2].title}",
        served[3].full_text,
        later[3].full_text,
        " ".join(doc.text for doc in served[::3]),
    ]
    bodies: list[dict] = [{"page": page, "k": 6} for page in pages]
    bodies += [{"pages": pages, "k": 4, "filters": {"category": ["cat1"]}}]
    spec = CollectionSpec(bundle=bundle, corpus=corpus, type="adverts")
    router = Router(index, collection="ads", **COLLECTION_STATS)
    try:
        one = ThreadServer(bundle=bundle, cache_dir=tmp_path / "one", collections={"ads": spec}, **COLLECTION_STATS)
        with one:
            for body in bodies:
                sharded, single = call(router, "POST", "/match", json=body), one.client.post("/match", json=body)
                assert sharded.status_code == single.status_code == 200, (sharded.text, single.text)
                assert_same_matches(sharded.json(), single.json())
    finally:
        router.close()
