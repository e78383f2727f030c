"""The BM25 lexical part alone (q·d of a BM25 vocabulary, no model) under vocabulary cuts and BM25 parameters.

Why the BM25 weighting keeps every word (training.run.VOCAB_DEFAULTS): a word seen in one document is one of
BM25's strongest matches. On SciFact's 809 train claims:

    python -m benchmarks.lexical_vocab --corpus $S/corpus.jsonl.gz --queries $S/queries.jsonl.gz \\
        --qrels $S/qrels/train.tsv --cuts 10000000:1,30000:2 --k1 1.5 --b 0.75

prints NDCG@10 and MAP per (words kept, fewest documents a word is in, k1, b).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ssi.corpus import read_beir_queries, read_corpus, read_qrels
from ssi.vocab import Vocabulary
from ssi.weighting import Bm25
from training.evaluate.metrics import quick_metrics
from training.evaluate.tasks import beir_task


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def main(
    corpus: Annotated[Path, typer.Option(help="Corpus JSONL.")],
    queries: Annotated[Path, typer.Option(help="BEIR queries JSONL.")],
    qrels: Annotated[Path, typer.Option(help="BEIR qrels TSV: the queries scored.")],
    cuts: Annotated[str, typer.Option(help="Vocabulary cuts WORDS:MIN_DF, comma-separated.")] = "10000000:1,30000:2",
    k1: Annotated[str, typer.Option(help="BM25 k1 values, comma-separated.")] = "1.5",
    b: Annotated[str, typer.Option(help="BM25 b values, comma-separated.")] = "0.75",
) -> None:
    docs = read_corpus(corpus)
    task = beir_task(docs, read_beir_queries(queries), read_qrels(qrels))
    texts = [d.full_text for d in docs]
    for cut in cuts.split(","):
        words, min_df = (int(part) for part in cut.split(":"))
        for k1_value in _floats(k1):
            for b_value in _floats(b):
                vocab = Vocabulary.build(texts, max_words=words, min_df=min_df, bm25=Bm25(k1=k1_value, b=b_value))
                scores = vocab.featurize_queries(list(task.query_texts)) @ vocab.featurize_documents(texts).T
                found = quick_metrics(scores.toarray(), task.relevant_matrix, task.excluded_matrix)
                print(
                    f"D={vocab.n_words} min_df={min_df} k1={k1_value} b={b_value}: "
                    f"NDCG@10 {found['ndcg@10'].mean():.4f}  MAP {found['map'].mean():.4f}",
                    flush=True,
                )


if __name__ == "__main__":
    typer.run(main)
