"""Where a bundle served on another corpus loses to BM25: its form whole and its lexical part alone (U = V = 0),
each with the vocabulary closed and open (ssi.open_vocab) with the bundle's statistics and with the collection's
(idf and avg_len from the served corpus), beside BM25 on stems over that corpus, in one run.

The measurement of docs/guides/open-vocabulary.md (a Wikispeedia bundle serving SciFact's 809 train claims):

    python -m benchmarks.open_vocab_parts --bundle /tmp/ov2/wiki --corpus $S/corpus.jsonl.gz \\
        --queries $S/queries.jsonl.gz --qrels $S/qrels/train.tsv

prints NDCG@10 and MAP (mean ± standard error over queries) and NDCG@10 minus BM25's, query by query. With
`--served CACHE`, the service in process (`SSI_OPEN_VOCAB=true`, each `SSI_OPEN_VOCAB_STATISTICS`, a flat index with
its snapshots under CACHE) then ranks every query, and the claims whose served top 10 is `ssi eval`'s are counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from service.collection import Collection
from service.metrics import Metrics
from service.settings import CollectionSpec, Settings
from ssi.bundle import load_bundle
from ssi.corpus import read_beir_queries, read_corpus, read_qrels
from ssi.forms import form_class
from ssi.open_vocab import STATISTICS, CollectionStatistics
from ssi.stemming import NO_STEMMER
from training.evaluate.baselines.bm25 import BM25Scorer
from training.evaluate.features import TextFeatures, TokenTable
from training.evaluate.form_scorer import FormScorer
from training.evaluate.harness import evaluate
from training.evaluate.rank import top_k
from training.evaluate.scorer import Scorer
from training.evaluate.tasks import beir_task


def main(
    bundle: Annotated[Path, typer.Option(help="A BM25 bundle.")],
    corpus: Annotated[Path, typer.Option(help="Corpus JSONL it serves.")],
    queries: Annotated[Path, typer.Option(help="BEIR queries JSONL.")],
    qrels: Annotated[Path, typer.Option(help="BEIR qrels TSV: the queries scored.")],
    served: Annotated[
        Path | None, typer.Option(help="Also rank through the service in process, its cache in this folder.")
    ] = None,
) -> None:
    docs = read_corpus(corpus)
    tokens = TokenTable()
    task = beir_task(docs, read_beir_queries(queries), read_qrels(qrels))
    loaded = load_bundle(bundle, mmap=False)
    lexical_only = form_class(loaded.form.name)({k: np.zeros_like(v) for k, v in loaded.form.values.items()})
    features = TextFeatures(loaded.vocab, tokens)
    scorers: dict[str, Scorer] = {}
    for part, form in (("whole", loaded.form), ("lexical part", lexical_only)):
        scorers[f"{part}, closed"] = FormScorer(loaded.vocab, form, docs, features=features)
        for statistics in STATISTICS:
            scorers[f"{part}, open, {statistics} statistics"] = FormScorer(
                loaded.vocab, form, docs, features=features, open_vocab=True, statistics=statistics
            )
    # One statistic from the collection at a time (the other the bundle's): where the lexical part's gap comes from.
    collection = scorers["lexical part, open, collection statistics"]
    assert isinstance(collection, FormScorer) and collection.collection is not None and loaded.vocab.bm25 is not None
    halves = {
        "collection idf only": CollectionStatistics(loaded.vocab.bm25, collection.collection.idf),
        "collection avg_len only": CollectionStatistics(collection.collection.bm25, loaded.vocab.idf),
    }
    for half, statistics in halves.items():
        scorers[f"lexical part, open, {half}"] = FormScorer(
            loaded.vocab, lexical_only, docs, features=features, open_vocab=True, statistics=statistics
        )
    scorers["bm25"] = BM25Scorer(docs, tokens=tokens, stemmer=loaded.vocab.stemmer or NO_STEMMER)
    table = evaluate(task, scorers)
    print(f"{task.n_queries} queries × {len(docs)} documents; bundle {loaded.vocab.bm25}")
    reference = np.asarray(table.results["bm25"].per_query["ndcg@10"])
    for name, result in table.results.items():
        ndcg, ap = result.summary["ndcg@10"], result.summary["map"]
        gap = table.paired_difference(name)
        delta = np.asarray(result.per_query["ndcg@10"]) - reference
        print(
            f"{name:42s} NDCG@10 {ndcg.mean:.4f} ± {ndcg.stderr:.4f}  MAP {ap.mean:.4f} ± {ap.stderr:.4f}"
            + ("" if gap is None else f"  Δ NDCG@10 vs bm25 {gap.mean:+.4f} ± {gap.stderr:.4f}")
            + ("" if name == "bm25" else f"  queries higher {(delta > 0).sum()} / lower {(delta < 0).sum()}")
        )
    if served is not None:
        texts = list(task.query_texts)
        for statistics in STATISTICS:
            scorer = scorers[f"whole, open, {statistics} statistics"]
            cache = served / statistics
            ids = [d.id for d in docs]
            agreement = _served_agreement(bundle, corpus, cache, statistics, scorer, texts, ids)
            print(
                f"served, open, {statistics} statistics: the top 10 of ssi eval for {agreement.same}/{len(texts)} "
                f"queries (largest score difference {agreement.worst:.1e}); index computed in "
                f"{agreement.build_seconds:.1f} s; a search {agreement.live_ms:.2f} ms per query, "
                f"{agreement.dead_ms:.2f} ms once every {DEAD_EVERY}th document is deleted (one run each, in process); "
                f"the query's lexical values {agreement.values_us[0]:.1f} µs, {agreement.values_us[1]:.1f} µs with "
                "those deleted"
            )


DEAD_EVERY = 20  # documents deleted (one in DEAD_EVERY) to time searches where some rows are dead


@dataclass(frozen=True)
class Agreement:
    """The service in process against ssi eval's scorer on the same queries."""

    same: int  # queries whose served top 10 is the scorer's
    worst: float  # largest difference of a served score and the scorer's
    build_seconds: float  # computing the index from the corpus
    live_ms: float  # a search, mean over the queries, every row live
    dead_ms: float  # the same once one document in DEAD_EVERY is deleted
    values_us: tuple[float, float]  # ModelState.lexical_values alone, mean over the queries: every row live, then not


