"""The yardstick: BM25 (bm25s, Lucene variant) in-process over the same corpus and queries.

Text goes through the project's tokenizer, so both systems see the same words. BM25 is queried
in-process, one query at a time (what a request costs it) and as one batch, without HTTP; the
SSI figures are over HTTP, so the ratio is an upper bound on the price of the learned ranking.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import psutil

from service.bench.load import summarize
from service.bench.queries import corpus_texts
from ssi.tokenize import tokenize


def bm25_yardstick(corpus: Path, queries: list[str], k: int = 10) -> dict[str, Any]:
    rss_before = psutil.Process().memory_info().rss
    started = time.perf_counter()
    ids: list[str] = []
    tokens: list[list[str]] = []
    for doc_id, text in corpus_texts(corpus):
        ids.append(doc_id)
        tokens.append(tokenize(text))
    tokenized = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    indexed = time.perf_counter()
    del tokens
    rss_after = psutil.Process().memory_info().rss
    query_tokens = [tokenize(q) or ["\u2205"] for q in queries]
    k = min(k, len(ids))
    latencies = []
    for q in query_tokens[:20]:  # warm-up
        retriever.retrieve([q], k=k, show_progress=False)
    for q in query_tokens:
        sent = time.perf_counter()
        retriever.retrieve([q], k=k, show_progress=False)
        latencies.append(time.perf_counter() - sent)
    single = summarize(latencies, clients=1, errors=0, seconds=float(np.sum(latencies)))
    sent = time.perf_counter()
    retriever.retrieve(query_tokens, k=k, show_progress=False, n_threads=1)
    batch_seconds = time.perf_counter() - sent
    return {
        "documents": len(ids),
        "tokenize_seconds": round(tokenized - started, 3),
        "index_seconds": round(indexed - tokenized, 3),
        "index_rss_mb": round((rss_after - rss_before) / 2**20, 1),
        "single_query": single.as_dict(),
        "batch_qps": round(len(queries) / batch_seconds, 1),
    }
