"""Approximate indexes at a million documents: recall@10 against the exact scan, p50 per knob, build time, memory.

The vectors are what the service would index for a generated corpus: short documents of
Zipf-distributed words of a trained bundle's vocabulary (service.bench.queries.generate_corpus:
6–24 words, word id = frequency rank), featurized by the bundle's text pipeline and embedded by its
form (V d for SSI). Queries are 5 random words of random generated documents, embedded by the
form's query map (A q, what the ONNX encoder computes). The truth is FAISS's flat scan (exact
inner products); recall@10 is the share of the exact top 10 semantic rows each index returns in
its top 10, one query per call, one thread, as a lone request runs. (The service then adds the
lexical candidates and reranks exactly; `ssi bench` reports recall of that end result.)

Memory: each index's serialized size (what it holds in RAM, less allocator slack), against the
float32 floor M·N·4 bytes; the service also keeps the embeddings themselves for the exact rerank.

    python -m benchmarks.ann_scale --bundle B --documents 1000000 --out ann.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np


def embed_corpus(bundle: Any, path: Path, batch: int = 50_000) -> tuple[np.ndarray, list[str]]:
    from ssi.corpus import iter_corpus

    texts: list[str] = []
    parts: list[np.ndarray] = []
    sample: list[str] = []
    for doc in iter_corpus(path):
        texts.append(doc.full_text)
        if len(texts) == batch:
            parts.append(bundle.form.embed_documents_of(bundle.vocab.featurize(texts)).astype(np.float32))
            sample.extend(texts[:: batch // 100])
            texts = []
    if texts:
        parts.append(bundle.form.embed_documents_of(bundle.vocab.featurize(texts)).astype(np.float32))
        sample.extend(texts[:: max(1, len(texts) // 100)])
    return np.ascontiguousarray(np.vstack(parts)), sample


def query_vectors(bundle: Any, texts: list[str], n: int, words: int = 5, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    queries = []
    for _ in range(n):
        tokens = texts[int(rng.integers(len(texts)))].split()
        queries.append(" ".join(rng.choice(tokens, size=min(words, len(tokens)), replace=False)))
    tfidf = bundle.vocab.featurize(queries)
    A = np.asarray(bundle.form.query_map(), dtype=np.float32)
    return np.ascontiguousarray((tfidf @ A.T).astype(np.float32))


def timed_search(index: Any, queries: np.ndarray, k: int, params: Any) -> tuple[np.ndarray, list[float]]:
    rows = np.empty((queries.shape[0], k), dtype=np.int64)
    spent = []
    for i in range(queries.shape[0]):
        started = time.perf_counter()
        _, found = index.search(queries[i : i + 1], k, params=params)
        spent.append(time.perf_counter() - started)
        rows[i] = found[0]
    return rows, spent


def recall(found: np.ndarray, truth: np.ndarray, vectors: np.ndarray, queries: np.ndarray) -> float:
    """Share of the exact top k found, a row tied with the exact k-th score counting as found (short
    generated documents repeat, so several rows have the same vector)."""
    shares = []
    for q, got, exact in zip(queries, found, truth, strict=True):
        kth = float(vectors[exact[-1]] @ q)
        scores = vectors[got[got >= 0]] @ q
        shares.append(min(1.0, float((scores >= kth - 1e-5 * (1 + abs(kth))).sum()) / exact.shape[0]))
    return float(np.mean(shares))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/ssi-ann"))
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--nprobe", default="1,4,8,16,32,64,128")
    parser.add_argument("--hnsw-documents", type=int, default=0, help="also HNSW over the first N vectors")
    parser.add_argument("--ef-search", default="32,64,128,256")
    parser.add_argument("--threads", type=int, default=2, help="build threads")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from service.bench.queries import generate_corpus
    from service.index import IndexConfig, VectorIndex, auto_nlist
    from ssi.bundle import load_bundle

    bundle = load_bundle(args.bundle)
    corpus = args.work_dir / f"generated-{args.documents}.jsonl"
    if not corpus.is_file():
        generate_corpus(corpus, bundle.vocab, args.documents)
    started = time.perf_counter()
    vectors, sample = embed_corpus(bundle, corpus)
    embed_seconds = time.perf_counter() - started
    queries = query_vectors(bundle, sample, args.queries)
    n, dim = vectors.shape
    floor_bytes = n * dim * 4
    report: dict[str, Any] = {
        "documents": n,
        "M": dim,
        "vectors": "V d of generated Zipf documents (service.bench.queries.generate_corpus) of the bundle's vocabulary",
        "bundle": str(args.bundle),
        "queries": int(queries.shape[0]),
        "k": args.k,
        "float32_floor_mb": round(floor_bytes / 2**20, 1),
        "featurize_and_embed_seconds": round(embed_seconds, 1),
        "load_average_at_start": list(os.getloadavg()),
    }
    ids = np.arange(n, dtype=np.int64)
    faiss.omp_set_num_threads(1)
    flat = faiss.IndexFlatIP(dim)
    flat.add(vectors)
    truth, flat_spent = timed_search(flat, queries, args.k, faiss.SearchParameters())
    report["flat"] = {"p50_ms": round(float(np.percentile(flat_spent, 50) * 1000), 3)}
    print(json.dumps(report["flat"]), flush=True)
    del flat

    config = IndexConfig(index_type="ivf", threads=args.threads)
    started = time.perf_counter()
    ivf = VectorIndex.build(config, dim, vectors, ids)
    report["ivf"] = {
        "nlist": auto_nlist(n),
        "build_seconds": round(time.perf_counter() - started, 1),
        "index_mb": round(ivf.serialize().nbytes / 2**20, 1),
    }
    report["ivf"]["index_over_floor"] = round(report["ivf"]["index_mb"] / report["float32_floor_mb"], 3)
    report["ivf"]["knobs"] = {}
    faiss.omp_set_num_threads(1)
    for nprobe in [int(v) for v in args.nprobe.split(",")]:
        params = faiss.SearchParametersIVF()
        params.nprobe = nprobe
        found, spent = timed_search(ivf._index, queries, args.k, params)
        report["ivf"]["knobs"][f"nprobe={nprobe}"] = {
            f"recall@{args.k}": round(recall(found, truth, vectors, queries), 4),
            "p50_ms": round(float(np.percentile(spent, 50) * 1000), 3),
            "p99_ms": round(float(np.percentile(spent, 99) * 1000), 3),
        }
        print(nprobe, json.dumps(report["ivf"]["knobs"][f"nprobe={nprobe}"]), flush=True)
    del ivf

    if args.hnsw_documents:
        m = min(args.hnsw_documents, n)
        sub_truth_index = faiss.IndexFlatIP(dim)
        sub_truth_index.add(vectors[:m])
        sub_truth, _ = timed_search(sub_truth_index, queries, args.k, faiss.SearchParameters())
        config = IndexConfig(index_type="hnsw", threads=args.threads)
        started = time.perf_counter()
        hnsw = VectorIndex.build(config, dim, vectors[:m], ids[:m])
        report["hnsw"] = {
            "documents": m,
            "build_seconds": round(time.perf_counter() - started, 1),
            "index_mb": round(hnsw.serialize().nbytes / 2**20, 1),
            "float32_floor_mb": round(m * dim * 4 / 2**20, 1),
            "knobs": {},
        }
        faiss.omp_set_num_threads(1)
        for ef in [int(v) for v in args.ef_search.split(",")]:
            # the service's reduction of inner products to L2 (service.index): search through its wrapper
            spent = []
            found = np.empty((queries.shape[0], args.k), dtype=np.int64)
            for i in range(queries.shape[0]):
                t0 = time.perf_counter()
                _, rows = hnsw.search(queries[i : i + 1], args.k, ef_search=ef)
                spent.append(time.perf_counter() - t0)
                found[i] = rows[0]
            report["hnsw"]["knobs"][f"ef_search={ef}"] = {
                f"recall@{args.k}": round(recall(found, sub_truth, vectors, queries), 4),
                "p50_ms": round(float(np.percentile(spent, 50) * 1000), 3),
            }
            print(ef, json.dumps(report["hnsw"]["knobs"][f"ef_search={ef}"]), flush=True)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
