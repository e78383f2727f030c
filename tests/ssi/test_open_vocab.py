"""The open vocabulary (ssi.open_vocab): a word the bundle never saw is found through the lexical part, in process;
a collection without new words ranks bit for bit as before; deletes, the cap and a tf-idf bundle behave as stated.
It is on by default; `open_vocab=False` (`--closed-vocab`) closes it, and these tests check that closed is the
bundle's words only, bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import ssi
from ssi.bundle import Bundle, load_bundle
from ssi.forms import Form, form_class
from ssi.open_vocab import OpenPostings, OpenRule, QueryWords, build_postings, open_scores
from ssi.records import Document
from ssi.tokenize import tokenize
from ssi.weighting import bm25_idf
from ssi_cli.main import build_app
from tests.service.service_testing import make_bundle, make_corpus, write_corpus
from training.evaluate.baselines.bm25 import BM25Scorer
from training.evaluate.form_scorer import FormScorer
from training.evaluate.rank import top_k
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


def test_the_weights_and_the_term_are_the_array_formulas_bit_for_bit(world: dict) -> None:
    """`query_weights` weighs a query's few words as Python floats, each idf remembered (`bm25_idf_of`), and `scores`
    sums the term (each row once, unsorted) and its bound in one pass: the same floats as the array formulas they
    replaced (idf from `bm25_idf`, Z(q) = np.linalg.norm), with and without bundle words, and the bound
    Σ_t w_t · max_d d_t."""
    bundle = load_bundle(world["bm25"])
    rule = OpenRule.of(bundle.vocab, bundle.form)
    assert rule is not None
    rng = np.random.default_rng(3)
    postings = OpenPostings()
    for row in range(200):  # new words of a wide range of document frequencies
        postings.add(
            row, {f"new{int(w)}": float(rng.random()) for w in rng.integers(0, 60, size=int(rng.integers(1, 8)))}
        )
    df = postings.df()
    for trial in range(40):
        new = {f"new{int(w)}": int(c) for w, c in zip(rng.integers(0, 80, 12), rng.integers(1, 4, 12), strict=True)}
        known = np.unique(rng.integers(0, bundle.vocab.n_words, int(rng.integers(0, 30))))
        qtf = rng.integers(1, 5, known.shape[0]).astype(np.float64)
        weights = rule.query_weights(QueryWords(new, known, qtf), df, 250)
        present = [w for w in new if df.get(w, 0) > 0]
        assert list(weights) == present
        if not present:
            continue
        idf = bm25_idf(np.array([df[w] for w in present], dtype=np.float64), 250).astype(np.float64)
        raw = idf * np.array([new[w] for w in present], dtype=np.float64)
        z = float(np.linalg.norm(bundle.vocab.idf[known].astype(np.float64) * qtf)) if known.size else 0.0
        z = z if z > 0.0 else float(np.linalg.norm(raw))
        assert [weights[w] for w in present] == (rule.weight * raw / z).tolist(), trial
        rows, values, bound = postings.scores(weights)
        summed: dict[int, float] = {}
        for w, weight in weights.items():
            for row, value in postings.postings[w].items():
                summed[row] = summed.get(row, 0.0) + weight * value
        assert dict(zip(rows.tolist(), values.tolist(), strict=True)) == summed and rows.shape[0] == len(summed)
        assert bound == sum(weight * max(postings.postings[w].values()) for w, weight in weights.items())


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


def test_on_by_default_and_closed_when_told(world: dict) -> None:
    """By default a document's new word finds it; with `open_vocab=False` nothing of the open term is built or
    added: the reference scores, bit for bit, even for a query whose new word a document holds."""
    docs = [*world["docs"], NEW]
    assert ssi.load(world["bm25"], corpus=docs).search("zymurgical", k=3)[0].id == "new-doc"
    model = ssi.load(world["bm25"], corpus=docs, open_vocab=False)
    assert model.search("zymurgical", k=3) == []
    assert all(hit.id != "new-doc" for hit in model.search("quuxblarg notes", k=3))
    assert not model.score(["zymurgical"], ["a zymurgical text", "nothing here"]).any()
    scorer = FormScorer.from_bundle(world["bm25"], docs)
    assert scorer.open_rule is None and scorer.open is None
    queries = ["zymurgical " + docs[3].title, "quuxblarg", docs[0].title]
    assert np.array_equal(scorer.score(queries), VectorScorer.score(scorer, queries))
    assert scorer.has_terms(queries).tolist() == [True, False, True]


# statistics="collection" (ssi.open_vocab.CollectionStatistics): every word's idf and avg_len from the served documents.


def test_collection_statistics_of_the_training_corpus_rank_bit_for_bit(world: dict) -> None:
    """Served on the corpus it was trained on, the collection's statistics are the bundle's: the same rows, no
    correction, so the scores are those of the bundle's statistics, bit for bit (and the closed ones where no
    query word is new)."""
    bundle = load_bundle(world["bm25"])
    bundled = FormScorer(bundle.vocab, bundle.form, world["docs"], open_vocab=True)
    served = FormScorer(bundle.vocab, bundle.form, world["docs"], open_vocab=True, statistics="collection")
    assert served.collection is not None and served.collection.bm25 == bundle.vocab.bm25
    assert np.array_equal(served.collection.idf, bundle.vocab.idf)
    queries = [d.title for d in world["docs"][:20]] + ["zymurgical " + world["docs"][0].title, "quuxblarg"]
    assert np.array_equal(served.score(queries), bundled.score(queries))
    assert np.array_equal(served.score(queries[:20]), VectorScorer.score(bundled, queries[:20]))


def _lexical_only(bundle_path: Path) -> tuple[Bundle, Form]:
    """The bundle and its form with U = V = 0: the lexical part alone."""
    bundle = load_bundle(bundle_path)
    zero = form_class(bundle.form.name)({k: np.zeros_like(v) for k, v in bundle.form.values.items()})
    return bundle, zero


def test_with_collection_statistics_the_lexical_part_is_bm25_over_the_collection(tmp_path: Path) -> None:
    """A stemming BM25 bundle served on another corpus (half its documents, half new ones with words it never saw):
    its lexical part alone (U = V = 0) is BM25 on stems over the served corpus (bm25s, the baseline of `ssi eval`)
    divided by a constant of each query; with the bundle's statistics it is not."""
    trained = make_corpus(120, seed=5, vocab_words=300)
    path = make_bundle(tmp_path / "b", trained, lexical="bm25", stemmer="english")
    served = [*trained[60:], *make_corpus(60, seed=11, vocab_words=200), NEW]
    bundle, zero = _lexical_only(path)
    queries = [d.title for d in served[::9]] + [" ".join(d.text.split()[:4]) for d in served[5::11]]
    queries += ["zymurgical fermentation " + trained[70].title, "quuxblarg quuxblarg barley"]
    bm25 = BM25Scorer(served, stemmer="english").score(queries).astype(np.float64)
    for statistics, equal in (("collection", True), ("bundle", False)):
        lexical = FormScorer(bundle.vocab, zero, served, open_vocab=True, statistics=statistics)
        scores = lexical.score(queries).astype(np.float64)
        same = []
        for q in range(len(queries)):
            assert (scores[q] > 0).tolist() == (bm25[q] > 0).tolist(), queries[q]
            scale = bm25[q].max() / scores[q].max()
            same.append(np.allclose(scores[q] * scale, bm25[q], rtol=1e-4, atol=1e-5 * bm25[q].max()))
        assert all(same) if equal else not all(same), statistics


