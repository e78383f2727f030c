"""Where a `POST /search` spends its time, stage by stage, in process (no HTTP), on a real collection.

Runs the same steps the route runs, in order, timing each one per query over a fixed query set:
parse the JSON body, featurize (tokenize + tf-idf), the ONNX query encoder, the FAISS search of the
first pool, the lexical candidates (posting lists, `LexicalQuery.above`), the exact rerank (the rest
of `exact_top`), ids to hits, the store read + snippets, and the response model + JSON. The HTTP
and event-loop cost is what `ssi bench` measures above the sum (its 1-client p50 minus this total).

Also times the floors the issue compares against: the FAISS flat scan of one query over the same
vectors (one thread), and K=pool from the same index.

    python -m benchmarks.search_stages --bundle B --passages-from $W/docs.jsonl.gz --passages 100000 \
        --work-dir /tmp/search-stages --out stages.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

STAGES = (
    "parse",
    "featurize",
    "onnx_encode",
    "faiss_search",
    "lexical_candidates",
    "exact_rerank",
    "ids_to_hits",
    "store_and_snippets",
    "response_json",
)


# Stages are timed in this thread's CPU time by default: on a shared machine wall time mostly
# measures the other processes (--clock wall for wall time).
CLOCK = time.thread_time


class _TimedLexical:
    """A LexicalQuery whose calls add their time to `spent` (the lexical part of `exact_top`)."""

    def __init__(self, inner: Any, spent: list[float]) -> None:
        self._inner = inner
        self._spent = spent
        self.nonnegative = inner.nonnegative
        self.max_gain = getattr(inner, "max_gain", np.inf)

    def for_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        started = CLOCK()
        try:
            return self._inner.for_rows(rows)
        finally:
            self._spent[0] += CLOCK() - started

    def above(self, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        started = CLOCK()
        try:
            return self._inner.above(threshold)
        finally:
            self._spent[0] += CLOCK() - started

    def everywhere(self) -> np.ndarray:
        started = CLOCK()
        try:
            return self._inner.everywhere()
        finally:
            self._spent[0] += CLOCK() - started

    def dense_cost_ns(self) -> float:
        return self._inner.dense_cost_ns()

    def lookup_cost_ns(self, rows: int) -> float:
        return self._inner.lookup_cost_ns(rows)


def profile(collection: Any, settings: Any, queries: list[str], k: int, rerank: str = "service") -> dict[str, Any]:
    """`rerank`: "service" (the path the service takes), or "dense" / "pruned" to force exact_top's path for a
    scanning index with l of every row from one dense pass or with the pruned posting-list scan, or
    "general" for its loop for non-scanning indexes, to compare them."""
    from service.rerank import exact_top
    from service.routes.search import to_result
    from service.schemas import SearchRequest, SearchResponse

    state = collection.ready_state()
    pool = collection.pool(state)
    times: dict[str, list[float]] = {stage: [] for stage in STAGES}
    candidates: list[int] = []
    for query in queries:
        body = json.dumps({"query": query, "k": k}).encode()
        t0 = CLOCK()
        request = SearchRequest.model_validate_json(body)
        t1 = CLOCK()
        tfidf = state.embedder.featurize_queries([request.query])
        t2 = CLOCK()
        embedded = state.embedder.embed_queries(tfidf, [request.query])
        t3 = CLOCK()
        bits = state.table.live_bits()
        n_live = state.table.n_live
        first_k = min(max(pool, k), n_live)
        first_scores, first_rows = state.index.search(embedded, first_k, live_bits=bits)
        t4 = CLOCK()
        spent = [0.0]
        words = tfidf.indices[tfidf.indptr[0] : tfidf.indptr[1]]
        values = tfidf.data[tfidf.indptr[0] : tfidf.indptr[1]]
        extra_search = [0.0]

        def semantic(
            kk: int, first: tuple = (first_k, first_scores, first_rows, embedded, bits, extra_search)
        ) -> tuple[np.ndarray, np.ndarray]:
            pool_k, pool_scores, pool_rows, query, live_bits, spent_searching = first
            if kk == pool_k:
                return pool_scores[0], pool_rows[0]
            started = CLOCK()
            scores, rows = state.index.search(query, kk, live_bits=live_bits)
            spent_searching[0] += CLOCK() - started
            return scores[0], rows[0]

        lexical = _TimedLexical(state.lexical.query(words, values), spent)
        ranked = exact_top(
            embedded[0], k, semantic, lexical, state.index.vectors, state.table.live, n_live, pool,
            scan=rerank in ("dense", "pruned") or (rerank == "service" and state.config.index_type != "hnsw"),
            dense={"dense": True, "pruned": False}.get(rerank),
        )  # fmt: skip
        t5 = CLOCK()
        result = state._result(ranked, k, None, query_words=words.shape[0])
        t6 = CLOCK()
        hits = to_result(collection, settings, result, request.query)
        t7 = CLOCK()
        response = SearchResponse(**hits.model_dump(), collection=collection.name, took_ms=1.0)
        payload = json.dumps(response.model_dump(mode="json")).encode()
        t8 = CLOCK()
        assert payload
        times["parse"].append(t1 - t0)
        times["featurize"].append(t2 - t1)
        times["onnx_encode"].append(t3 - t2)
        times["faiss_search"].append(t4 - t3 + extra_search[0])
        times["lexical_candidates"].append(spent[0])
        times["exact_rerank"].append(t5 - t4 - spent[0] - extra_search[0])
        times["ids_to_hits"].append(t6 - t5)
        times["store_and_snippets"].append(t7 - t6)
        times["response_json"].append(t8 - t7)
        candidates.append(ranked.candidates)
    total = np.sum([np.asarray(v) for v in times.values()], axis=0)
    out: dict[str, Any] = {"queries": len(queries), "pool": pool, "clock": CLOCK.__name__, "stages_ms": {}}
    for stage, values in times.items():
        ms = np.asarray(values) * 1000
        out["stages_ms"][stage] = {
            "mean": round(float(ms.mean()), 4),
            "p50": round(float(np.percentile(ms, 50)), 4),
            "share": round(float(ms.sum() / (total.sum() * 1000)), 4),
        }
    out["total_ms"] = {
        "mean": round(float(total.mean() * 1000), 4),
        "p50": round(float(np.percentile(total, 50) * 1000), 4),
        "p99": round(float(np.percentile(total, 99) * 1000), 4),
    }
    out["candidates"] = {"p50": float(np.percentile(candidates, 50)), "max": int(max(candidates))}
    out["floor"] = scan_floor(state, queries[: min(200, len(queries))], first_k=min(pool, state.table.n_live))
    return out


def scan_floor(state: Any, queries: list[str], first_k: int) -> dict[str, float]:
    """FAISS flat scan of one query over the same vectors, one thread: k=10 and k=pool (query vectors
    computed beforehand, so only the scan is timed)."""
    import faiss

    embedded = state.embedder.embed_queries(state.embedder.featurize_queries(queries))
    vectors = state.index.all_vectors()
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(np.ascontiguousarray(vectors, dtype=np.float32))
    faiss.omp_set_num_threads(1)
    result: dict[str, float] = {}
    for name, kk in (("scan_k10_p50_ms", 10), ("scan_kpool_p50_ms", first_k)):
        spent = []
        for row in range(embedded.shape[0]):
            started = CLOCK()
            flat.search(embedded[row : row + 1], kk)
            spent.append(CLOCK() - started)
        result[name] = round(float(np.percentile(spent, 50) * 1000), 4)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, help="JSONL corpus (or --passages-from)")
    parser.add_argument("--passages-from", type=Path, help="cut this corpus into 60-word passages")
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument(
        "--query-sampler", choices=["distinct", "positions"], default="distinct",
        help="distinct words of a passage (the protocol) or words at random positions, stop words included",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clock", choices=["cpu", "process", "wall"], default="cpu")
    parser.add_argument("--pool", type=int, help="SSI_SCAN_POOL (K of the first flat/IVF pool)")
    parser.add_argument("--index-type", choices=["flat", "ivf", "hnsw"], default="flat")
    parser.add_argument("--ivf-nlist", type=int, default=0, help="SSI_IVF_NLIST (0: from the collection size)")
    parser.add_argument("--nprobe", type=int, default=0, help="SSI_IVF_NPROBE (0: from the lists)")
    parser.add_argument("--rerank", choices=["service", "dense", "pruned", "general"], default="service")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = {"cpu": time.thread_time, "process": time.process_time, "wall": time.perf_counter}[args.clock]

    from service.bench.queries import keyword_queries, passage_corpus
    from service.collection import Collection
    from service.metrics import Metrics
    from service.settings import CollectionSpec, Settings
    from service.threads import limit_blas_threads

    limit_blas_threads()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    corpus = args.corpus
    if corpus is None:
        corpus = args.work_dir / f"passages-{args.passages}.jsonl"
        if not corpus.is_file():
            passage_corpus(args.passages_from, corpus, limit=args.passages)
    queries = keyword_queries(corpus, args.queries, 5, sampler=args.query_sampler)
    pool = {"scan_pool": args.pool} if args.pool else {}
    settings = Settings(
        bundle=args.bundle,
        corpus=corpus,
        cache_dir=args.work_dir / "cache",
        threads=args.threads,
        index_type=args.index_type,
        ivf_nlist=args.ivf_nlist,
        ivf_nprobe=args.nprobe,
        **pool,
    )
    collection = Collection("documents", CollectionSpec(bundle=args.bundle, corpus=corpus), settings, Metrics())
    started = time.perf_counter()
    collection.load()
    load_seconds = time.perf_counter() - started
    try:
        profile(collection, settings, queries[:20], args.k, args.rerank)  # warm-up
        report = profile(collection, settings, queries, args.k, args.rerank)
    finally:
        collection.close()
    report["load_seconds"] = round(load_seconds, 2)
    report["loaded_from"] = collection_source(collection)
    report["load_average"] = list(os.getloadavg())
    report["corpus"] = str(corpus)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")


def collection_source(collection: Any) -> str:
    state = getattr(collection, "state", None)
    return state.report.source if state is not None else "?"


if __name__ == "__main__":
    main()
