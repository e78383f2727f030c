"""A synthetic corpus where relevant documents share meaning but no words.

Each topic has two disjoint word pools, "left" and "right" (synonyms of each other). Left documents
draw their topic words from the left pool, right documents from the right pool, and every document
adds common filler words drawn from one pool shared by all topics. A pair links a left document to
right documents of the same topic, so the query and its relevant documents share only filler words:
tf-idf cannot tell the right topic from the wrong ones, while SSI can learn left ↔ right.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from ssi.bundle import load_bundle
from ssi.corpus import read_corpus, read_pairs
from ssi.vocab import Vocabulary
from ssi_cli.main import build_app
from training.evaluate.baselines.tfidf import TfidfScorer
from training.evaluate.features import TextFeatures
from training.evaluate.form_scorer import FormScorer
from training.evaluate.harness import score_task
from training.evaluate.metrics import MAP
from training.evaluate.tasks import doc_doc_task

# A handful of short texts for the kinds' block-level tests (gradients, scores against the form).
TEXTS = [
    "red apple fruit sweet",
    "green apple fruit sour",
    "car engine wheel road",
    "truck engine wheel cargo",
    "apple pie recipe sweet",
    "road trip car music",
]


@dataclass
class SynonymCorpus:
    corpus: Path
    train_pairs: Path
    valid_pairs: Path
    n_docs: int


def make_synonym_corpus(
    folder: Path,
    *,
    n_topics: int = 12,
    docs_per_side: int = 12,
    pool_words: int = 15,
    words_per_doc: int = 25,
    filler_words: int = 60,
    seed: int = 0,
) -> SynonymCorpus:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    filler = [f"common{i}" for i in range(filler_words)]
    docs: list[dict[str, str]] = []
    sides: dict[tuple[int, str], list[str]] = {}
    for topic in range(n_topics):
        for side in ("left", "right"):
            pool = [f"{side}{topic}w{i}" for i in range(pool_words)]
            for j in range(docs_per_side):
                words = list(rng.choice(pool, size=words_per_doc)) + list(rng.choice(filler, size=words_per_doc))
                rng.shuffle(words)
                doc_id = f"{side}-{topic}-{j}"
                docs.append({"id": doc_id, "title": "", "text": " ".join(words)})
                sides.setdefault((topic, side), []).append(doc_id)
    train: list[str] = []
    valid: list[str] = []
    for topic in range(n_topics):
        rights = sides[(topic, "right")]
        for left in sides[(topic, "left")]:
            # Four links to train on; every other right document of the topic is a held-out
            # link, so a model that learned the topic ranks all the held-out ones first.
            targets = rng.permutation(rights)
            train.extend(f"{left}\t{t}" for t in targets[:4])
            valid.extend(f"{left}\t{t}" for t in targets[4:])
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (folder / "train.tsv").write_text("\n".join(train) + "\n", encoding="utf-8")
    (folder / "valid.tsv").write_text("\n".join(valid) + "\n", encoding="utf-8")
    return SynonymCorpus(corpus, folder / "train.tsv", folder / "valid.tsv", len(docs))


def train(data: SynonymCorpus, out: Path, *extra: str) -> dict:
    """`ssi train` on the corpus (seed 1, one thread, validation on its held-out links); its JSON summary."""
    args = ["train", "--corpus", str(data.corpus), "--pairs", str(data.train_pairs)]
    args += ["--valid-pairs", str(data.valid_pairs), "--out", str(out), "--no-progress", "--seed", "1"]
    args += ["--threads", "1", *extra]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output[result.output.index("{") :])


def held_out_map(data: SynonymCorpus, bundle_dir: Path) -> tuple[float, float]:
    """(the bundle's MAP, tf-idf's MAP) on the validation links, filtered, from the evaluation harness."""
    docs = read_corpus(data.corpus)
    task = doc_doc_task(docs, read_pairs(data.valid_pairs), read_pairs(data.train_pairs))
    bundle = load_bundle(bundle_dir)
    features = TextFeatures(bundle.vocab)
    learned = score_task(task, FormScorer.from_bundle(bundle, docs, features=features), quick=True)[MAP].mean()
    # tf-idf is tf-idf beside a BM25 bundle too: its own vocabulary on the corpus then.
    base = features if bundle.vocab.symmetric else TextFeatures(Vocabulary.build([d.full_text for d in docs]))
    tfidf = score_task(task, TfidfScorer(base, docs), quick=True)[MAP].mean()
    return float(learned), float(tfidf)
