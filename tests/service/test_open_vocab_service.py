"""The open vocabulary served (ssi.open_vocab, service.open_lexical): a document written after training is found by
a word only it holds, over HTTP; deleting it takes the word out; the served top-k is the brute force of the reference
score plus the open term after writes, deletes, compaction, a snapshot and a restart. The switch (SSI_OPEN_VOCAB) is
on by default: these tests check that on is the default, that off serves and saves exactly the closed vocabulary,
and that a snapshot written on one side of the switch loads (or is rebuilt) on the other."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
import scipy.sparse as sp
from service_testing import (
    API_KEY,
    Oracle,
    ProcessServer,
    ThreadServer,
    assert_same_ranking,
    make_bundle,
    make_corpus,
    polling_client,
    worker_pids,
    write_corpus,
)

from service.collection import Collection
from service.embedding import BULK_QUERY_CHARS, Embedder, keep_top_words
from service.lexical import LexicalIndex
from service.metrics import Metrics
from service.settings import CollectionSpec, Settings
from service.snapshot import snapshots
from ssi.bundle import load_bundle
from ssi.open_vocab import QueryWords
from ssi.records import Document
from ssi.tokenize import tokenize
from ssi.weighting import average_length

KEY = {"X-API-Key": API_KEY}
POOL = 16
STATS = ("collection", "bundle")
NEW = Document("new-doc", "Quuxblarg zymurgical notes", "quuxblarg zymurgical fermentation of quuxblarg in barley")


World = tuple[list[Document], list[Document], Path, Path]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """A BM25 bundle trained on the first 150 documents of a corpus whose other 50 bring words it never saw: the
    known documents, the later ones, the known ones' corpus file and the bundle, built once (servers only read
    them; each test's index and store go to its own folder)."""
    root = tmp_path_factory.mktemp("open-vocab")
    docs = make_corpus(200, seed=9, vocab_words=400)
    bundle = make_bundle(root / "bundle", docs[:150], n_dims=16, seed=3, lexical="bm25")
    return docs[:150], docs[150:], write_corpus(root / "corpus.jsonl", docs[:150]), bundle


def _queries(docs: list[Document]) -> list[str]:
    """Queries mixing bundle words and new words (each later document's own needle is a new word)."""
    out = ["zymurgical", "quuxblarg barley", "zymurgical " + docs[0].title]
    for d in docs[150::7]:
        words = d.text.split()
        out += [" ".join(words[:3]), words[-1].strip(".") + " " + docs[1].title]
    return out


def test_a_new_word_is_found_over_http_and_leaves_with_its_document(world: World, tmp_path: Path) -> None:
    """Slow: only as the module's first test, which imports torch (the bundle's ONNX export, training.encoder) and
    the service for the whole module; its own work is one small bundle and one in-process server."""
    known, _, corpus, bundle = world
    with ThreadServer(
        bundle=bundle, corpus=corpus, cache_dir=tmp_path / "cache", api_key=API_KEY, scan_pool=POOL, open_vocab=True
    ) as server:
        assert server.client.post("/search", json={"query": "zymurgical", "k": 5}).json()["hits"] == []
        written = {"title": NEW.title, "text": NEW.text, "fields": {"tag": "new"}}
        response = server.client.put("/documents/" + quote(NEW.id, safe=""), json=written, headers=KEY)
        assert response.status_code == 200, response.text
        for query in ("zymurgical", "quuxblarg", "zymurgical " + known[0].title):
            hits = server.client.post("/search", json={"query": query, "k": 5}).json()["hits"]
            assert hits and hits[0]["id"] == NEW.id, (query, hits)
            assert_same_ranking(hits, Oracle(bundle, [*known, NEW], open_vocab=True), query, 5)
            # Filtered (service.fields: an exact scan of the matching rows, the open term included).
            everything = {"not": {"term": {"tag": "other"}}}
            response = server.client.post("/search", json={"query": query, "k": 5, "filter": everything})
            assert [(h["id"], pytest.approx(h["score"])) for h in response.json()["hits"]] == [
                (h["id"], h["score"]) for h in hits
            ]
            response = server.client.post("/search", json={"query": query, "k": 5, "filter": {"term": {"tag": "new"}}})
            assert [hit["id"] for hit in response.json()["hits"]] == [NEW.id]
        described = server.client.get("/model").json()["index"]["open_vocab"]
        assert described["enabled"] and described["words"] >= 2
        assert server.client.delete("/documents/" + quote(NEW.id, safe=""), headers=KEY).status_code == 200
        assert server.client.post("/search", json={"query": "zymurgical", "k": 5}).json()["hits"] == []
        assert server.client.get("/model").json()["index"]["open_vocab"]["words"] == 0


