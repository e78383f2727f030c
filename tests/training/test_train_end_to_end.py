"""`ssi train` end to end on a synthetic corpus whose relevant pairs share synonyms but no words."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from ssi.bundle import load_bundle
from ssi.corpus import read_corpus, read_pairs
from ssi.encoder_io import run_encoder
from ssi_cli.main import build_app
from tests.training.synonyms import SynonymCorpus, held_out_map, train


def test_ssi_learns_synonyms_that_tfidf_cannot_see(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    summary = train(synonyms, tmp_path / "bundle", "--epochs", "40", "--dims", "16", "--lr", "0.1")
    ssi_map, tfidf_map = held_out_map(synonyms, tmp_path / "bundle")
    # 8 held-out right-side documents of the query's topic among 283 candidates; tf-idf sees only
    # filler words, so it ranks them about as a random order would (MAP ≈ 0.03).
    assert tfidf_map < 0.1
    assert ssi_map > 0.8
    assert ssi_map > 8 * tfidf_map
    assert summary["valid"]["map"] == pytest.approx(ssi_map, abs=1e-6)  # trainer and harness agree


@pytest.mark.parametrize("kind", ["symmetric", "noidentity", "diagonal", "fullw"])
def test_every_kind_trains_and_exports_a_loadable_bundle(synonyms: SynonymCorpus, tmp_path: Path, kind: str) -> None:
    summary = train(synonyms, tmp_path / kind, "--kind", kind, "--epochs", "3", "--dims", "8")
    bundle = load_bundle(tmp_path / kind)
    assert bundle.manifest.form == kind and summary["form"] == kind and summary["steps"] >= 3
    assert "valid" in bundle.manifest.metrics and bundle.manifest.data["fingerprint"]["corpus"]
    x = bundle.vocab.featurize_queries(["left0w1 common3", "right1w2"])
    session = ort.InferenceSession(str(bundle.encoder_path), providers=["CPUExecutionProvider"])
    got = run_encoder(lambda feed: session.run(None, dict(feed))[0], x)
    np.testing.assert_allclose(got, x.toarray() @ np.asarray(bundle.form.query_map()).T, atol=1e-5)


def test_psi3_warm_starts_from_a_trained_ssi_bundle(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    first = train(synonyms, tmp_path / "ssi", "--epochs", "6", "--dims", "8", "--lr", "0.1")
    summary = train(
        synonyms, tmp_path / "psi3", "--kind", "psi3", "--init-from", str(tmp_path / "ssi"),
        "--epochs", "6", "--dims", "8", "--lr", "0.1", "--eval-every", "2",
    )  # fmt: skip
    bundle = load_bundle(tmp_path / "psi3")
    assert bundle.manifest.form == "psi3" and sorted(bundle.form.values) == ["U", "V", "V3", "Y3"]
    history = bundle.manifest.training["history"]
    # Step 0 is the warm start: exactly the SSI bundle's validation MAP; the best is never below it.
    assert history[0]["map"] == pytest.approx(first["valid"]["map"], abs=1e-6)
    assert summary["valid"]["map"] >= first["valid"]["map"]
    assert bundle.vocab.words == load_bundle(tmp_path / "ssi").vocab.words
    psi_map, _ = held_out_map(synonyms, tmp_path / "psi3")
    assert summary["valid"]["map"] == pytest.approx(psi_map, abs=1e-6)  # trainer and harness agree


def test_frequent_word_restriction_and_hard_negatives(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    train(
        synonyms, tmp_path / "b", "--epochs", "20", "--dims", "16", "--lr", "0.1",
        "--frequent-words", "200", "--hard-fraction", "0.5",
    )  # fmt: skip
    bundle = load_bundle(tmp_path / "b")
    assert np.all(np.asarray(bundle.form.values["U"])[:, 200:] == 0)
    ssi_map, tfidf_map = held_out_map(synonyms, tmp_path / "b")
    assert ssi_map > 2 * tfidf_map


def test_beir_queries_with_a_carved_validation_split(tmp_path: Path) -> None:
    docs = [{"_id": f"d{i}", "title": "", "text": f"topic{i % 4} word{i} filler"} for i in range(40)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [{"_id": f"q{i}", "text": f"about topic{i % 4}"} for i in range(30)]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{(i % 4) + 4 * (i % 5)}\t1\n" for i in range(30))
    (tmp_path / "qrels.tsv").write_text(qrels)
    args = ["train", "--corpus", str(tmp_path / "corpus.jsonl"), "--queries", str(tmp_path / "queries.jsonl")]
    args += ["--qrels", str(tmp_path / "qrels.tsv"), "--out", str(tmp_path / "b"), "--epochs", "2", "--no-progress"]
    args += ["--valid-share", "0.2", "--dims", "4"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    manifest = load_bundle(tmp_path / "b").manifest
    assert manifest.data["task"] == "queries"
    assert manifest.data["valid_pairs"] == 6 and manifest.data["train_pairs"] == 24


def test_keyword_cut_keeps_n_distinct_words_as_featurize_would() -> None:
    from ssi.vocab import Vocabulary
    from training.keywords import cut_to_keywords

    texts = ["a b c d e f g a a", "b c", "h i j k l m"]
    vocab = Vocabulary.build(texts, min_df=1)
    X = vocab.featurize(texts)
    cut = cut_to_keywords(X, vocab.idf, 3, np.random.default_rng(0))
    assert list(np.diff(cut.indptr)) == [3, 2, 3]
    for row in range(3):
        words = [vocab.words[i] for i in cut[row].indices]
        assert set(cut[row].indices) <= set(X[row].indices)
        np.testing.assert_allclose(cut[row].toarray(), vocab.featurize([" ".join(words)]).toarray(), rtol=1e-6)


def test_keyword_training_validates_on_keyword_queries(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    summary = train(synonyms, tmp_path / "kw", "--epochs", "20", "--dims", "16", "--lr", "0.1", "--query-words", "5")
    manifest = load_bundle(tmp_path / "kw").manifest
    assert manifest.training["config"]["query_words"] == 5
    assert summary["valid"]["map"] > 0.5  # five topic-or-filler words still name the topic


def test_unseen_documents_are_left_out_of_training_and_are_the_queries_evaluated(
    synonyms: SynonymCorpus, tmp_path: Path
) -> None:
    from training.splits import unseen_documents

    docs = read_corpus(synonyms.corpus)
    unseen = unseen_documents([d.id for d in docs], 0.2, seed=1)
    assert unseen == unseen_documents([d.id for d in reversed(docs)], 0.2, seed=1)  # order does not matter
    assert len(unseen) == round(0.2 * len(docs))
    summary = train(synonyms, tmp_path / "b", "--epochs", "2", "--dims", "8", "--unseen-docs", "0.2")
    data = load_bundle(tmp_path / "b").manifest.data
    touching = [p for p in read_pairs(synonyms.train_pairs) if p.query_id in unseen or p.doc_id in unseen]
    assert data["unseen"]["documents"] == len(unseen) and data["n_docs"] == len(docs) - len(unseen)
    assert data["unseen"]["training_pairs_left_out"] == len(touching) > 0
    assert data["train_pairs"] == len(read_pairs(synonyms.train_pairs)) - len(touching)
    assert summary["dropped_pairs"] == "none"  # left out on purpose, not dropped as unknown
    out = tmp_path / "eval"
    result = CliRunner().invoke(
        build_app(),
        ["eval", "--bundle", str(tmp_path / "b"), "--corpus", str(synonyms.corpus), "--pairs",
         str(synonyms.train_pairs), "--eval-pairs", str(synonyms.valid_pairs), "--unseen-docs", "0.2",
         "--split-seed", "1", "--baselines", "tfidf", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "results.json").read_text())
    valid_queries = {p.query_id for p in read_pairs(synonyms.valid_pairs)}
    assert report["task"]["name"].endswith("-unseen")
    assert report["task"]["queries"] == len(valid_queries & unseen) > 0
