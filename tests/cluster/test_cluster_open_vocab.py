"""The open vocabulary on a sharded index (SSI_OPEN_VOCAB on the router; cluster.fanout): each shard holds its own
documents' new words, and the router weighs them by the cluster's counts, so the merged ranking is one node's.

The router runs in process over ShardServer objects (cluster.fanout.LocalShards, as in test_cluster_local.py);
tests/cluster/test_cluster_ray.py checks the same on Ray Serve. The bundle (BM25) is trained on the first 150
documents of the corpus, whose last 50 bring words it never saw; the index job writes every shard's open postings.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cluster.fanout import LocalShards
from cluster.index_job import build_index
from cluster.manifest import read_manifest
from cluster.shard_server import Reply, ShardServer
from cluster.sharding import shard_of
from service.settings import CollectionSpec
from service.snapshot import snapshots
from ssi.bundle import load_bundle
from ssi.records import Document
from ssi.tokenize import tokenize
from tests.cluster.router_testing import Router, call
from tests.service.service_testing import (
    Oracle,
    ThreadServer,
    assert_same_ranking,
    make_bundle,
    make_corpus,
    probe_queries,
    write_corpus,
)

SHARDS = 3
# Words no generated document holds (make_corpus spells its words with other letters) and the bundle lacks.
X, Y, LONE = "wyxeq", "jochiw", "quuxblarg"


class CountingShards(LocalShards):
    """LocalShards noting each shard call's method: how many round trips a request took."""

    def __init__(self, servers: list[Any]) -> None:
        super().__init__(servers)
        self.calls: list[tuple[int, str]] = []

    async def call(self, shard: int, method: str, *args: Any) -> Reply:
        self.calls.append((shard, method))
        return await super().call(shard, method, *args)


def cli() -> typer.Typer:
    """`ssi index` and `ssi cluster`, in process."""
    from cluster.cli import register

    app = typer.Typer()
    register(app)
    return app


def new_word_of(doc: Document, bundle: Path, docs: list[Document] | None = None) -> str:
    """A word of `doc` that the bundle lacks, and with `docs` that no other of them holds (its needle)."""
    vocab = load_bundle(bundle, mmap=False).vocab
    tokens = tokenize(doc.text)
    others = {t for d in docs or () if d.id != doc.id for t in tokenize(d.text)}
    return next(t for t, i in zip(tokens, vocab.ids_of(tokens).tolist(), strict=True) if i < 0 and t not in others)


def id_on(shard: int, prefix: str) -> str:
    """A document id that shard `shard` of SHARDS owns."""
    return next(f"{prefix}-{i}" for i in range(1000) if shard_of(f"{prefix}-{i}", SHARDS) == shard)


@pytest.fixture(scope="module")
def open_world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("open-world")
    docs = make_corpus(200, seed=9, vocab_words=400)
    bundle = make_bundle(root / "bundle", docs[:150], n_dims=16, seed=3, lexical="bm25")
    corpus = write_corpus(root / "corpus.jsonl", docs)
    index = root / "index"
    args = ["index", "--bundle", str(bundle), "--corpus", str(corpus), "--out", str(index), "--shards", str(SHARDS)]
    built = CliRunner().invoke(cli(), [*args, "--open-vocab"])  # `ssi index --open-vocab`
    assert built.exit_code == 0, built.output
    return {"root": root, "docs": docs, "bundle": bundle, "corpus": corpus, "index": index}


@pytest.fixture(scope="module")
def router(open_world: dict) -> Iterator[Router]:
    r = Router(open_world["index"], shards=CountingShards, insecure_writes=True, open_vocab=True)
    yield r
    r.close()


def put(router: Router, doc: Document) -> None:
    response = call(router, "PUT", f"/documents/{doc.id}", json={"title": doc.title, "text": doc.text})
    assert response.status_code == 200, response.text


def search(router: Router, query: str, k: int = 10) -> list[dict]:
    response = call(router, "POST", "/search", json={"query": query, "k": k})
    assert response.status_code == 200, response.text
    return response.json()["hits"]


