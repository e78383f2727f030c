"""The open vocabulary (ssi.open_vocab): a word the bundle never saw is found through the lexical part, in process;
a collection without new words ranks bit for bit as before; deletes, the cap and a tf-idf bundle behave as stated.
It is off by default (`open_vocab=False`, `--closed-vocab`): these tests turn it on, and check that off is closed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ssi
from ssi.bundle import load_bundle
from ssi.open_vocab import OpenPostings, OpenRule, build_postings, open_scores
from ssi.records import Document
from ssi.tokenize import tokenize
from ssi.weighting import bm25_idf
from tests.service.service_testing import make_bundle, make_corpus
from training.evaluate.form_scorer import FormScorer
from training.evaluate.scorer import VectorScorer

NEW = Document("new-doc", "Quuxblarg zymurgical notes", "quuxblarg zymurgical fermentation of quuxblarg in barley")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("open")
    docs = make_corpus(120, seed=5, vocab_words=300)
    bundles = {lexical: make_bundle(root / lexical, docs, lexical=lexical) for lexical in ("bm25", "tfidf")}
    return {"docs": docs, **bundles}


def test_a_document_written_after_training_is_the_first_hit_for_its_new_words(world: dict) -> None:
    model = ssi.load(world["bm25"], corpus=[*world["docs"], NEW], open_vocab=True)
    for query in ("zymurgical", "quuxblarg", "Quuxblarg notes"):
        hits = model.search(query, k=3)
        assert hits and hits[0].id == "new-doc", query
    assert model.search("neverwrittenword", k=3) == []  # a query word no document holds finds nothing
    closed = ssi.load(world["bm25"], corpus=world["docs"], open_vocab=True)
    assert closed.search("zymurgical", k=3) == []
    # Model.score over given texts covers them too
    assert model.score(["zymurgical"], ["a zymurgical text", "nothing here"])[0].argmax() == 0


def test_without_new_words_the_ranking_is_bit_identical(world: dict) -> None:
    """A collection of bundle words only: FormScorer's scores are the form's reference scores, bit for bit."""
    bundle = load_bundle(world["bm25"])
    scorer = FormScorer(bundle.vocab, bundle.form, world["docs"], open_vocab=True)
    assert scorer.open is not None and scorer.open.n_words == 0
    queries = [d.title for d in world["docs"][:20]] + ["zymurgical " + world["docs"][0].title]
    assert np.array_equal(scorer.score(queries), VectorScorer.score(scorer, queries))


def test_a_new_query_word_adds_only_where_a_document_holds_it(world: dict) -> None:
    bundle = load_bundle(world["bm25"])
    docs = [*world["docs"], NEW]
    scorer = FormScorer(bundle.vocab, bundle.form, docs, open_vocab=True)
    base = VectorScorer.score(scorer, ["zymurgical " + docs[3].title])
    opened = scorer.score(["zymurgical " + docs[3].title])
    changed = np.flatnonzero(base[0] != opened[0])
    assert changed.tolist() == [len(docs) - 1]


def test_the_open_term_is_bm25_with_live_statistics(world: dict) -> None:
    """o = w · idf_t · qtf_t · d_t / ‖bundle idf ∘ qtf‖ with d_t BM25's saturated tf (bundle k1, b, avg_len)."""
    bundle = load_bundle(world["bm25"])
    rule = OpenRule.of(bundle.vocab, bundle.form)
    assert rule is not None and rule.weight == 1.0  # lowrank: the identity diagonal
    texts = [tokenize(NEW.full_text), tokenize("zymurgical brewing zymurgical")]
    postings = build_postings(rule, texts)
    query = tokenize(f"zymurgical {world['docs'][0].title}")
    o = open_scores(rule, postings, [query], n_docs=10, n_rows=2)
    assert o is not None
    bm25 = bundle.vocab.bm25
    ids = bundle.vocab.ids_of(query)
    known, qtf = np.unique(ids[ids >= 0], return_counts=True)
    z = np.linalg.norm(bundle.vocab.idf[known].astype(np.float64) * qtf)
    idf = float(bm25_idf(np.array([2.0]), 10)[0])
    for row, tokens in enumerate(texts):
        tf = tokens.count("zymurgical")
        d = tf / (tf + bm25.k1 * (1 - bm25.b + bm25.b * len(tokens) / bm25.avg_len))
        assert o[0, row] == pytest.approx(idf * d / z, rel=1e-6)