def test_load_rank_and_score_take_the_collection_statistics(world: dict) -> None:
    """`ssi.load(..., statistics="collection")` ranks as FormScorer does (what `ssi rank` and `ssi eval` use), and
    `Model.score` weighs the documents it is given by their own statistics; without the open vocabulary, refused."""
    docs = [*world["docs"][40:], NEW]
    model = ssi.load(world["bm25"], corpus=docs, open_vocab=True, statistics="collection")
    scorer = FormScorer.from_bundle(world["bm25"], docs, open_vocab=True, statistics="collection")
    queries = ["zymurgical " + docs[3].title, docs[10].title, "quuxblarg"]
    assert np.array_equal(model.scores(queries), scorer.score(queries))
    assert model.search("quuxblarg", k=1)[0].id == NEW.id
    texts = [d.full_text for d in docs]
    assert np.array_equal(model.score(queries, texts), scorer.score(queries))
    by_default = ssi.load(world["bm25"], corpus=docs, statistics="collection")  # the open vocabulary is the default
    assert np.array_equal(by_default.scores(queries), scorer.score(queries))
    with pytest.raises(ValueError, match="open_vocab"):
        ssi.load(world["bm25"], corpus=docs, open_vocab=False, statistics="collection")


def test_rank_and_eval_take_statistics_on_the_command_line(world: dict, tmp_path: Path) -> None:
    """`ssi rank --open-vocab --statistics collection` writes FormScorer's order; `ssi eval` notes the choice in its
    results.json; `--statistics collection` with `--closed-vocab` is a one-line usage error."""
    docs = [*world["docs"][40:], NEW]
    corpus = write_corpus(tmp_path / "corpus.jsonl", docs)
    queries = tmp_path / "queries.tsv"
    texts = ["zymurgical " + docs[3].title, docs[10].title]
    queries.write_text("".join(f"q{i}\t{t}\n" for i, t in enumerate(texts)), encoding="utf-8")
    run = tmp_path / "run.trec"
    common = ["rank", "--bundle", str(world["bm25"]), "--corpus", str(corpus), "--queries", str(queries)]
    result = CliRunner().invoke(build_app(), [*common, "--out", str(run), "--k", "5", "--open-vocab",
                                              "--statistics", "collection"])  # fmt: skip
    assert result.exit_code == 0, result.output
    scores = FormScorer.from_bundle(world["bm25"], docs, open_vocab=True, statistics="collection").score(texts)
    ranked = [line.split(" ")[2] for line in run.read_text(encoding="utf-8").splitlines()]
    cols, _ = top_k(scores, 5)
    assert ranked == [docs[c].id for row in cols for c in row.tolist()]
    by_default = CliRunner().invoke(build_app(), [*common, "--out", str(tmp_path / "d"), "--k", "5",
                                                  "--statistics", "collection"])  # fmt: skip
    assert by_default.exit_code == 0 and (tmp_path / "d").read_text(encoding="utf-8") == run.read_text(encoding="utf-8")
    refused = CliRunner().invoke(build_app(), [*common, "--out", str(tmp_path / "x"), "--closed-vocab",
                                               "--statistics", "collection"])  # fmt: skip
    assert refused.exit_code == 2 and "--closed-vocab" in refused.stderr and "Traceback" not in refused.output
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq0\tnew-doc\t1\nq1\t" + docs[10].id + "\t1\n", encoding="utf-8")
    beir = tmp_path / "queries.jsonl"
    beir.write_text("".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    out = tmp_path / "eval"
    result = CliRunner().invoke(build_app(), [
        "eval", "--bundle", str(world["bm25"]), "--corpus", str(corpus), "--queries", str(beir), "--qrels", str(qrels),
        "--open-vocab", "--statistics", "collection", "--out", str(out),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    notes = json.loads((out / "results.json").read_text())["notes"]
    assert notes["open_vocab"] is True and notes["open_vocab_statistics"] == "collection"
