"""The every-row scans of a flat index, side by side: BLAS's float32 product, numba's int8 pass, onnxruntime's.

For each batch size, one thread, median wall ms per query of `VectorIndex.every_score`'s kinds of work over
the same rows (service.quantized, service.int8_gemm: the index takes the last for the rows it started with;
with SSI_INT8_GEMM=false, QUANTIZED_QUERIES sets where it switches between the first two), measured in this
process, alternating them. With `--bundle` and `--corpus`, the vectors are a served collection's (built
or read from the cache in `--work-dir`, as `ssi bench` does) and the report adds how many rows the int8
bound leaves to rescore exactly for the bench's random-words queries (`service.rerank.every_row_top`'s
candidates), with what their lexical sum over every row and the top-k pass (service.topk, in blocks and
row by row) cost; without, random normal vectors of the same shape. The report also gives the anonymous PSS
that packing the rows for onnxruntime took (`packed_anon_pss_mb`: what each serving worker holds of its own).

    python -m benchmarks.scan_kinds --bundle B --corpus $W/docs.jsonl.gz --passages 100000 --work-dir D
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # numba compiles, caches fill
    spent = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent) * 1e3


def compare(vectors: np.ndarray, batches: list[int], repeats: int, seed: int = 0) -> tuple[list[dict[str, Any]], float]:
    """ms per query of each scan for each batch size (the queries random normal: the cost does not depend
    on them): BLAS's float32 product, numba's int8 pass, and onnxruntime's integer product in the index's
    pieces (service.int8_gemm, the queries' quantization and the scaling included); and the MB of anonymous
    PSS the pieces' packed copies took (what each serving worker holds of its own; malloc_trim after the
    packing, as a loading worker does)."""
    from service import int8_gemm, quantized
    from service.bench.server import smaps_rollup
    from service.index import SCAN_PIECE_ROWS
    from service.threads import release_free_memory

    codes = quantized.quantize(vectors)
    starts = range(0, vectors.shape[0], SCAN_PIECE_ROWS)
    int8_gemm.PieceProducts(codes.codes[:1])  # onnxruntime's own start-up, not the packing's
    release_free_memory()
    before = smaps_rollup(os.getpid()).get("pss_anon", 0)
    pieces = [(int8_gemm.PieceProducts(codes.codes[a : a + SCAN_PIECE_ROWS]), a) for a in starts]
    release_free_memory()
    packed_mb = (smaps_rollup(os.getpid()).get("pss_anon", 0) - before) / 2**20

    def multiplied(queries: np.ndarray, out: np.ndarray) -> None:
        coded, step = int8_gemm.quantize_queries(queries)
        for piece, a in pieces:
            int8_gemm.scores(piece, codes.scales[a : a + piece.rows], coded, step, out[:, a : a + piece.rows])

    rng = np.random.default_rng(seed)
    rows = []
    for batch in batches:
        queries = rng.standard_normal((batch, vectors.shape[1])).astype(np.float32)
        out = np.empty((batch, vectors.shape[0]), dtype=np.float32)
        blas, int8, gemm = [], [], []
        for _ in range(3):  # alternated, so that a neighbour's burst falls on each
            blas.append(_median_ms(lambda q=queries, o=out: np.matmul(q, vectors.T, out=o), repeats))
            int8.append(_median_ms(lambda q=queries, o=out: quantized.scores(codes, q, o), repeats))
            gemm.append(_median_ms(lambda q=queries, o=out: multiplied(q, o), repeats))
        rows.append(
            {
                "queries": batch,
                "blas_ms_per_query": round(min(blas) / batch, 3),
                "int8_ms_per_query": round(min(int8) / batch, 3),
                "int8_gemm_ms_per_query": round(min(gemm) / batch, 3),
                "without_int8_gemm_the_index_takes": "int8" if batch <= quantized.QUANTIZED_QUERIES else "blas",
            }
        )
    return rows, packed_mb


def _top_ms(every: Any, query: int, summed: Any, live: np.ndarray, k: int, block: int, repeats: int = 5) -> float:
    """Best of `repeats` wall ms of service.topk's pass for one query with blocks of `block` rows (as many as
    there are rows: row by row, the pass before blocks), its data in cache as after the scan."""
    from service import topk
    from service.rerank import TOPK_MARGIN

    factor = 0.0 if every.factor is None else float(every.factor[query])
    args = (every.scores[query], summed.summed, live, k, TOPK_MARGIN, every.radius, factor)
    l1_factor = 0.0 if every.l1_factor is None else float(every.l1_factor[query])
    spent = []
    for _ in range(repeats):
        started = time.perf_counter()
        topk.best(*args, summed.below, summed.above, every.l1, l1_factor, block=block)
        spent.append(time.perf_counter() - started)
    return min(spent) * 1e3


def rescored(
    bundle: Path, corpus: Path, work_dir: Path, n_queries: int, k: int, batch: int
) -> tuple[np.ndarray, dict[str, Any]]:
    """The served collection's vectors, and the rows each query's int8 bound leaves to rescore exactly, the
    queries scanned in batches of `batch` (a lone query takes numba's pass, batches onnxruntime's product
    unless SSI_INT8_GEMM=false: service.index.VectorIndex.every_score), with the median ms a query of their
    lexical sum over every row and of the top-k pass in blocks (service.topk.BLOCK_ROWS) and row by row."""
    from service import topk
    from service.bench.queries import keyword_queries
    from service.collection import Collection
    from service.metrics import Metrics
    from service.rerank import every_row_top
    from service.settings import CollectionSpec, Settings

    settings = Settings(bundle=bundle, corpus=corpus, cache_dir=work_dir / "flat", threads=1)
    collection = Collection("documents", CollectionSpec(bundle=bundle, corpus=corpus), settings, Metrics())
    collection.load()
    try:
        state = collection.ready_state()
        queries = keyword_queries(corpus, n_queries, 5, sampler="positions")
        tfidf = state.embedder.featurize_queries(queries)
        embedded = state.embedder.embed_queries(tfidf)
        counts, lexical_ms, blocked, whole = [], [], [], []
        for first in range(0, len(queries), batch):
            scanned = state.index.every_score(embedded[first : first + batch])
            for at, i in enumerate(range(first, min(first + batch, len(queries)))):
                a, b = tfidf.indptr[i], tfidf.indptr[i + 1]
                if a == b:
                    continue
                started = time.perf_counter()
                summed = state.lexical.query(tfidf.indices[a:b], tfidf.data[a:b]).everywhere_but_common()
                lexical_ms.append((time.perf_counter() - started) * 1e3)
                uq = embedded[i].astype(np.float64)
                ranked = every_row_top(uq, k, scanned, at, summed, state.index.vectors, state.table.live)
                counts.append(ranked.candidates)
                for block, spent in ((topk.BLOCK_ROWS, blocked), (scanned.scores.shape[1], whole)):
                    spent.append(_top_ms(scanned, at, summed, state.table.live, k, block))
        vectors = np.array(state.index.all_vectors())
    finally:
        collection.close()
    found = np.asarray(counts)
    summary = {
        "queries": int(found.shape[0]),
        "k": k,
        "batch": batch,
        "rescored_p50": float(np.percentile(found, 50)),
        "rescored_p90": float(np.percentile(found, 90)),
        "rescored_p99": float(np.percentile(found, 99)),
        "rescored_max": int(found.max()),
        "lexical_sum_ms_per_query": statistics.median(lexical_ms),
        "topk_ms_per_query": statistics.median(blocked),
        "topk_row_by_row_ms_per_query": statistics.median(whole),
    }
    return vectors, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, help="a served model (with --corpus): its collection's vectors")
    parser.add_argument("--corpus", type=Path, help="JSONL corpus (cut into 60-word passages with --passages)")
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/scan-kinds"))
    parser.add_argument("--rows", type=int, default=100_000, help="random vectors' rows (without --bundle)")
    parser.add_argument("--dim", type=int, default=100, help="random vectors' dimension (without --bundle)")
    parser.add_argument("--batches", default="1,2,4,8,16,32")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--rescore-batch", type=int, default=8, help="queries a scan, for the rows rescored")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from service.threads import limit_blas_threads

    limit_blas_threads()
    report: dict[str, Any] = {}
    if args.bundle is not None:
        from service.bench.queries import passage_corpus

        args.work_dir.mkdir(parents=True, exist_ok=True)
        corpus = passage_corpus(args.corpus, args.work_dir / f"passages-{args.passages}.jsonl", limit=args.passages)
        vectors, report["rescored"] = rescored(args.bundle, corpus, args.work_dir, args.queries, 10, args.rescore_batch)
        print(f"rows rescored exactly (k = 10, {report['rescored']['queries']} queries): {report['rescored']}")
    else:
        vectors = np.random.default_rng(1).standard_normal((args.rows, args.dim)).astype(np.float32)
    report["rows"], report["dim"] = vectors.shape
    batches = [int(b) for b in args.batches.split(",")]
    report["scans"], report["packed_anon_pss_mb"] = compare(np.ascontiguousarray(vectors), batches, args.repeats)
    packed = report["packed_anon_pss_mb"]
    print(f"packed copies of {report['rows']} rows of {report['dim']}: {packed:.1f} MB of anonymous PSS")
    for row in report["scans"]:
        print(
            f"{row['queries']:>3} queries: BLAS {row['blas_ms_per_query']:.3f} ms/query, "
            f"int8 {row['int8_ms_per_query']:.3f}, onnxruntime int8 {row['int8_gemm_ms_per_query']:.3f} "
            f"(without it the index takes {row['without_int8_gemm_the_index_takes']})"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