def test_deletes_take_postings_out_and_the_cap_drops_new_words() -> None:
    postings = OpenPostings(max_words=2)
    postings.add(0, {"a": 0.5, "b": 0.4})
    postings.add(1, {"a": 0.3, "c": 0.2})  # full: "c" is left out
    assert postings.n_words == 2 and postings.dropped == 1 and postings.df()["a"] == 2
    postings.remove(0)
    assert postings.df().get("b", 0) == 0 and postings.n_words == 1
    postings.add(2, {"c": 0.2})
    assert postings.n_words == 2 and set(postings.postings) == {"a", "c"}
    kept = postings.select(np.array([2, 1]))
    assert kept.postings == {"c": {0: 0.2}, "a": {1: 0.3}}
    assert OpenPostings.from_json(kept.to_json()).postings == kept.postings


def test_the_postings_count_follows_every_change() -> None:
    """n_postings (read after every write for /metrics and /model) is kept by add/remove, never walked."""

    def walked(p: OpenPostings) -> int:
        return sum(len(rows) for rows in p.postings.values())

    postings = OpenPostings(max_words=3)
    steps = [
        lambda: postings.add(0, {"a": 0.5, "b": 0.4}),
        lambda: postings.add(1, {"a": 0.3, "c": 0.2}),
        lambda: postings.add(0, {"a": 0.1}),  # a row rewritten: its old postings go
        lambda: postings.add(2, {"d": 0.1, "e": 0.2}),  # "e" dropped once full
        lambda: postings.remove(1),
        lambda: postings.remove(7),  # a row holding nothing
    ]
    for step in steps:
        step()
        assert postings.n_postings == walked(postings)
    assert postings.n_postings == 2 and postings.dropped == 1
    for made in (postings.copy(), postings.select(np.array([2, 0])), OpenPostings.from_json(postings.to_json())):
        assert made.n_postings == walked(made) == 2
    assert OpenPostings().n_postings == 0


def test_a_tfidf_bundle_keeps_its_vocabulary_closed(world: dict) -> None:
    bundle = load_bundle(world["tfidf"])
    assert OpenRule.of(bundle.vocab, bundle.form) is None
    model = ssi.load(world["tfidf"], corpus=[*world["docs"], NEW], open_vocab=True)
    assert model.search("zymurgical", k=3) == []


def test_rank_and_eval_share_the_rule(world: dict, tmp_path: Path) -> None:
    """FormScorer (what `ssi rank` and `ssi eval` rank with) finds the new document too."""
    scorer = FormScorer.from_bundle(world["bm25"], [*world["docs"], NEW], open_vocab=True)
    scores = scorer.score(["quuxblarg"])
    assert int(np.argmax(scores[0])) == len(world["docs"])


def test_off_by_default_the_vocabulary_is_closed(world: dict) -> None:
    """Without `open_vocab` (the default) nothing of the open term is built or added: the reference scores, bit
    for bit, even for a query whose new word a document holds."""
    docs = [*world["docs"], NEW]
    model = ssi.load(world["bm25"], corpus=docs)
    assert model.search("zymurgical", k=3) == []
    assert all(hit.id != "new-doc" for hit in model.search("quuxblarg notes", k=3))
    assert not model.score(["zymurgical"], ["a zymurgical text", "nothing here"]).any()
    scorer = FormScorer.from_bundle(world["bm25"], docs)
    assert scorer.open_rule is None and scorer.open is None
    queries = ["zymurgical " + docs[3].title, "quuxblarg", docs[0].title]
    assert np.array_equal(scorer.score(queries), VectorScorer.score(scorer, queries))
    assert scorer.has_terms(queries).tolist() == [True, False, True]