def test_each_shard_starts_from_the_open_postings_the_index_job_wrote(open_world: dict, router: Router) -> None:
    """`ssi index --open-vocab` writes open_vocab.json into each shard's snapshot; the shards load it (no
    recomputation) and together hold the single node's postings."""
    assert len(router.servers) == read_manifest(open_world["index"]).shards == SHARDS
    held = 0
    for server in router.servers:
        state = server.collection.ready_state()
        assert state.report.source == "cache", state.report
        assert (Path(state.report.snapshot or "") / "open_vocab.json").is_file()
        assert list(snapshots(state.folder))  # the job's snapshot, in the folder the shard looks in
        held += state.open.n_postings
    one_node = Oracle(open_world["bundle"], open_world["docs"], open_vocab=True).open
    assert one_node is not None and held == one_node.n_postings > 0


def test_a_word_written_after_training_is_the_first_hit_and_leaves_with_its_document(
    open_world: dict, router: Router
) -> None:
    new = Document(id="written-later", title="Quuxblarg notes", text=f"{LONE} fermentation of {LONE} in barley")
    assert search(router, LONE) == []
    put(router, new)
    docs = [*open_world["docs"], new]
    for query in (LONE, f"{LONE} {open_world['docs'][0].title}"):
        hits = search(router, query, 5)
        assert hits and hits[0]["id"] == new.id, (query, hits)
        assert_same_ranking(hits, Oracle(open_world["bundle"], docs, open_vocab=True), query, 5)
    owner = router.servers[shard_of(new.id, SHARDS)].collection
    assert owner.ready_state().open.df().get(LONE, 0) == 1
    assert call(router, "DELETE", f"/documents/{new.id}").status_code == 200
    assert owner.ready_state().open.df().get(LONE, 0) == 0  # its postings are gone
    assert search(router, LONE) == []


def test_new_words_spread_unevenly_over_shards_rank_as_on_one_node(open_world: dict, router: Router) -> None:
    """X is in one document of shard 0 (p) and eight of shard 1; Y in three of shard 1 (q among them). The cluster
    ranks q (Y: rarer over the cluster) above p, as one node does; each shard's own counts would rank p above q."""
    filler = " ".join(open_world["docs"][0].text.split()[:4])
    longer = " ".join(open_world["docs"][1].text.split()[:12])
    p = Document(id=id_on(0, "p"), title="", text=f"{X} {filler}")
    q = Document(id=id_on(1, "q"), title="", text=f"{Y} {filler}")
    more_x = [Document(id=id_on(1, f"x{i}"), title="", text=f"{X} {longer}") for i in range(8)]
    more_y = [Document(id=id_on(1, f"y{i}"), title="", text=f"{Y} {longer}") for i in range(2)]
    written = [p, q, *more_x, *more_y]
    for doc in written:
        put(router, doc)
    docs = [*open_world["docs"], *written]
    one_node = Oracle(open_world["bundle"], docs, open_vocab=True)
    query = f"{X} {Y}"
    hits = search(router, query)
    ids = [h["id"] for h in hits]
    assert ids.index(q.id) < ids.index(p.id), ids
    assert_same_ranking(hits, one_node, query, 10)
    # The test can fail: with each shard's own counts, p would come first.
    on_shard = {s: [d for d in docs if shard_of(d.id, SHARDS) == s] for s in (0, 1)}
    own_p = Oracle(open_world["bundle"], on_shard[0], open_vocab=True).scores(query)[on_shard[0].index(p)]
    own_q = Oracle(open_world["bundle"], on_shard[1], open_vocab=True).scores(query)[on_shard[1].index(q)]
    assert own_p > own_q
    later = open_world["docs"][150:]
    bundle = open_world["bundle"]
    queries = [X, Y, f"{Y} {open_world['docs'][3].title}", f"{X} {new_word_of(later[0], bundle)}"]
    queries += [f"{new_word_of(d, bundle)} {open_world['docs'][1].title}" for d in later[::9]]
    for query in queries:
        assert_same_ranking(search(router, query), one_node, query, 10)
    batch = call(router, "POST", "/search/batch", json={"queries": queries[:3], "k": 4, "offset": 2}).json()
    assert [[h["id"] for h in r["hits"]] for r in batch["results"]] == [
        [h["id"] for h in search(router, query, 6)[2:]] for query in queries[:3]
    ]
    similar = call(router, "GET", f"/documents/{q.id}/similar", params={"k": 6}).json()["hits"]
    assert_same_ranking(similar, one_node, q.full_text, 6, exclude=q.id)
    router.servers[1].close()  # started again: from its snapshot (open_vocab.json) and write log
    router.servers[1] = router.shards.servers[1] = ShardServer(str(open_world["index"]), 1, open_vocab=True)
    assert router.servers[1].collection.ready_state().open.df().get(X) == len(more_x)
    assert_same_ranking(search(router, query), one_node, query, 10)
    for doc in written:
        assert call(router, "DELETE", f"/documents/{doc.id}").status_code == 200


