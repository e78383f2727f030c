"""`ssi learn` end to end without a server: a tiny corpus, a BM25-start bundle, a synthetic event store (written
with the contract's schema, ssi.traffic), one round: split, train, estimate, report."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from ssi.traffic import EVENTS_SCHEMA, EVENTS_SCHEMA_VERSION
from training.cli import register
from training.click_recipe import CLICK_RECIPE
from training.feedback.promote import DEFAULT_FOLDS
from training.feedback.round import RoundSettings, fold_count, train_command
from training.feedback.start import write_bm25_start

TOPICS = ["river", "money", "music", "forest", "storm", "harbour", "market", "valley"]
SYNONYM = {t: f"{t}ish" for t in TOPICS}  # a word no document has


def write_world(root: Path) -> tuple[Path, dict[str, str]]:
    """A corpus of 8 topics × 4 documents; query 'riverish money' is relevant to the first river document."""
    rng = np.random.default_rng(0)
    filler = "the a of and to in is for on with".split()
    corpus = root / "corpus.jsonl"
    relevant: dict[str, str] = {}
    with corpus.open("w", encoding="utf-8") as handle:
        for t, topic in enumerate(TOPICS):
            for k in range(4):
                words = [topic] * 3 + list(rng.choice(filler, size=6)) + [TOPICS[(t + 1) % len(TOPICS)]]
                doc_id = f"{topic}-{k}"
                relevant.setdefault(SYNONYM[topic] + " " + TOPICS[(t + 1) % len(TOPICS)], doc_id)
                handle.write(json.dumps({"id": doc_id, "title": topic, "text": " ".join(words)}) + "\n")
    return corpus, relevant


def write_store(path: Path, relevant: dict[str, str], n: int = 240) -> None:
    """Impressions of 10 documents each, one in twenty randomized; a click on the relevant one when shown."""
    rng = np.random.default_rng(1)
    doc_ids = [f"{t}-{k}" for t in TOPICS for k in range(4)]
    conn = sqlite3.connect(path)
    conn.executescript(EVENTS_SCHEMA)
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (EVENTS_SCHEMA_VERSION,))
    queries = list(relevant)
    for i in range(n):
        query = queries[i % len(queries)]
        text_hash = hashlib.sha256(query.encode()).hexdigest()
        conn.execute("INSERT OR IGNORE INTO texts VALUES (?, ?)", (text_hash, query))
        shown = [str(d) for d in rng.permutation(doc_ids)[:10]]
        target = relevant[query]
        if target not in shown:
            shown[int(rng.integers(10))] = target
        conn.execute(
            "INSERT INTO impressions VALUES (?, ?, 'search', ?, 'start', ?, 1, ?)",
            (f"imp-{i:04d}", 1000.0 + i, text_hash, int(i % 20 == 0), json.dumps(shown)),
        )
        position = shown.index(target) + 1
        if rng.random() < position**-0.5:
            conn.execute("INSERT INTO clicks VALUES (?, ?, ?, ?, NULL)", (f"imp-{i:04d}", target, position, 1000.5 + i))
    conn.commit()
    conn.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("learn")
    corpus, relevant = write_world(root)
    (root / "bundles").mkdir()
    write_bm25_start(corpus, root / "bundles" / "start", dims=8)
    store = root / "events.sqlite"
    write_store(store, relevant)
    return {"root": root, "corpus": corpus, "served": root / "bundles" / "start", "store": store}


def test_learn_round_trains_estimates_and_reports(world: dict[str, Path]) -> None:
    app = typer.Typer()
    register(app)
    report = world["root"] / "round.json"
    args = ["learn", "--log", str(world["store"]), "--served", str(world["served"]), "--corpus", str(world["corpus"])]
    args += ["--name", "cand", "--report", str(report), "--epochs", "200", "--lr", "0.1", "--eta", "0.5"]
    args += ["--split", "time", "--warm", "--warm-lr-scale", "1", "--threads", "1", "--train-args", "--valid-share 0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "decision:" in result.output
    data = json.loads(report.read_text())
    assert data["impressions"] == {"train": 192, "held_out": 48}
    assert Path(data["candidate"]) == world["root"] / "bundles" / "cand"  # beside the served bundle
    assert any((world["root"] / "bundles" / "cand").iterdir())
    assert data["start"].startswith("warm start") and "--init-from" in data["train_command"]
    estimate = data["estimate"]
    assert estimate["impressions"] == 48 and estimate["clicks"] > 0 and estimate["eta"] == 0.5
    assert estimate["ci95"][0] <= estimate["mean"] <= estimate["ci95"][1]
    assert data["promoted"] == (estimate["mean"] - estimate["stderr"] >= 0 and estimate["mean"] != 0)
    # A query names its topic's neighbour, which its relevant document mentions once and the neighbour's own
    # documents three times: BM25 ranks those first; learning from the clicks moves the clicked one up.
    assert estimate["mean"] > 0


def test_learn_round_cross_fits_every_query(world: dict[str, Path]) -> None:
    """--folds 2: two candidates, each trained on the other fold's queries; every impression is held out once, so
    every query judges; one judge per fold or one for all, anything else is refused by name.

    Slow: two candidates trained and judged, one for each fold."""
    app = typer.Typer()
    register(app)
    report = world["root"] / "folds.json"
    args = ["learn", "--log", str(world["store"]), "--served", str(world["served"]), "--corpus", str(world["corpus"])]
    # A bundles folder of its own: the round history of the one beside the served bundle has the first test's round.
    args += ["--bundles", str(world["root"] / "folds")]
    args += ["--name", "folded", "--report", str(report), "--epochs", "100", "--lr", "0.1", "--eta", "0.5"]
    args += ["--folds", "2", "--debias", "ips", "--labels", "ips", "--threads", "1", "--train-args", "--valid-share 0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["folds"] == 2 and data["impressions"]["held_out"] == 240  # all of them, once
    assert [Path(c).name for c in data["candidates"]] == ["folded-fold1", "folded-fold2"]
    assert all(any(Path(c).iterdir()) for c in data["candidates"])
    assert data["estimate"]["folds"] == 2 and data["estimate"]["queries"] == len(TOPICS)
    assert data["judges"] == [str(world["served"])] * 2
    assert data["promoted"] == ("serving" in data)
    if data["promoted"]:
        assert Path(data["serving"]).name == "folded-refit"  # no candidate saw every query: the refit is served
    three = args + ["--name", "three"] + ["--judge", str(world["served"])] * 3
    refused = CliRunner().invoke(app, three)
    assert refused.exit_code == 2 and "3 judges given for 2 folds" in refused.output


def test_folds_default_to_cross_fitting_only_where_they_can(tmp_path: Path) -> None:
    """The query split cross-fits by default; a time split or a held-out share asked for is one fold; folds with
    either is refused by name rather than one of the two silently ignored."""
    base = {"log": tmp_path, "served": tmp_path, "corpus": tmp_path}
    assert fold_count(RoundSettings(**base)) == DEFAULT_FOLDS > 1
    assert fold_count(RoundSettings(**base, split="time")) == 1
    assert fold_count(RoundSettings(**base, holdout=0.3)) == 1
    assert fold_count(RoundSettings(**base, folds=5)) == 5
    with pytest.raises(ValueError, match="--split query"):
        fold_count(RoundSettings(**base, split="time", folds=2))
    with pytest.raises(ValueError, match="--folds 1"):
        fold_count(RoundSettings(**base, holdout=0.3, folds=2))


def test_a_round_trains_the_click_recipe_unless_told(world: dict[str, Path]) -> None:
    """At its defaults a round trains what the simulated loop measured (training.click_recipe), not `ssi train`'s
    10-minute budget three members over; the round's own flags and then --train-args win."""
    base = RoundSettings(log=world["store"], served=world["served"], corpus=world["corpus"])

    def flags(settings: RoundSettings) -> dict[str, str]:
        args, _ = train_command(settings, Path("clicks.jsonl"), Path("out"))
        return {flag: value for flag, value in zip(args, args[1:], strict=False)}  # a repeated flag: its last value

    recipe = flags(base)
    assert recipe["--epochs"] == f"{CLICK_RECIPE.epochs:g}" and recipe["--lr"] == f"{CLICK_RECIPE.lr:g}"
    assert recipe["--hard-fraction"] == "0" and recipe["--valid-share"] == "0" and "--max-minutes" not in recipe
    timed = flags(replace(base, max_minutes=5))
    assert timed["--max-minutes"] == "5" and "--epochs" not in timed
    told = flags(replace(base, epochs=3, lr=0.1, train_args=["--hard-fraction", "0.5"]))
    assert (told["--epochs"], told["--lr"], told["--hard-fraction"]) == ("3", "0.1", "0.5")  # the last one wins
