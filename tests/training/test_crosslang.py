"""Cross-language retrieval on a pseudo-language (PSI paper, section 4.2): the dictionary, the task folder
`ssi crosslang` writes, the two-language vocabulary, and a model that learns across the languages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ssi.bundle import load_bundle
from ssi.corpus import read_beir_queries, read_corpus, read_qrels
from ssi.tokenize import tokenize
from ssi.vocab import Vocabulary
from ssi_cli.main import build_app
from tests.training.synonyms import SynonymCorpus
from training.evaluate.baselines.tfidf import TfidfScorer
from training.evaluate.features import TextFeatures
from training.evaluate.form_scorer import FormScorer
from training.evaluate.harness import score_task
from training.evaluate.metrics import MAP
from training.evaluate.tasks import beir_task
from training.pseudo_language import PseudoLanguage, PseudoLanguageSpec

SOURCE = [f"alpha{i} beta{i % 7} gamma{i % 3} delta".split() for i in range(400)]


def test_dictionary_is_seeded_and_shares_no_word_with_the_source() -> None:
    a = PseudoLanguage.build(SOURCE, PseudoLanguageSpec(seed=3))
    b = PseudoLanguage.build(SOURCE, PseudoLanguageSpec(seed=3))
    c = PseudoLanguage.build(SOURCE, PseudoLanguageSpec(seed=4))
    assert a.forward == b.forward and a.forward != c.forward
    source_words = {w for tokens in SOURCE for w in tokens}
    assert not source_words & set(a.inverse)
    summary = a.summary()
    assert summary["source_words"] == len(source_words)
    assert (
        summary["dropped"] > 0
        and summary["with_synonyms"] > 0
        and summary["invented_words_shared_by_several_sources"] > 0
    )


def test_translation_drops_merges_and_back_translates() -> None:
    language = PseudoLanguage.build(SOURCE, PseudoLanguageSpec(merged=0.2, dropped=0.1, synonyms=0.3, seed=0))
    rng = np.random.default_rng(0)
    dropped = next(w for w, t in language.forward.items() if not t)
    single = next(w for w, t in language.forward.items() if len(t) == 1 and len(language.inverse[t[0]]) == 1)
    assert language.translate([dropped], rng) == []
    assert language.back_translate(language.translate([single], rng)) == [single]
    merged = next(t for t, sources in language.inverse.items() if len(sources) > 1)
    assert sorted(language.back_translate([merged])) == sorted(language.inverse[merged])
    with_synonyms = next(w for w, t in language.forward.items() if len(t) > 1)
    drawn = {language.translate([with_synonyms], rng)[0] for _ in range(60)}
    assert drawn == set(language.forward[with_synonyms])  # each synonym is used


def test_spec_refuses_shares_outside_zero_one() -> None:
    with pytest.raises(ValueError, match="merged"):
        PseudoLanguageSpec(merged=1.5)
    with pytest.raises(ValueError, match="exceed"):
        PseudoLanguageSpec(merged=0.6, dropped=0.6)


def test_interleaved_vocabulary_takes_ranks_in_turn() -> None:
    first = Vocabulary(["the", "cat", "sat"], np.array([1.0, 2.0, 3.0]))
    second = Vocabulary(["ka", "the", "mu", "zo"], np.array([1.5, 9.0, 2.5, 4.0]))
    joint = Vocabulary.interleaved(first, second)
    assert joint.words == ["the", "ka", "cat", "sat", "mu", "zo"]
    assert joint.idf.tolist() == [1.0, 1.5, 2.0, 3.0, 2.5, 4.0]  # a shared word keeps the first's idf


@pytest.fixture(scope="module")
def task_folder(synonyms: SynonymCorpus, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("crosslang")
    args = ["crosslang", "--out", str(out), "--corpus", str(synonyms.corpus), "--pairs", str(synonyms.train_pairs)]
    result = CliRunner().invoke(build_app(), [*args, "--valid-pairs", str(synonyms.valid_pairs), "--seed", "2"])
    assert result.exit_code == 0, result.output
    return out


def test_task_folder_holds_mates_qrels_and_the_filter(synonyms: SynonymCorpus, task_folder: Path) -> None:
    docs = read_corpus(synonyms.corpus)
    queries = read_beir_queries(task_folder / "queries.jsonl")
    assert [q.id for q in queries] == [d.id for d in docs]
    doc_words = {w for d in docs for w in tokenize(d.full_text)}
    assert not doc_words & {w for q in queries for w in tokenize(q.text)}  # no shared word: no diagonal
    back = read_beir_queries(task_folder / "queries.translated.jsonl")
    assert {w for q in back for w in tokenize(q.text)} <= doc_words
    train = read_qrels(task_folder / "qrels.train.tsv")
    filtered = {(p.query_id, p.doc_id) for p in read_qrels(task_folder / "qrels.filter.tsv")}
    assert {(p.query_id, p.doc_id) for p in train} | {(d.id, d.id) for d in docs} == filtered
    summary = json.loads((task_folder / "crosslang.json").read_text())
    assert summary["documents"] == len(docs) and summary["spec"]["seed"] == 2


def test_missing_corpus_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(build_app(), ["crosslang", "--out", str(tmp_path / "x"), "--corpus", "nope.jsonl"])
    assert result.exit_code != 0 and "no such file: nope.jsonl" in result.output


def test_no_identity_model_learns_across_languages(synonyms: SynonymCorpus, task_folder: Path, tmp_path: Path) -> None:
    """Queries share no word with documents: tf-idf ranks at random, a model trained on the links does not."""
    out = tmp_path / "bundle"
    args = ["train", "--corpus", str(synonyms.corpus), "--queries", str(task_folder / "queries.jsonl")]
    args += ["--qrels", str(task_folder / "qrels.train.tsv"), "--valid-qrels", str(task_folder / "qrels.valid.tsv")]
    args += ["--kind", "noidentity", "--query-vocab-size", "2000", "--epochs", "30", "--eval-every", "20"]
    args += ["--out", str(out), "--no-progress", "--threads", "1", "--seed", "1"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    bundle = load_bundle(out)
    query_words = {w for q in read_beir_queries(task_folder / "queries.jsonl") for w in tokenize(q.text)}
    assert sum(w in query_words for w in bundle.vocab.words) > 100  # the query language has its own words
    docs = read_corpus(synonyms.corpus)
    task = beir_task(
        docs,
        read_beir_queries(task_folder / "queries.jsonl"),
        read_qrels(task_folder / "qrels.valid.tsv"),
        known=read_qrels(task_folder / "qrels.filter.tsv"),
    )
    features = TextFeatures(bundle.vocab)
    learned = score_task(task, FormScorer.from_bundle(bundle, docs, features=features), quick=True)[MAP].mean()
    tfidf = score_task(task, TfidfScorer(features, docs), quick=True)[MAP].mean()
    print(f"cross-language MAP: learned {learned:.3f}, tf-idf {tfidf:.3f}")
    assert learned > 2 * tfidf and learned > 0.3, (learned, tfidf)
