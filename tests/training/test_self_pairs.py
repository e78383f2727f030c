"""Training without labels: pairs cut from the corpus itself (`ssi train --self-pairs`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ssi.bundle import load_bundle
from ssi.corpus import read_corpus
from ssi.records import Document, Pair, Query
from ssi_cli.main import build_app
from training.evaluate.baselines.tfidf import TfidfScorer
from training.evaluate.features import TextFeatures
from training.evaluate.form_scorer import FormScorer
from training.evaluate.harness import score_task
from training.evaluate.metrics import MAP
from training.evaluate.tasks import beir_task
from training.run import build_validator, load_data, resolve_lexical
from training.self_pairs import build_self_pairs
from training.settings import TrainSettings

TOPICS = 8


def make_titled_corpus(path: Path, seed: int = 0) -> tuple[list[Query], list[Pair]]:
    """Titles name a topic in one word pool ("name"), bodies describe it in another ("body").

    Half the documents have a title, half only a body. Queries use the name pool and are relevant to the
    untitled documents of their topic, with which they share no word: tf-idf cannot find them, a model
    that learned name ↔ body words from the titled documents (no labels) can.
    """
    rng = np.random.default_rng(seed)
    filler = [f"filler{i}" for i in range(40)]
    docs: list[dict[str, str]] = []
    untitled: dict[int, list[str]] = {}
    for topic in range(TOPICS):
        names = [f"name{topic}x{i}" for i in range(6)]
        body = [f"body{topic}x{i}" for i in range(12)]
        for j in range(30):
            titled = j % 2 == 0
            words = list(rng.choice(body, size=20)) + list(rng.choice(filler, size=20))
            rng.shuffle(words)
            title = " ".join(rng.choice(names, size=3, replace=False)) if titled else ""
            doc_id = f"t{topic}-{j}"
            docs.append({"id": doc_id, "title": title, "text": " ".join(words)})
            if not titled:
                untitled.setdefault(topic, []).append(doc_id)
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    queries, qrels = [], []
    for topic in range(TOPICS):
        for i in range(3):
            query = Query(f"q{topic}-{i}", " ".join(f"name{topic}x{w}" for w in rng.choice(6, size=2, replace=False)))
            queries.append(query)
            qrels += [Pair(query.id, doc_id) for doc_id in untitled[topic]]
    return queries, qrels


def test_title_pairs_leave_the_title_out_of_the_document_and_hold_validation_documents_out() -> None:
    docs = [Document(f"d{i}", f"title words {i}", f"body text number {i}") for i in range(200)]
    docs.append(Document("untitled", "", "no title here"))
    made = build_self_pairs(docs, "title", valid_share=0.2, seed=3)
    assert made.skipped == 1 and len(made.train) + len(made.valid) == 200
    assert 20 < len(made.valid) < 60
    assert made.held_out == {p.doc_id for p in made.valid}
    assert not made.held_out & {p.doc_id for p in made.train}
    query_of = {q.id: q.text for q in made.queries}
    for pair, text in zip(made.train, (t for d, t in zip(docs, made.doc_texts, strict=True) if d.title), strict=False):
        assert query_of[pair.query_id].startswith("title words") and "title" not in text
    assert made.doc_texts[-1] == "no title here"
    again = build_self_pairs(docs, "title", valid_share=0.2, seed=3)
    assert again.held_out == made.held_out  # seeded


def test_split_pairs_cut_a_span_out_of_the_document() -> None:
    words = [f"w{i}" for i in range(100)]
    text = " ".join(words[:40]) + ". " + " ".join(words[40:])
    made = build_self_pairs([Document("a", "", text), Document("short", "", "too short")], "split", span_words=10)
    assert made.skipped == 1 and len(made.train) == 1
    query = made.queries[0].text.split()
    rest = made.doc_texts[0].split()
    assert len(query) == 10 and len(rest) == 90
    assert sorted(query + rest, key=lambda w: int(w.strip(".")[1:])) == text.split()
    assert not set(query) & set(rest)


def test_unshared_pairs_keep_only_the_query_words_the_document_lacks() -> None:
    docs = [
        Document("a", "Heart attack risk", "Myocardial infarction risk rises with age."),
        Document("b", "Age risk", "Risk rises with age."),  # every title word is in the body: no pair
    ]
    made = build_self_pairs(docs, "title", unshared=True)
    assert made.skipped == 1 and [q.text for q in made.queries] == ["heart attack"]
    assert made.doc_texts[0] == docs[0].text


def test_split_refuses_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="unknown self-pair mode"):
        build_self_pairs([Document("a", "t", "b")], "sentences")  # type: ignore[arg-type]


def test_a_model_trained_on_title_pairs_alone_finds_what_tfidf_cannot(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    queries, qrels = make_titled_corpus(corpus)
    args = ["train", "--corpus", str(corpus), "--self-pairs", "title", "--valid-share", "0.2"]
    args += ["--out", str(tmp_path / "b"), "--epochs", "30", "--dims", "16", "--lr", "0.1", "--no-progress"]
    args += ["--seed", "1", "--threads", "1", "--eval-every", "5"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{") :])
    bundle = load_bundle(tmp_path / "b")
    assert bundle.manifest.data["train_pairs"] + bundle.manifest.data["valid_pairs"] == TOPICS * 15
    assert summary["valid"]["map"] > bundle.manifest.training["history"][0]["map"]  # it learned, unlabelled

    docs = read_corpus(corpus)
    task = beir_task(docs, queries, qrels)
    features = TextFeatures(bundle.vocab)
    ssi = score_task(task, FormScorer.from_bundle(bundle, docs, features=features), quick=True)[MAP].mean()
    tfidf = score_task(task, TfidfScorer(features, docs), quick=True)[MAP].mean()
    # The titled documents of the topic hold the query's words and rank first for both; what counts is
    # that the untitled ones (no shared word) come next for the model and at random for tf-idf.
    assert tfidf < 0.15
    assert ssi > 0.25 and ssi > 2.5 * tfidf


def test_validation_asks_among_the_held_out_documents_or_among_all(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    make_titled_corpus(corpus)
    asked = {}
    for among in ("held-out", "all"):
        settings = resolve_lexical(
            TrainSettings(
                corpus=corpus, out=tmp_path / "b", self_pairs="title", valid_share=0.2, self_pair_valid_among=among
            )
        )
        data = load_data(settings, None)
        validator = build_validator(data, data.vocab.doc_matrix(data.X_docs, ids=data.doc_ids), settings)
        assert validator is not None
        asked[among] = list(validator.products.ids)
    assert data.valid_docs is not None and len(asked["held-out"]) == len(data.valid_docs) < len(data.docs)
    assert asked["all"] == [d.id for d in data.docs] + asked["held-out"]
    with pytest.raises(ValueError, match="give it"):
        TrainSettings(corpus=corpus, out=tmp_path / "b", pairs=corpus, self_pair_valid_among="all")


@pytest.mark.parametrize("ensemble", [1, 2])
def test_self_pairs_that_gain_nothing_stop_and_export_the_step_0_model(tmp_path: Path, ensemble: int) -> None:
    """U = V = 0 (--init-scale 0) is a saddle the model never leaves: validation stays at step 0's BM25 (for every
    member of an ensemble, which then says so too)."""
    corpus = tmp_path / "corpus.jsonl"
    make_titled_corpus(corpus)
    args = ["train", "--corpus", str(corpus), "--self-pairs", "title", "--valid-share", "0.2", "--init-scale", "0"]
    args += ["--out", str(tmp_path / "b"), "--epochs", "50", "--dims", "8", "--no-progress", "--threads", "1"]
    args += ["--eval-every", "1", "--base-patience", "3", "--base-patience-minutes", "0", "--ensemble", str(ensemble)]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["steps"] == 3 * ensemble and summary["best_step"] == 0
    assert "no gain" in result.output and "events.sqlite" in summary["notes"][-1]
    assert "equals its BM25 base" in summary["notes"][-1]
    history = load_bundle(tmp_path / "b").manifest.training["history"]
    assert summary["valid"]["map"] == history[0]["map"]
