"""Correlated feature hashing (`--kind cfh`): where only rare words carry the meaning, the hashed model
learns what tf-idf and a frequent-word SSI cannot, and `ssi train` writes the map into the bundle.

The generated corpus has, per topic, a few frequent topic words and many rare words. Unlabeled
background documents mix them (that is where DICE finds which frequent words a rare word goes
with); the linked documents hold only rare words of their topic plus filler words common to all
topics. A pair's documents seldom share a rare word (tf-idf is weak), and their frequent words are
filler (a frequent-word SSI has nothing to learn from), but each rare word hashes to its topic's
frequent words, so the hashed model sees the topic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ssi.bundle import load_bundle
from ssi.corpus import read_corpus, read_pairs
from ssi_cli.main import build_app
from training.evaluate.baselines.tfidf import TfidfScorer
from training.evaluate.features import TextFeatures
from training.evaluate.form_scorer import FormScorer
from training.evaluate.harness import score_task
from training.evaluate.metrics import MAP
from training.evaluate.tasks import doc_doc_task
from training.settings import TrainSettings

TOPICS, TOPIC_WORDS, RARE_WORDS, FILLER = 8, 6, 120, 40
FREQUENT = FILLER + TOPICS * TOPIC_WORDS  # the filler and topic words: the top of the vocabulary


@dataclass
class RareCorpus:
    corpus: Path
    train_pairs: Path
    valid_pairs: Path


def make_rare_word_corpus(folder: Path, *, linked: int = 12, background: int = 24, seed: int = 0) -> RareCorpus:
    rng = np.random.default_rng(seed)
    filler = [f"filler{i}" for i in range(FILLER)]
    docs: list[dict[str, str]] = []
    pairs_train: list[str] = []
    pairs_valid: list[str] = []
    for t in range(TOPICS):
        topic = [f"topic{t}word{i}" for i in range(TOPIC_WORDS)]
        rare = [f"rare{t}x{i}" for i in range(RARE_WORDS)]
        for j in range(background):
            words = [*rng.choice(topic, 4, replace=False), *rng.choice(rare, 30, replace=False)]
            words += list(rng.choice(filler, 20))
            rng.shuffle(words)
            docs.append({"id": f"bg-{t}-{j}", "title": "", "text": " ".join(words)})
        ids = [f"doc-{t}-{j}" for j in range(linked)]
        for doc_id in ids:
            words = [*rng.choice(rare, 5, replace=False), *rng.choice(filler, 20)]
            rng.shuffle(words)
            docs.append({"id": doc_id, "title": "", "text": " ".join(words)})
        for doc_id in ids:
            others = rng.permutation([i for i in ids if i != doc_id])
            pairs_train += [f"{doc_id}\t{o}" for o in others[:4]]
            pairs_valid += [f"{doc_id}\t{o}" for o in others[4:]]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (folder / "train.tsv").write_text("\n".join(pairs_train) + "\n", encoding="utf-8")
    (folder / "valid.tsv").write_text("\n".join(pairs_valid) + "\n", encoding="utf-8")
    return RareCorpus(folder / "corpus.jsonl", folder / "train.tsv", folder / "valid.tsv")


def train(data: RareCorpus, out: Path, *extra: str) -> dict:
    args = ["train", "--corpus", str(data.corpus), "--pairs", str(data.train_pairs), "--valid-pairs"]
    args += [str(data.valid_pairs), "--out", str(out), "--no-progress", "--seed", "1", "--threads", "1"]
    args += ["--frequent-words", str(FREQUENT), "--dims", "16", "--eval-every", "10", *extra]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output[result.output.index("{") :])


@pytest.fixture(scope="module")
def rare(tmp_path_factory: pytest.TempPathFactory) -> RareCorpus:
    return make_rare_word_corpus(tmp_path_factory.mktemp("rare"))


def test_hashed_rare_words_beat_tfidf_and_the_frequent_word_ssi(rare: RareCorpus, tmp_path: Path) -> None:
    # cfh is built on tf-idf rows of the words themselves: its warm start has no stemmer
    plain = train(rare, tmp_path / "lowrank", "--epochs", "30", "--lexical", "tfidf", "--stemmer", "none")
    hashed = train(
        rare, tmp_path / "cfh", "--kind", "cfh", "--init-from", str(tmp_path / "lowrank"), "--warm-lr-scale", "0",
        "--cfh-top-k", "3", "--cfh-ngrams", "1", "--epochs", "30",
    )  # fmt: skip
    bundle = load_bundle(tmp_path / "cfh")
    assert bundle.manifest.form == "cfh" and bundle.manifest.index_dims == 32
    hashing = bundle.vocab.hashing
    assert hashing is not None and hashing.n_frequent == FREQUENT and hashing.k == 3
    assert bundle.manifest.hashing is not None and bundle.manifest.hashing["2grams"] == 0
    # Most rare words' best match is a word of their own topic (the DICE map found the topics).
    top = [bundle.vocab.words[t] for t in hashing.targets[:, 0]]
    own = [
        w.startswith(f"topic{f[4 : f.index('x')]}word")
        for f, w in zip(hashing.features, top, strict=True)
        if f.startswith("rare")
    ]
    assert np.mean(own) > 0.9
    docs = read_corpus(rare.corpus)
    task = doc_doc_task(docs, read_pairs(rare.valid_pairs), read_pairs(rare.train_pairs))
    maps = {}
    for name in ("lowrank", "cfh"):
        loaded = load_bundle(tmp_path / name)
        maps[name] = float(score_task(task, FormScorer.from_bundle(loaded, docs), quick=True)[MAP].mean())
    base = load_bundle(tmp_path / "lowrank").vocab
    maps["tfidf"] = float(score_task(task, TfidfScorer(TextFeatures(base), docs), quick=True)[MAP].mean())
    assert maps["cfh"] > maps["tfidf"] + 0.15 and maps["cfh"] > maps["lowrank"] + 0.15, maps
    assert hashed["valid"]["map"] == pytest.approx(maps["cfh"], abs=1e-6)  # trainer and harness agree
    assert plain["valid"]["map"] == pytest.approx(maps["lowrank"], abs=1e-6)
    # Learned, not given by the map alone: before training, the hashed slots' overlap in q·d did not help.
    start = bundle.manifest.training["history"][0]
    assert start["step"] == 0 and start["map"] < maps["tfidf"] + 0.05


def test_cfh_needs_the_frequent_words_it_hashes_onto(rare: RareCorpus, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--kind cfh hashes onto the top --frequent-words"):
        TrainSettings(corpus=rare.corpus, out=tmp_path / "x", pairs=rare.train_pairs, kind="cfh")