def _served_agreement(
    bundle: Path, corpus: Path, cache: Path, statistics: str, scorer: Scorer, texts: list[str], ids: list[str]
) -> Agreement:
    """Rank `texts` through a collection served in process from `corpus` (whose documents are `ids`) and compare."""
    settings = Settings(
        bundle=bundle,
        corpus=corpus,
        cache_dir=cache,
        open_vocab=True,
        open_vocab_statistics=statistics,
        insecure_writes=True,
    )
    started = time.perf_counter()
    collection = Collection("documents", CollectionSpec(bundle=bundle, corpus=corpus), settings, Metrics())
    collection.load()
    build_seconds = time.perf_counter() - started
    try:
        cols, values = top_k(scorer.score(texts), 10)
        same, worst = 0, 0.0
        started = time.perf_counter()
        results = [collection.search([text], 10, 0)[0] for text in texts]
        live_ms = (time.perf_counter() - started) * 1000 / len(texts)
        for i, result in enumerate(results):
            expected = [ids[j] for j in cols[i].tolist()]
            same += result.doc_ids == expected
            if len(result.scores) == len(expected):
                worst = max(worst, float(np.abs(np.asarray(result.scores) - values[i]).max(initial=0.0)))
        live_us = _lexical_values_us(collection, texts)
        for doc_id in ids[::DEAD_EVERY]:
            collection.delete(doc_id)
        started = time.perf_counter()
        for text in texts:
            collection.search([text], 10, 0)
        dead_ms = (time.perf_counter() - started) * 1000 / len(texts)
        return Agreement(same, worst, build_seconds, live_ms, dead_ms, (live_us, _lexical_values_us(collection, texts)))
    finally:
        collection.close()


def _lexical_values_us(collection: Collection, texts: list[str]) -> float:
    """µs per query of the step the collection's statistics add to a search (`ModelState.lexical_values`: the
    words' live document frequencies and the scaling), over the queries' rows featurized beforehand."""
    state = collection.ready_state()
    rows = state.embedder.featurize_queries(texts)
    started = time.perf_counter()
    with state.lock.read():
        for i in range(len(texts)):
            state.lexical_values(rows, int(rows.indptr[i]), int(rows.indptr[i + 1]))
    return (time.perf_counter() - started) * 1e6 / len(texts)


if __name__ == "__main__":
    typer.run(main)
