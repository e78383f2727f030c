"""Click logs: reading both formats, the position-1 restriction, the generators, and training on clicks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ssi.bundle import load_bundle
from ssi.corpus import DataFileError, read_beir_queries, read_corpus, read_qrels
from ssi.records import Document, Pair
from ssi_cli.main import build_app
from training.click_logs.wikispeedia import first_sentence
from training.clicks import load_click_pairs, read_click_log
from training.evaluate.baselines.tfidf import TfidfScorer
from training.evaluate.features import TextFeatures
from training.evaluate.form_scorer import FormScorer
from training.evaluate.harness import score_task
from training.evaluate.metrics import MAP
from training.evaluate.tasks import beir_task

WIKISPEEDIA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "wikispeedia"


def test_jsonl_and_tsv_logs_and_the_position_restriction(tmp_path: Path) -> None:
    jsonl = tmp_path / "clicks.jsonl"
    lines = [
        {"page": "p1", "ad": "a1", "position": 1, "clicked": True},
        {"page": "p1", "ad": "a2", "position": 2, "clicked": True},
        {"page": "p1", "ad": "a3", "position": 3, "clicked": False},
        {"page_text": "an inline page", "ad": "a1", "position": 1, "clicked": 1},
    ]
    jsonl.write_text("".join(json.dumps(line) + "\n" for line in lines))
    log = read_click_log(jsonl)
    inline = next(iter(log.inline_pages))
    assert log.pairs() == [Pair("p1", "a1"), Pair("p1", "a2"), Pair(inline, "a1")]
    assert log.pairs(clicked_position=1) == [Pair("p1", "a1"), Pair(inline, "a1")]
    assert log.counts(1) == {"impressions": 4, "clicks": 3, "pairs": 2}

    tsv = tmp_path / "clicks.tsv"
    tsv.write_text("page\tad\tposition\tclicked\np1\ta1\t1\t1\np1\ta2\t2\t0\n")
    assert read_click_log(tsv).pairs() == [Pair("p1", "a1")]

    pages = tmp_path / "pages.jsonl"
    pages.write_text(json.dumps({"id": "p1", "text": "a page"}) + "\n")
    made = load_click_pairs(jsonl, pages=pages, valid_clicks=tsv, clicked_position=1)
    assert {q.id for q in made.pages} == {"p1", inline}
    assert made.train == [Pair("p1", "a1"), Pair(inline, "a1")] and made.valid == [Pair("p1", "a1")]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"ad": "a1"}', "exactly one of 'page'"),
        ('{"page": "p", "ad": "a", "position": 0}', "positive integer"),
        ('{"page": "p", "ad": "a", "clicked": "maybe"}', "'clicked'"),
        ("p1\ta1\t1", "expected 'page_id"),
    ],
)
def test_a_malformed_log_line_names_itself(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "bad.log"
    path.write_text(line + "\n")
    with pytest.raises(DataFileError, match=problem) as caught:
        read_click_log(path)
    assert f"{path}:1" in str(caught.value)


def test_first_sentence_skips_captions_and_cuts_to_25_words() -> None:
    doc = Document("X", "X", "A photo of X.\nEnlarge\nA photo of X.\n\nX is a town in a valley. It has a river.")
    assert first_sentence(doc) == "X is a town in a valley."
    long = Document("Y", "Y", "Y was " + " ".join(["very"] * 40) + " big. More.")
    assert len(first_sentence(long).split()) == 25


def test_training_on_synthetic_clicks_beats_tfidf(tmp_path: Path) -> None:
    """Adverts share almost no word with their pages: tf-idf is near chance, a click-trained SSI is not."""
    log = tmp_path / "log"
    runner = CliRunner()
    made = runner.invoke(
        build_app(), ["clicks", "synthetic", "--out", str(log), "--pages", "1500", "--ads", "120", "--topics", "8"]
    )
    assert made.exit_code == 0, made.output
    for name in ("ads.jsonl", "pages.jsonl", "clicks.train.jsonl", "qrels.valid.tsv", "qrels.test.tsv"):
        assert (log / name).is_file()
    args = ["train", "--corpus", str(log / "ads.jsonl"), "--pages", str(log / "pages.jsonl")]
    args += ["--clicks", str(log / "clicks.train.jsonl"), "--valid-clicks", str(log / "clicks.valid.jsonl")]
    args += ["--out", str(tmp_path / "b"), "--epochs", "8", "--dims", "16", "--no-progress", "--threads", "1"]
    args += ["--clicked-position", "1", "--eval-every", "5", "--lexical", "tfidf"]  # read against tf-idf below
    trained = runner.invoke(build_app(), args)
    assert trained.exit_code == 0, trained.output
    bundle = load_bundle(tmp_path / "b")
    assert bundle.manifest.data["task"] == "adverts"

    ads = read_corpus(log / "ads.jsonl")
    task = beir_task(ads, read_beir_queries(log / "pages.jsonl"), read_qrels(log / "qrels.test.tsv"))
    features = TextFeatures(bundle.vocab)
    ssi = float(score_task(task, FormScorer.from_bundle(bundle, ads, features=features), quick=True)[MAP].mean())
    tfidf = float(score_task(task, TfidfScorer(features, ads), quick=True)[MAP].mean())
    assert ssi > 1.4 * tfidf, (ssi, tfidf)


@pytest.mark.skipif(not WIKISPEEDIA.is_dir(), reason="needs ../shared/data/wikispeedia")
def test_the_wikispeedia_log_makes_short_adverts_and_a_click_per_link(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        build_app(), ["clicks", "wikispeedia", "--data", str(WIKISPEEDIA), "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    ads = read_corpus(tmp_path / "ads.jsonl")
    assert len(ads) == 4604 and max(len(ad.text.split()) for ad in ads) <= 25
    assert len(read_qrels(tmp_path / "qrels.train.tsv")) == 83840
    assert json.loads((tmp_path / "ads.jsonl").open().readline())["category"]
