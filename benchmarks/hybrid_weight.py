"""How the day-one hybrid (BM25 on stems + λ · all-MiniLM-L6-v2's cosine) moves with λ on SciFact's validation claims,
beside each part alone and z-scores per query averaged, all in one process on the same claims and documents.

It shows where the rule `ssi train --encoder` uses without pairs (λ = 1, training/hybrid.py) lands among the
weights; it tunes nothing. The BM25 part is the day-one bundle's own (the default vocabulary: stems, every word).

    python -m benchmarks.hybrid_weight --out runs/hybrid-weight.json

`--learned B` adds a bundle trained without labels in the BM25 part's place (`ssi train --self-pairs title`: its
BM25 plus what it learned from titles and their abstracts), alone and with λ · the cosine: whether the two
label-free gains add up.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

import ssi
from benchmarks.replication_faults import write_figures
from ssi.corpus import read_beir_queries, read_corpus, read_qrels
from ssi.forms.diagonal import Diagonal
from ssi.sentence import SentenceEncoder
from ssi.vocab import Vocabulary
from ssi.weighting import Bm25
from training.evaluate.form_scorer import FormScorer
from training.evaluate.metrics import NDCG10, quick_metrics
from training.evaluate.tasks import beir_task
from training.pretrained import NAME, checked_minilm_folder
from training.sentence_export import prepare_encoder
from training.sentence_vectors import encode_corpus
from training.splits import split_by_query

WEIGHTS = (0.1, 0.2, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def main(
    data: Annotated[Path, typer.Option(help="SciFact's folder (BEIR layout).")] = Path("../shared/data/scifact"),
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
    learned: Annotated[Path | None, typer.Option(help="A label-free bundle to fuse in BM25's place.")] = None,
) -> None:
    docs = read_corpus(data / "corpus.jsonl.gz")
    _, valid = split_by_query(read_qrels(data / "qrels" / "train.tsv"), 0.2, 0)
    task = beir_task(docs, read_beir_queries(data / "queries.jsonl.gz"), valid, name="valid")
    texts = [d.full_text for d in docs]
    vocab = Vocabulary.build(texts, max_words=10_000_000, min_df=1, bm25=Bm25(), stemmer="english")
    lexical = FormScorer(vocab, Diagonal({"w": np.ones(vocab.size, dtype=np.float32)}), docs).score(task.query_texts)
    with tempfile.TemporaryDirectory() as scratch:
        prepare_encoder(checked_minilm_folder(), Path(scratch) / "sentence", name=NAME, threads=2)
        encoder = SentenceEncoder(Path(scratch) / "sentence", threads=2)
        cosine = encoder.encode(list(task.query_texts)) @ encode_corpus(encoder, texts).T

    def ndcg(scores: np.ndarray) -> dict[str, float]:
        values = quick_metrics(scores, task.relevant_matrix, task.excluded_matrix)[NDCG10]
        return {"ndcg@10": round(float(values.mean()), 4), "se": round(float(values.std() / np.sqrt(values.size)), 4)}

    def z(scores: np.ndarray) -> np.ndarray:
        return (scores - scores.mean(axis=1, keepdims=True)) / scores.std(axis=1, keepdims=True)

    figures = {
        "claims": task.n_queries,
        "documents": task.n_docs,
        "bm25_on_stems": ndcg(lexical),
        "encoder_alone": ndcg(cosine),
        "bm25_plus_weight_times_cosine": {str(w): ndcg(lexical + np.float32(w) * cosine) for w in WEIGHTS},
        "z_scores_averaged": ndcg(z(lexical) + z(cosine)),
    }
    if learned is not None:
        own = ssi.load(learned, corpus=data / "corpus.jsonl.gz").scores(list(task.query_texts))
        figures["learned"] = {"bundle": str(learned), "alone": ndcg(own)}
        figures["learned"] |= {f"plus {w} times cosine": ndcg(own + np.float32(w) * cosine) for w in (0.5, 1.0, 1.5)}
    write_figures(figures, out)


if __name__ == "__main__":
    typer.run(main)