def _open_gauges(server: ThreadServer) -> dict[str, float]:
    """The open vocabulary's /metrics samples of the default collection, by metric name."""
    text = server.client.get("/metrics", headers=KEY).text
    out = {}
    for line in text.splitlines():
        if line.startswith("ssi_open_vocab_") and 'collection="documents"' in line:
            name, value = line.split("{")[0], line.rsplit(" ", 1)[1]
            out[name] = float(value)
    return out


def test_metrics_and_model_report_the_open_vocabulary_size(world: World, tmp_path: Path) -> None:
    """/metrics gauges and /model's index.open_vocab hold words, postings and dropped words, after each write;
    with the switch off, neither has them."""
    known, later, corpus, bundle = world
    with ThreadServer(
        bundle=bundle, corpus=corpus, cache_dir=tmp_path / "on", api_key=API_KEY, scan_pool=POOL, open_vocab=True
    ) as server:
        assert _open_gauges(server) == {
            "ssi_open_vocab_words": 0.0, "ssi_open_vocab_postings": 0.0, "ssi_open_vocab_dropped": 0.0,
        }  # fmt: skip
        twin = Document("twin", "Zymurgical", "quuxblarg zymurgical again")  # two postings for NEW's new words
        for doc in [NEW, twin, *later[:5]]:
            response = server.client.put(
                "/documents/" + quote(doc.id, safe=""), json={"title": doc.title, "text": doc.text}, headers=KEY
            )
            assert response.status_code == 200, response.text
        state = server.app.state.catalog.get("documents").ready_state()
        described = server.client.get("/model").json()["index"]["open_vocab"]
        assert described["postings"] == state.open.n_postings > described["words"] == state.open.n_words >= 2
        assert described["postings"] == sum(len(rows) for rows in state.open.postings.values())
        assert _open_gauges(server) == {
            "ssi_open_vocab_words": described["words"],
            "ssi_open_vocab_postings": described["postings"],
            "ssi_open_vocab_dropped": 0.0,
        }
        assert server.client.delete("/documents/" + quote(NEW.id, safe=""), headers=KEY).status_code == 200
        after = _open_gauges(server)
        assert after["ssi_open_vocab_postings"] == state.open.n_postings < described["postings"]
        assert after["ssi_open_vocab_words"] == state.open.n_words < described["words"]
    with ThreadServer(  # a cap of 1 word: the rest of a document's new words are counted as dropped
        bundle=bundle, corpus=corpus, cache_dir=tmp_path / "cap", api_key=API_KEY, scan_pool=POOL,
        open_vocab=True, open_vocab_words=1,
    ) as server:  # fmt: skip
        response = server.client.put(
            "/documents/" + quote(NEW.id, safe=""), json={"title": NEW.title, "text": NEW.text}, headers=KEY
        )
        assert response.status_code == 200, response.text
        gauges = _open_gauges(server)
        assert gauges["ssi_open_vocab_words"] == 1 and gauges["ssi_open_vocab_dropped"] >= 1
        described = server.client.get("/model").json()["index"]["open_vocab"]
        assert described["dropped"] == gauges["ssi_open_vocab_dropped"] and described["max_words"] == 1
    with ThreadServer(
        bundle=bundle, corpus=corpus, cache_dir=tmp_path / "off", api_key=API_KEY, scan_pool=POOL, open_vocab=False
    ) as server:
        server.client.put("/documents/x", json={"title": NEW.title, "text": NEW.text}, headers=KEY)
        assert _open_gauges(server) == {}
        assert "open_vocab" not in server.client.get("/model").json()["index"]