def test_a_query_without_new_words_ranks_as_closed_in_one_round_trip(open_world: dict, router: Router) -> None:
    """No new word held anywhere: the closed ranking, from one call per shard (no second round); a query with a new
    word asks again only the shards that hold one (or must rank it with no bundle word)."""
    closed = Oracle(open_world["bundle"], open_world["docs"])
    shards: CountingShards = router.shards  # type: ignore[assignment]
    for query in probe_queries(open_world["docs"][:150], 3, seed=4):
        shards.calls.clear()
        assert_same_ranking(search(router, query), closed, query, 10)
        assert sorted(shards.calls) == [(s, "search") for s in range(SHARDS)], (query, shards.calls)
    holder = open_world["docs"][160]  # the one document of the corpus holding its needle, a new word
    shards.calls.clear()
    search(router, f"{new_word_of(holder, open_world['bundle'], open_world['docs'])} {open_world['docs'][2].title}")
    again = (shard_of(holder.id, SHARDS), "search")
    assert sorted(shards.calls) == sorted([*((s, "search") for s in range(SHARDS)), again]), shards.calls


def test_match_weighs_new_words_by_the_cluster_as_the_single_node(open_world: dict, tmp_path: Path) -> None:
    """POST /match on an adverts index served open: the single node's adverts, scores and shared words (new words
    among them) for pages holding new words, alone, among bundle words, in a long page, and filtered."""
    from tests.cluster.test_cluster_match import assert_same_matches, write_adverts

    docs, bundle = open_world["docs"], open_world["bundle"]
    corpus = write_adverts(tmp_path / "adverts.jsonl", docs)
    index = tmp_path / "index"
    build_index(corpus, bundle, index, SHARDS, collection_type="adverts", open_vocab=True)
    later = docs[150:]
    pages = [
        f"{new_word_of(later[0], bundle)} {new_word_of(later[9], bundle)}",
        f"{new_word_of(later[4], bundle)} {docs[2].title}",
        later[3].full_text,
        " ".join(doc.text for doc in docs[100::2]),
    ]
    bodies = [{"page": page, "k": 6} for page in pages[1:]]
    bodies += [{"pages": pages[1:], "k": 4, "filters": {"category": ["cat1"]}}]
    spec = CollectionSpec(bundle=bundle, corpus=corpus, type="adverts")
    router = Router(index, collection="ads", open_vocab=True)
    try:
        with ThreadServer(bundle=bundle, cache_dir=tmp_path / "one", open_vocab=True, collections={"ads": spec}) as one:
            shared: set[str] = set()
            for body in bodies:
                sharded, single = call(router, "POST", "/match", json=body), one.client.post("/match", json=body)
                assert sharded.status_code == single.status_code == 200, (sharded.text, single.text)
                assert_same_matches(sharded.json(), single.json())
                shared |= {word for r in sharded.json()["results"] for ad in r["ads"] for word in ad["shared_words"]}
            assert shared & {new_word_of(d, bundle) for d in later}  # new words among the words that made matches
            # New words only: the adverts holding them, then adverts of score 0 to fill k (tied: any order)
            body = {"page": pages[0], "k": 6}
            sharded, single = (
                call(router, "POST", "/match", json=body).json(),
                one.client.post("/match", json=body).json(),
            )
            ads = [
                [(a["id"], a["score"], a["shared_words"]) for a in r["results"][0]["ads"]] for r in (sharded, single)
            ]
            assert [ad for ad in ads[0] if ad[1] > 0] == [ad for ad in ads[1] if ad[1] > 0] and len(ads[1][0][2]) == 1
            assert len(ads[0]) == len(ads[1]) == 6 and all(ad[1] == 0 for ad in ads[0][2:])
    finally:
        router.close()
