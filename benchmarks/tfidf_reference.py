"""The reference figure every Wikispeedia table is read against: tf-idf cosine on the filtered document–document
validation task (3,719 queries × 4,604 documents, MAP ≈ 0.1125; docs/results/wikispeedia.md).

The harness end to end on the whole corpus: read it and the links, build the task (training pairs filtered out),
a 30,000-word vocabulary of the corpus, tf-idf rows of every document, every query scored against every
document, the four metrics per query. tests/training/evaluate/test_data.py checks the same on a slice of the
corpus (the whole of it took two minutes on a loaded two-core machine).

    python -m benchmarks.tfidf_reference --data ../shared/data/wikispeedia --out runs/tfidf-reference.json

prints (and writes to --out) each metric's mean ± standard error over queries, the task's size and the seconds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from benchmarks.replication_faults import write_figures
from ssi.corpus import read_corpus, read_pairs
from ssi.records import Document, Pair
from ssi.vocab import Vocabulary
from training.evaluate.baselines.tfidf import TfidfScorer
from training.evaluate.features import TextFeatures, TokenTable
from training.evaluate.harness import score_task
from training.evaluate.metrics import METRICS, summarize
from training.evaluate.tasks import doc_doc_task

VOCABULARY_WORDS = 30_000


def corpus_vocabulary(docs: list[Document], tokens: TokenTable, size: int = VOCABULARY_WORDS) -> Vocabulary:
    """The most frequent `size` words of the documents, tokenized once into `tokens` (the scorer reuses them)."""
    ids = tokens.ids([d.full_text for d in docs])
    return Vocabulary.build_from_tokens(([tokens.words[i] for i in x.tolist()] for x in ids), max_words=size)


def tfidf_reference(docs: list[Document], valid: list[Pair], train: list[Pair]) -> dict[str, Any]:
    """tf-idf cosine on the filtered document–document task of `valid` (`train` left out of each ranking)."""
    started = time.perf_counter()
    task = doc_doc_task(docs, valid, train)
    tokens = TokenTable()
    features = TextFeatures(corpus_vocabulary(docs, tokens), tokens)
    values = score_task(task, TfidfScorer(features, docs), quick=True)
    return {
        "queries": task.n_queries,
        "documents": task.n_docs,
        "problems": task.stats.problems(),
        "metrics": {m: {"mean": summarize(values[m]).mean, "stderr": summarize(values[m]).stderr} for m in METRICS},
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(
    data: Annotated[Path, typer.Option(help="The Wikispeedia folder (docs.jsonl.gz, links.*.tsv.gz).")] = Path(
        "../shared/data/wikispeedia"
    ),
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON too.")] = None,
) -> None:
    docs = read_corpus(data / "docs.jsonl.gz")
    found = tfidf_reference(docs, read_pairs(data / "links.valid.tsv.gz"), read_pairs(data / "links.train.tsv.gz"))
    write_figures(found, out)


if __name__ == "__main__":
    typer.run(main)