def test_the_served_ranking_is_the_brute_force_with_the_open_term(world: World, tmp_path: Path) -> None:
    """Writes, deletes, compaction, a snapshot and a restart: top-k = brute force of reference + open term."""
    known, later, corpus, bundle = world
    settings = Settings(
        bundle=bundle, corpus=corpus, cache_dir=tmp_path / "cache", insecure_writes=True, scan_pool=POOL,
        compact_dead_fraction=0.1, open_vocab=True,
    )  # fmt: skip

    def check(live: list[Document], served: Collection) -> None:
        _check(served, Oracle(bundle, live, open_vocab=True), _queries([*known, *later]))

    _through_writes(settings, known, [*later, NEW], later[::3] + known[:20], check)


def _through_writes(
    settings: Settings,
    initial: list[Document],
    added: list[Document],
    deleted: list[Document],
    check: Callable[[list[Document], Collection], None],
) -> list[Document]:
    """A collection of `initial` documents checked after it writes `added`, deletes `deleted`, compacts, and loads
    again from its snapshot; the documents live at the end."""
    first = _collection(settings)
    check(initial, first)
    first.put(added)
    live = [*initial, *added]
    check(live, first)
    gone = {d.id for d in deleted}
    for doc_id in sorted(gone):
        first.delete(doc_id)
    live = [d for d in live if d.id not in gone]
    check(live, first)
    assert first.compact(), "expected a compaction"
    check(live, first)
    first.snapshot()
    first.close()
    again = _collection(settings)
    assert again.ready_state().report.source == "cache"
    check(live, again)
    again.close()
    return live


def _collection(settings: Settings) -> Collection:
    assert settings.bundle is not None
    made = Collection("documents", CollectionSpec(bundle=settings.bundle, corpus=settings.corpus), settings, Metrics())
    made.load()
    return made


def _check(served: Collection, oracle: Oracle, queries: list[str]) -> None:
    for query in queries:
        result = served.search([query], 10, 0)[0]
        hits = [
            {"id": i, "score": s, "semantic": a, "lexical": b}
            for i, s, a, b in zip(result.doc_ids, result.scores, result.semantic, result.lexical, strict=True)
        ]
        if oracle.scores(query).any():
            assert_same_ranking(hits, oracle, query, 10)
        else:
            assert hits == [], query


def test_on_by_default_and_off_nothing_is_indexed_served_or_saved(world: World, tmp_path: Path) -> None:
    """SSI_OPEN_VOCAB unset: on. SSI_OPEN_VOCAB=false: a new word finds nothing, /model says nothing of it, a
    snapshot has no open_vocab.json."""
    known, later, corpus, bundle = world
    with ThreadServer(bundle=bundle, corpus=corpus, cache_dir=tmp_path / "on", api_key=API_KEY, scan_pool=POOL) as on:
        assert on.settings.open_vocab and "open_vocab" in on.client.get("/model").json()["index"]
        body = {"title": NEW.title, "text": NEW.text}
        put = on.client.put("/documents/" + quote(NEW.id, safe=""), json=body, headers=KEY)
        assert put.status_code == 200, put.text
        assert on.client.post("/search", json={"query": "zymurgical", "k": 5}).json()["hits"][0]["id"] == NEW.id
    with ThreadServer(
        bundle=bundle, corpus=corpus, cache_dir=tmp_path / "cache", api_key=API_KEY, scan_pool=POOL, open_vocab=False
    ) as server:
        assert not server.settings.open_vocab
        response = server.client.put(
            "/documents/" + quote(NEW.id, safe=""), json={"title": NEW.title, "text": NEW.text}, headers=KEY
        )
        assert response.status_code == 200, response.text
        assert server.client.post("/search", json={"query": "zymurgical", "k": 5}).json()["hits"] == []
        assert "open_vocab" not in server.client.get("/model").json()["index"]
    settings = Settings(
        bundle=bundle, corpus=corpus, cache_dir=tmp_path / "cache", insecure_writes=True, open_vocab=False
    )
    served = _collection(settings)
    served.put(later)
    assert served.ready_state().open.n_words == 0
    _check(served, Oracle(bundle, [*known, NEW, *later], open_vocab=False), _queries([*known, *later]))
    path = served.snapshot()
    served.close()
    assert path is not None and not (path / "open_vocab.json").exists()


