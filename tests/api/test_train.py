"""`ssi.train`: what `ssi train` runs, from Python, with the same settings object."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

import ssi
from ssi.bundle import load_bundle
from tests.api.conftest import TINY, ApiWorld
from tests.training.synonyms import held_out_map
from tests.training.synonyms import train as train_command


def test_train_returns_the_bundle_it_wrote(api_world: ApiWorld) -> None:
    trained = api_world.trained
    bundle = load_bundle(trained.bundle)
    assert trained.form == bundle.manifest.form == "lowrank"
    assert trained.content_hash == bundle.content_hash
    assert bundle.manifest.n_dims == TINY["n_dims"]
    assert trained.summary["bundle"] == str(trained.bundle) and trained.summary["steps"] >= 1
    # The validation MAP it reports is the harness's on the held-out links.
    learned, _ = held_out_map(api_world.data, trained.bundle)
    assert trained.valid["map"] == pytest.approx(learned, abs=1e-6)


def test_the_api_and_the_command_train_the_same_model(api_world: ApiWorld, tmp_path: Path) -> None:
    """One settings object behind both: the same options give the same arrays, bit for bit."""
    summary = train_command(
        api_world.data, tmp_path / "cli", "--epochs", "3", "--dims", "8", "--lr", "0.1"
    )  # seed 1, one thread, as TINY
    assert summary["content_hash"] == api_world.trained.content_hash
    assert json.loads(json.dumps(summary["valid"])) == pytest.approx(api_world.trained.valid)


def test_an_unknown_option_or_kind_is_refused_before_any_training(api_world: ApiWorld, tmp_path: Path) -> None:
    data = api_world.data
    with pytest.raises(ValidationError, match="top_k"):
        ssi.train(data.corpus, data.train_pairs, out=tmp_path / "b", top_k=3)
    with pytest.raises(ValueError, match="unknown --kind 'nope'.*lowrank"):
        ssi.train(data.corpus, data.train_pairs, out=tmp_path / "b", kind="nope")
    assert not (tmp_path / "b").exists()


def test_train_without_pairs_takes_queries_and_qrels(tmp_path: Path) -> None:
    """No pairs file: BEIR-style queries with their qrels, the validation split carved from them."""
    docs = [{"_id": f"d{i}", "title": "", "text": f"topic{i % 4} word{i} filler"} for i in range(40)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [{"_id": f"q{i}", "text": f"about topic{i % 4}"} for i in range(30)]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{(i % 4) + 4 * (i % 5)}\t1\n" for i in range(30))
    (tmp_path / "qrels.tsv").write_text(qrels)
    trained = ssi.train(
        tmp_path / "corpus.jsonl", queries=tmp_path / "queries.jsonl", qrels=tmp_path / "qrels.tsv",
        out=tmp_path / "b", valid_share=0.2, progress=False, **{**TINY, "n_dims": 4},
    )  # fmt: skip
    assert load_bundle(trained).manifest.data["task"] == "queries"