def test_a_snapshot_loads_or_is_rebuilt_across_the_switch(world: World, tmp_path: Path) -> None:
    """Written on, read off: loaded from cache, closed. Written off, read on: refused and rebuilt, open."""
    known, later, corpus, bundle = world
    queries = _queries([*known, *later])
    common = dict(bundle=bundle, corpus=corpus, cache_dir=tmp_path / "cache", insecure_writes=True, scan_pool=POOL)
    opened = _collection(Settings(**common, open_vocab=True))  # type: ignore[arg-type]
    opened.put(later)
    written_on = opened.snapshot()
    opened.close()
    assert written_on is not None and (written_on / "open_vocab.json").exists()

    closed = _collection(Settings(**common, open_vocab=False))  # type: ignore[arg-type]
    assert closed.ready_state().report.source == "cache" and closed.ready_state().open.n_words == 0
    _check(closed, Oracle(bundle, [*known, *later], open_vocab=False), queries)
    closed.put([NEW])
    _check(closed, Oracle(bundle, [*known, *later, NEW], open_vocab=False), queries)
    written_off = closed.snapshot()
    closed.close()
    assert written_off is not None and not (written_off / "open_vocab.json").exists()
    for older in list(snapshots(written_off.parent))[1:]:  # only the snapshot written with the switch off is left
        shutil.rmtree(older)

    reopened = _collection(Settings(**common, open_vocab=True))  # type: ignore[arg-type]
    assert reopened.ready_state().report.source == "computed"
    assert reopened.ready_state().open.n_words > 0
    _check(reopened, Oracle(bundle, [*known, *later, NEW], open_vocab=True), queries)
    reopened.close()


def test_match_ranks_adverts_with_the_open_term_as_search_does(world: World, tmp_path: Path) -> None:
    """/match (adverts) with SSI_OPEN_VOCAB on: an advert written after training is the first match for a page
    holding a word only it has, explained by that word, ranked as the brute force of reference + open term (also
    when a filter makes the match search again wider); with the switch off the new word finds nothing.

    Slow: three in-process servers one after another (the switch on, a long page cut to its heaviest words, the
    switch off), each loading two collections, the documents and the adverts (3 s alone on two cores, 21 s in a
    full run)."""
    known, later, corpus, bundle = world
    ads = write_corpus(tmp_path / "ads.jsonl", known)
    twin = Document("twin-ad", "Plain", later[0].text)  # written after training too, without NEW's new words
    page = known[0].title + " on zymurgical brewing"
    common = dict(  # fmt: skip
        bundle=bundle,
        corpus=corpus,
        api_key=API_KEY,
        scan_pool=POOL,
        collections={"ads": CollectionSpec(bundle=bundle, corpus=ads, type="adverts")},
    )

    def put_ad(server: ThreadServer, doc: Document) -> None:
        body = {"title": doc.title, "text": doc.text, "budget": False}
        response = server.client.put("/adverts/" + quote(doc.id, safe=""), json=body, headers=KEY)
        assert response.status_code == 200, response.text

    def match(server: ThreadServer, text: str, k: int = 5, **filters: object) -> list[dict]:
        response = server.client.post("/match", json={"page": text, "k": k, "filters": filters})
        assert response.status_code == 200, response.text
        return response.json()["results"][0]["ads"]

    with ThreadServer(**common, cache_dir=tmp_path / "on", open_vocab=True) as server:  # type: ignore[arg-type]
        assert NEW.id not in [ad["id"] for ad in match(server, page)]
        assert match(server, "zymurgical") == []
        put_ad(server, NEW)
        put_ad(server, twin)
        oracle = Oracle(bundle, [*known, NEW, twin], open_vocab=True)
        (spelled,) = load_bundle(bundle).vocab.spelled(["zymurgical"])
        for text in (page, "zymurgical", "quuxblarg barley " + known[3].title):
            matched = match(server, text)
            assert matched[0]["id"] == NEW.id, (text, matched)
            assert_same_ranking(matched, oracle, text, 5)
        assert spelled in match(server, page)[0]["shared_words"]
        # budget false admits only the two written adverts: fewer than k among the first ones, so the match asks
        # again for more, and ranks those with the open term too (the brute force restricted to the admitted).
        admitted = match(server, page, k=2, budget=False)
        f = oracle.scores(page)
        expected = sorted([NEW.id, twin.id], key=lambda i: -f[oracle.ids.index(i)])
        assert [ad["id"] for ad in admitted] == expected == [NEW.id, twin.id]
        for ad in admitted:
            assert ad["score"] == pytest.approx(f[oracle.ids.index(ad["id"])], abs=1e-4)
        assert server.client.delete("/adverts/" + quote(NEW.id, safe=""), headers=KEY).status_code == 200
        assert match(server, "zymurgical") == []
    # A long page cut to its SSI_MAX_PAGE_WORDS heaviest bundle words: the open term is that of the text with every
    # other bundle word removed (Z(q) = the norm the cut row was divided by), new words kept.
    long_page = " ".join(dict.fromkeys(" ".join(d.text for d in known[:3]).split())) + " zymurgical"
    vocab = load_bundle(bundle).vocab
    kept = keep_top_words(vocab.featurize_queries([long_page]), 4).indices
    tokens = tokenize(long_page)
    cut = " ".join(t for t, i in zip(tokens, vocab.ids_of(tokens).tolist(), strict=True) if i < 0 or i in kept)
    assert len(kept) == 4 and len(set(tokens)) > 12
    with ThreadServer(**common, cache_dir=tmp_path / "cut", open_vocab=True, max_page_words=4) as server:  # type: ignore[arg-type]
        put_ad(server, NEW)
        matched = match(server, long_page)
        assert NEW.id in [ad["id"] for ad in matched]
        assert_same_ranking(matched, Oracle(bundle, [*known, NEW], open_vocab=True), cut, 5)
    with ThreadServer(**common, cache_dir=tmp_path / "off", open_vocab=False) as server:  # type: ignore[arg-type]
        put_ad(server, NEW)
        assert match(server, "zymurgical") == []
        assert_same_ranking(match(server, page), Oracle(bundle, [*known, NEW], open_vocab=False), page, 5)


@pytest.mark.parametrize("stemmer", [None, "english"])
def test_a_pages_words_for_the_open_term_come_from_its_featurizing(tmp_path: Path, stemmer: str | None) -> None:
    """A query's words for the open term are found in the pass that makes its row (service.bulk_featurize for a long
    page, word by word for a short text), not by tokenizing it again: the same new words in the same order, spelled
    (stemmed) as the vocabulary spells words, and the same bundle words and counts as from its tokens, also for a
    page cut to its heaviest words (the tokens of the bundle words its row kept, and every new word); the rows are
    `featurize_queries`' byte for byte."""
    docs = make_corpus(200, seed=9, vocab_words=400)
    made = make_bundle(tmp_path / "bundle", docs[:150], n_dims=16, seed=3, lexical="bm25", stemmer=stemmer)
    bundle = load_bundle(made)
    vocab, embedder = bundle.vocab, Embedder(bundle, threads=1, open_vocab=True)
    odd = "Ünïcödé ﬁne STRASSE Straße ΣΊΣΥΦΟΣ naïve café_bar x² Zymurgically zymurgical quuxblargs " + "a" * 41
    page = " ".join(d.full_text for d in docs[100:]) + " " + odd  # new words: the later documents' and odd's
    short = f"zymurgical notes on {docs[0].title}, Ünïcödé"
    assert len(page) >= BULK_QUERY_CHARS > len(short)
    for texts in ([page], [short], [page, short, ""], []):  # a batch as long as a page takes the arrays too
        for max_words in (None, 2048, 8):
            rows, words = embedder.featurize_with_words(texts, max_words)
            expected = embedder.featurize_queries(texts, max_words)
            assert np.array_equal(rows.indptr, expected.indptr) and np.array_equal(rows.indices, expected.indices)
            assert rows.data.tobytes() == expected.data.tobytes() and len(words) == len(texts)
            for i, text in enumerate(texts):
                tokens = tokenize(text)
                kept = expected.indices[expected.indptr[i] : expected.indptr[i + 1]]
                if max_words is not None and kept.shape[0] >= max_words:  # the text with every other word removed
                    ids = vocab.ids_of(tokens).tolist()
                    tokens = [t for t, j in zip(tokens, ids, strict=True) if j < 0 or j in kept]
                want = QueryWords.of_tokens(vocab, tokens)
                assert list(words[i].new.items()) == list(want.new.items()), (texts, max_words, i)
                assert np.array_equal(words[i].known, want.known) and np.array_equal(words[i].qtf, want.qtf)
    (cut,) = embedder.featurize_with_words([page], 8)[1]
    assert cut.known.shape[0] == 8 < embedder.featurize_with_words([page])[1][0].known.shape[0]
    assert set(vocab.spelled(["zymurgically", "ünïcödé", "quuxblargs"])) <= set(cut.new)
    assert (stemmer is None) == ("zymurgically" in cut.new)  # stemmed as the vocabulary spells words
    uncut = embedder.query_words([page, short])  # a shard's question (ModelState.shard_counts): the same words
    found = embedder.featurize_with_words([page, short])[1]
    assert uncut is not None and [list(w.new.items()) for w in uncut] == [list(w.new.items()) for w in found]


def test_with_the_collections_statistics_the_served_ranking_is_the_brute_force(world: World, tmp_path: Path) -> None:
    """SSI_OPEN_VOCAB_STATISTICS=collection on a corpus other than the training one: the lexical rows weighed with the
    avg_len of the documents the index was computed from (kept through writes, compaction and a snapshot), every
    word's idf from the live documents; top-k = brute force at each step. A bundle-statistics server keeps its own
    snapshots apart."""
    known, later, _, bundle = world
    initial = [*known[:100], *later[:25]]
    corpus = write_corpus(tmp_path / "served.jsonl", initial)
    avg_len = average_length(sum(len(tokenize(d.full_text)) for d in initial), len(initial))
    settings = Settings(
        bundle=bundle, corpus=corpus, cache_dir=tmp_path / "cache", insecure_writes=True, scan_pool=POOL,
        compact_dead_fraction=0.1, open_vocab=True, open_vocab_statistics="collection",
    )  # fmt: skip
    queries = _queries([*known, *later])

    def check(live: list[Document], served: Collection) -> None:
        assert served.ready_state().embedder.avg_len == avg_len
        described = served.ready_state().describe()["open_vocab"]
        assert described["statistics"] == "collection" and described["avg_len"] == avg_len
        _check(served, Oracle(bundle, live, open_vocab=True, statistics="collection", avg_len=avg_len), queries)

    own, bundled_stats = (Oracle(bundle, initial, open_vocab=True, statistics=s, avg_len=avg_len) for s in STATS)
    assert any(np.abs(own.scores(q) - bundled_stats.scores(q)).max() > 1e-3 for q in queries)  # they do differ
    live = _through_writes(settings, initial, [*later[25:], NEW], later[::3] + known[:20], check)
    bundled = _collection(settings.model_copy(update={"open_vocab_statistics": "bundle"}))
    assert bundled.ready_state().report.source == "computed"  # the collection-statistics snapshot is not its own
    _check(bundled, Oracle(bundle, live, open_vocab=True), queries)
    bundled.close()


def test_the_collections_statistics_of_the_training_corpus_serve_bit_for_bit(world: World, tmp_path: Path) -> None:
    """Served on the corpus the bundle was trained on, the collection's statistics are the bundle's: the same hits
    and scores, bit for bit, as with the bundle's statistics."""
    known, _, corpus, bundle = world
    common = dict(bundle=bundle, corpus=corpus, insecure_writes=True, scan_pool=POOL, open_vocab=True)
    served = {
        statistics: _collection(Settings(cache_dir=tmp_path / statistics, open_vocab_statistics=statistics, **common))
        for statistics in ("bundle", "collection")
    }
    for query in _queries([*known, *known]):
        results = [s.search([query], 10, 0)[0] for s in served.values()]
        assert results[0].doc_ids == results[1].doc_ids and results[0].scores == results[1].scores, query
    for collection in served.values():
        collection.close()


def test_a_worker_group_finds_new_words_on_every_worker(world: World, tmp_path: Path) -> None:
    """SSI_WORKERS=2 with the open vocabulary on: whichever worker answers, a new word written through another is
    found at once and the ranking is the brute force; its delete takes it out everywhere; the group restarted from
    its snapshot ranks the same. With the collection's statistics, the ones the workers must agree on and a snapshot
    must bring back (avg_len of the rows it holds, live idf). The bundle's statistics are the bundle's figures
    whatever is loaded, and new words reach every worker the same way under both: a single process serves them
    (the default: test_the_served_ranking_is_the_brute_force_with_the_open_term).

    Slow: two groups of real worker processes (each imports the service and loads the model), written to and
    searched on fresh connections."""
    statistics = "collection"
    known, later, _, bundle = world
    served = [*known[:100], *later[:25]]
    corpus = write_corpus(tmp_path / "served.jsonl", served)
    avg_len = average_length(sum(len(tokenize(d.full_text)) for d in served), len(served))
    env = {"SSI_CACHE_DIR": str(tmp_path / "cache"), "SSI_API_KEY": API_KEY, "SSI_WORKERS": "2", "SSI_THREADS": "1",
           "SSI_OPEN_VOCAB": "true", "SSI_OPEN_VOCAB_STATISTICS": statistics, "SSI_SCAN_POOL": str(POOL)}  # fmt: skip
    args = ["--bundle", str(bundle), "--corpus", str(corpus)]
    queries = ["zymurgical", "quuxblarg barley", *_queries([*known, *later])[:8]]

    def oracle(live: list[Document]) -> Oracle:
        return Oracle(bundle, live, open_vocab=True, statistics=statistics, avg_len=avg_len)

    def same_everywhere(url: str, expected: Oracle) -> None:
        for query in queries:
            for _ in range(2):  # fresh connections: any worker may answer
                hits = _fresh_search(url, query)
                if expected.scores(query).any():
                    assert_same_ranking(hits, expected, query, 10)
                else:
                    assert hits == [], query

    server = ProcessServer(tmp_path, env, args).start()
    try:
        assert len(worker_pids(server.url, 2)) == 2
        same_everywhere(server.url, oracle(served))
        response = CLIENT.put(
            f"{server.url}/documents/{NEW.id}", json={"title": NEW.title, "text": NEW.text}, headers=KEY, timeout=30
        )
        assert response.status_code == 200, response.text
        for _ in range(6):
            assert _fresh_search(server.url, "zymurgical")[0]["id"] == NEW.id
        gone = {d.id for d in served[::9]}
        for doc_id in sorted(gone):
            assert CLIENT.delete(f"{server.url}/documents/{doc_id}", headers=KEY, timeout=30).status_code == 200
        live = [d for d in [*served, NEW] if d.id not in gone]
        same_everywhere(server.url, oracle(live))
        assert CLIENT.delete(f"{server.url}/documents/{NEW.id}", headers=KEY, timeout=30).status_code == 200
        for _ in range(6):
            assert _fresh_search(server.url, "zymurgical") == []
        live.remove(NEW)
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log()
    again = ProcessServer(tmp_path, env, args).start()
    try:
        assert CLIENT.get(f"{again.url}/readyz").json()["collections"]["documents"]["loaded_from"] == "cache"
        same_everywhere(again.url, oracle(live))
    finally:
        assert again.stop() == 0


CLIENT = polling_client()  # requests on fresh connections, without a client (and its TLS context) built for each


def _fresh_search(url: str, query: str, k: int = 10) -> list[dict]:
    """A search on a new connection, so that any worker of a group may take it."""
    response = CLIENT.post(f"{url}/search", json={"query": query, "k": k}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["hits"]


def test_match_ranks_adverts_with_the_collections_statistics(world: World, tmp_path: Path) -> None:
    """/match with SSI_OPEN_VOCAB_STATISTICS=collection on adverts other than the training corpus: the brute force of
    the collection's statistics (the adverts' avg_len, live idf) before and after an advert with a new word."""
    known, later, corpus, bundle = world
    adverts = [*known[:80], *later[:10]]
    ads = write_corpus(tmp_path / "ads.jsonl", adverts)
    avg_len = average_length(sum(len(tokenize(d.full_text)) for d in adverts), len(adverts))
    spec = CollectionSpec(bundle=bundle, corpus=ads, type="adverts")
    pages = [known[0].title + " on zymurgical brewing", "quuxblarg barley " + known[3].title, known[5].text]
    with ThreadServer(
        bundle=bundle, corpus=corpus, api_key=API_KEY, scan_pool=POOL, collections={"ads": spec},
        cache_dir=tmp_path / "cache", open_vocab=True, open_vocab_statistics="collection",
    ) as server:  # fmt: skip
        for live in (adverts, [*adverts, NEW]):
            if live[-1] is NEW:
                body = {"title": NEW.title, "text": NEW.text, "budget": False}
                assert server.client.put(f"/adverts/{NEW.id}", json=body, headers=KEY).status_code == 200
            oracle = Oracle(bundle, live, open_vocab=True, statistics="collection", avg_len=avg_len)
            for page in pages:
                response = server.client.post("/match", json={"page": page, "k": 5})
                assert response.status_code == 200, response.text
                assert_same_ranking(response.json()["results"][0]["ads"], oracle, page, 5)
        matched = server.client.post("/match", json={"page": pages[0], "k": 5}).json()["results"][0]["ads"]
        (spelled,) = load_bundle(bundle).vocab.spelled(["zymurgical"])
        assert matched[0]["id"] == NEW.id and spelled in matched[0]["shared_words"]


def test_the_live_document_frequency_counts_live_rows_of_base_and_delta() -> None:
    """LexicalIndex.document_frequency (the collection's live idf): posting lists' lengths, or their live rows."""
    base = sp.random(300, 50, density=0.2, format="csr", random_state=1, dtype=np.float32)
    delta = sp.random(40, 50, density=0.2, format="csr", random_state=2, dtype=np.float32)
    index = LexicalIndex(np.ones(50, dtype=np.float32), base, delta)
    whole = sp.vstack([base, delta]).tocsc()
    live = np.random.default_rng(0).random(340) > 0.3
    words = np.array([0, 5, 5, 49, 17, 3])
    lists = [whole.indices[whole.indptr[w] : whole.indptr[w + 1]] for w in words]
    assert index.document_frequency(words).tolist() == [len(rows) for rows in lists]
    assert index.document_frequency(words, live).tolist() == [int(live[rows].sum()) for rows in lists]
