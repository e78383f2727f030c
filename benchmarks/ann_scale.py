"""Approximate indexes at a million documents: recall@10 against the exact ranking, p50 per knob, build time, memory.

Two corpora, each of `--documents` rows, featurized by a bundle's text pipeline and embedded by its
form (V d for SSI); queries are 5 random words of random documents, embedded as the ONNX encoder
does (`form.embed_queries`):

- `generated`: short documents of Zipf-distributed vocabulary words (service.bench.queries.
  generate_corpus). No topical structure at all, the hard case for every partition or graph.
- `passages`: real text (Wikispeedia articles) cut into windows of `--words` words. About 14 M words
  make only ~240k disjoint 60-word passages, so a million needs overlapping windows: the stride is
  chosen so the windows number about `--documents` (14 words at 1 M, consecutive windows share 46
  words). Overlap makes near-duplicate neighbours, which is easier than a million distinct passages.

Two truths, one thread per query, as a lone request runs:

- semantic: the share of the exact inner-product top 10 (FAISS flat scan) that the index returns in
  its own top 10 (ties with the exact 10th score count as found: generated documents repeat).
- service: the share of the service's exact top 10 under f = s + l (service.rerank.exact_top, with
  the lexical term of service.lexical over the documents' tf-idf) that the same path returns when its
  semantic candidates come from the approximate index, with the service's pools (K = 64 for HNSW,
  1,024 for IVF and flat). The service adds the rows sharing query words and reranks exactly, so a
  missed semantic neighbour often comes back through its words.

Indexes (all FAISS): `ivf:NLIST` (IVFFlat over inner products, flat coarse quantizer, the service's
type), `ivfhnsw:NLIST` (IVFFlat whose coarse quantizer is an HNSW over the centroids), `hnsw-ip:M`
(HNSWFlat on raw inner products) and `hnsw-l2:M` (the service's HNSW: the MIPS→L2 reduction of
service.index). Memory: the serialized size and the RSS growth of the build, as ratios to the float32
floor M·N·4 bytes.

    python -m benchmarks.ann_scale --bundle B --corpus generated --documents 1000000 --out ann.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import scipy.sparse as sp

from service.settings import Settings

# The service's pools, read from its settings so the "service" columns follow its defaults.
HNSW_POOL: int = Settings.model_fields["candidate_pool"].default  # K of HNSW searches
SCAN_POOL: int = Settings.model_fields["scan_pool"].default  # K of flat and IVF searches


def window_starts(n_words: int, width: int, stride: int) -> list[int]:
    """Starts of windows of `width` words every `stride` words that cover a text of `n_words` words,
    the last one ending at the text's end (a text shorter than `width` is one window)."""
    if n_words <= width:
        return [0] if n_words else []
    starts = list(range(0, n_words - width + 1, stride))
    if starts[-1] + width < n_words:
        starts.append(n_words - width)
    return starts


def window_stride(total_words: int, n_texts: int, width: int, wanted: int) -> int:
    """The stride that makes about `wanted` windows over `n_texts` texts of `total_words` words in all
    (at least 1; `width` when disjoint windows already give that many)."""
    if wanted <= 0:
        return width
    return max(1, min(width, math.floor(max(total_words - n_texts * width, 0) / wanted) or 1))


def window_passages(source: Path, path: Path, wanted: int, width: int = 60) -> tuple[Path, int]:
    """About `wanted` passages of `width` words (overlapping when needed) of `source`, as JSONL at `path`."""
    from ssi.corpus import iter_corpus

    texts = [(doc.id, doc.title, doc.text.split()) for doc in iter_corpus(source)]
    stride = window_stride(sum(len(words) for _, _, words in texts), len(texts), width, wanted)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with path.open("w", encoding="utf-8") as handle:
        for doc_id, title, words in texts:
            for n, start in enumerate(window_starts(len(words), width, stride)):
                if written >= wanted:
                    return path, stride
                text = " ".join(words[start : start + width])
                handle.write(json.dumps({"id": f"{doc_id}#{n}", "title": title, "text": text}) + "\n")
                written += 1
    return path, stride


@dataclass(frozen=True, slots=True)
class Collection:
    """Document embeddings and tf-idf rows, and the queries' embeddings and tf-idf rows."""

    vectors: np.ndarray
    doc_tfidf: sp.csr_matrix
    queries: np.ndarray
    query_tfidf: sp.csr_matrix


def _batches(path: Path, batch: int) -> Iterator[list[str]]:
    from ssi.corpus import iter_corpus

    texts: list[str] = []
    for doc in iter_corpus(path):
        texts.append(doc.full_text)
        if len(texts) == batch:
            yield texts
            texts = []
    if texts:
        yield texts


def embed_collection(bundle: Any, corpus: Path, n_queries: int, words: int = 5, seed: int = 0) -> Collection:
    rng = np.random.default_rng(seed)
    parts: list[np.ndarray] = []
    tfidf: list[sp.csr_matrix] = []
    sample: list[str] = []
    for texts in _batches(corpus, 50_000):
        X = bundle.vocab.featurize_documents(texts)
        tfidf.append(X)
        parts.append(np.asarray(bundle.form.embed_documents_of(X), dtype=np.float32))
        sample.extend(texts[:: max(1, len(texts) // 200)])
    queries = []
    for _ in range(n_queries):
        tokens = sorted(set(sample[int(rng.integers(len(sample)))].split()))
        queries.append(" ".join(rng.choice(tokens, size=min(words, len(tokens)), replace=False)))
    Q = bundle.vocab.featurize_queries(queries)
    return Collection(
        vectors=np.ascontiguousarray(np.vstack(parts)),
        doc_tfidf=sp.vstack(tfidf, format="csr"),
        queries=np.ascontiguousarray(bundle.form.embed_queries(Q), dtype=np.float32),
        query_tfidf=Q,
    )


def cached_collection(cache: Path, make: Callable[[], Collection]) -> Collection:
    """The collection saved under `cache` (a folder), computed and saved there on first use."""
    names = ("vectors.npy", "doc_tfidf.npz", "queries.npy", "query_tfidf.npz")
    if all((cache / name).is_file() for name in names):
        return Collection(
            vectors=np.load(cache / names[0]),
            doc_tfidf=sp.load_npz(cache / names[1]).tocsr(),
            queries=np.load(cache / names[2]),
            query_tfidf=sp.load_npz(cache / names[3]).tocsr(),
        )
    made = make()
    cache.mkdir(parents=True, exist_ok=True)
    np.save(cache / names[0], made.vectors)
    sp.save_npz(cache / names[1], made.doc_tfidf)
    np.save(cache / names[2], made.queries)
    sp.save_npz(cache / names[3], made.query_tfidf)
    return made


def recall(found: np.ndarray, truth: np.ndarray, vectors: np.ndarray, queries: np.ndarray) -> float:
    """Share of the exact top k found, a row tied with the exact k-th score counting as found (short
    generated documents repeat, so several rows have the same vector)."""
    shares = []
    for q, got, exact in zip(queries, found, truth, strict=True):
        kth = float(vectors[exact[-1]] @ q)
        scores = vectors[got[got >= 0]] @ q
        shares.append(min(1.0, float((scores >= kth - 1e-5 * (1 + abs(kth))).sum()) / exact.shape[0]))
    return float(np.mean(shares))


def overlap(
    found: Sequence[np.ndarray],
    truth: Sequence[np.ndarray],
    found_scores: Sequence[np.ndarray],
    truth_scores: Sequence[np.ndarray],
) -> float:
    """Share of each exact top k (rows with their exact f) that a result holds, a row scoring at least
    the exact k-th score counting as found (ties)."""
    shares = []
    for got, got_scores, exact, exact_scores in zip(found, found_scores, truth, truth_scores, strict=True):
        if exact.shape[0] == 0:
            continue
        kth = float(exact_scores[-1])
        hits = len(set(got.tolist()) & set(exact.tolist()))
        tied = int((got_scores >= kth - 1e-5 * (1 + abs(kth))).sum())
        shares.append(min(1.0, max(hits, tied) / exact.shape[0]))
    return float(np.mean(shares)) if shares else 1.0


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class Built:
    name: str
    search: Callable[[np.ndarray, int, int], tuple[np.ndarray, np.ndarray]]  # (query, k, knob) → scores, rows
    knob: str
    scan: bool  # the service's `scan` flag of exact_top (flat, IVF) and its pool
    index: Any


def build(spec: str, vectors: np.ndarray, threads: int, ef_construction: int) -> Built:
    """One index of `spec` ("ivf:NLIST", "ivfhnsw:NLIST", "hnsw-ip:M", "hnsw-l2:M") over `vectors`."""
    from service.index import IndexConfig, VectorIndex

    kind, value = spec.split(":")
    number = int(value)
    n, dim = vectors.shape
    faiss.omp_set_num_threads(threads)
    if kind in ("hnsw-l2", "hnsw-ip"):  # the service's own HNSW (service.index), with either metric
        config = IndexConfig(
            index_type="hnsw",
            hnsw_m=number,
            hnsw_ef_construction=ef_construction,
            hnsw_metric=kind.removeprefix("hnsw-"),
            threads=threads,
        )
        wrapped = VectorIndex.build(config, dim, vectors)

        def search_hnsw(q: np.ndarray, k: int, ef: int) -> tuple[np.ndarray, np.ndarray]:
            return wrapped.search(q, k, ef_search=max(k, ef))

        return Built(spec, search_hnsw, "efSearch", False, wrapped._index)
    if kind in ("ivf", "ivfhnsw"):
        if kind == "ivf":
            quantizer = faiss.IndexFlatIP(dim)
        else:
            quantizer = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
            quantizer.hnsw.efConstruction = 200
        index = faiss.IndexIVFFlat(quantizer, dim, number, faiss.METRIC_INNER_PRODUCT)
        # as service.index: k-means on at most 256 points per list
        rng = np.random.default_rng(0)
        sample = vectors
        if n > 256 * number:
            sample = vectors[np.sort(rng.choice(n, 256 * number, replace=False))]
        if kind == "ivfhnsw":
            # k-means with exact assignments (the same spherical k-means IndexIVF runs for inner
            # products), whose centroids then go into the HNSW quantizer
            index.clustering_index = faiss.IndexFlatIP(dim)
        index.train(np.ascontiguousarray(sample))
        index.add(vectors)

        def search_ivf(q: np.ndarray, k: int, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
            params = faiss.SearchParametersIVF()
            params.nprobe = min(nprobe, number)
            if kind == "ivfhnsw":  # the centroid HNSW must look at least nprobe deep to return nprobe lists
                inner = faiss.SearchParametersHNSW()
                inner.efSearch = max(2 * params.nprobe, 64)
                params.quantizer_params = inner
            return index.search(q, k, params=params)

        return Built(spec, search_ivf, "nprobe", True, index)
    raise ValueError(f"unknown index {spec!r}")


def service_ranking(
    collection: Collection,
    lexical: Any,
    weights_nonnegative: bool,
    i: int,
    search: Callable[[int], tuple[np.ndarray, np.ndarray]],
    pool: int,
    scan: bool,
    k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The service's top k rows and exact f for query i (service.rerank.exact_top, every row live)."""
    from service.rerank import exact_top

    Q = collection.query_tfidf
    words = Q.indices[Q.indptr[i] : Q.indptr[i + 1]]
    values = Q.data[Q.indptr[i] : Q.indptr[i + 1]]
    n = collection.vectors.shape[0]
    ranked = exact_top(
        collection.queries[i],
        k,
        search,
        lexical.query(words, values),
        collection.vectors.__getitem__,
        np.ones(n, dtype=bool),
        n,
        pool,
        scan=scan,
    )
    return ranked.rows, ranked.scores


def percentile_ms(spent: Sequence[float], q: float) -> float:
    return round(float(np.percentile(spent, q) * 1000), 3)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from service.lexical import LexicalIndex
    from ssi.bundle import load_bundle

    bundle = load_bundle(args.bundle)
    cache = args.cache_dir / f"{args.corpus}-{args.documents}"
    stride = None

    def make() -> Collection:
        nonlocal stride
        if args.corpus == "generated":
            from service.bench.queries import generate_corpus

            corpus = generate_corpus(cache / "corpus.jsonl", bundle.vocab, args.documents)
        else:
            corpus, stride = window_passages(args.source, cache / "corpus.jsonl", args.documents, args.words)
        return embed_collection(bundle, corpus, args.queries)

    started = time.perf_counter()
    collection = cached_collection(cache, make)
    made = cache / "stride.json"  # the passages' stride, kept beside the cached embeddings
    if stride is not None:
        made.write_text(json.dumps(stride), encoding="utf-8")
    elif made.is_file():
        stride = json.loads(made.read_text(encoding="utf-8"))
    vectors, queries = collection.vectors, collection.queries
    n, dim = vectors.shape
    floor = n * dim * 4
    k = args.k
    report: dict[str, Any] = {
        "corpus": args.corpus,
        "documents": n,
        "M": dim,
        "bundle": str(args.bundle),
        "queries": int(queries.shape[0]),
        "k": k,
        "float32_floor_mb": round(floor / 2**20, 1),
        "stride": stride,
        "words": args.words,
        "prepare_seconds": round(time.perf_counter() - started, 1),
        "load_average_at_start": list(os.getloadavg()),
        "indexes": {},
    }
    print(json.dumps(report), flush=True)
    lexical = LexicalIndex(bundle.form.lexical_weights(), collection.doc_tfidf)
    flat = faiss.IndexFlatIP(dim)
    flat.add(vectors)
    faiss.omp_set_num_threads(1)

    def flat_search(i: int, flat: Any = flat) -> Callable[[int], tuple[np.ndarray, np.ndarray]]:
        def search(K: int) -> tuple[np.ndarray, np.ndarray]:
            scores, rows = flat.search(queries[i : i + 1], K)
            return scores[0], rows[0]

        return search

    truth = np.empty((queries.shape[0], k), dtype=np.int64)
    exact_rows, exact_scores, flat_spent, exact_spent = [], [], [], []
    for i in range(queries.shape[0]):
        t0 = time.perf_counter()
        _, rows = flat.search(queries[i : i + 1], k)
        flat_spent.append(time.perf_counter() - t0)
        truth[i] = rows[0]
        t0 = time.perf_counter()
        rows, scores = service_ranking(collection, lexical, True, i, flat_search(i), SCAN_POOL, True, k)
        exact_spent.append(time.perf_counter() - t0)
        exact_rows.append(rows)
        exact_scores.append(scores)
    report["flat"] = {"p50_ms": percentile_ms(flat_spent, 50), "service_path_p50_ms": percentile_ms(exact_spent, 50)}
    print("flat", json.dumps(report["flat"]), flush=True)
    flat.reset()

    for spec in args.indexes.split(","):
        rss0 = rss_bytes()
        t0 = time.perf_counter()
        built = build(spec, vectors, args.threads, args.ef_construction)
        seconds = time.perf_counter() - t0
        size = int(faiss.serialize_index(built.index).nbytes)
        entry: dict[str, Any] = {
            "build_seconds": round(seconds, 1),
            "ef_construction": args.ef_construction if spec.startswith("hnsw") else None,
            "serialized_mb": round(size / 2**20, 1),
            "serialized_over_floor": round(size / floor, 3),
            "rss_growth_over_floor": round((rss_bytes() - rss0) / floor, 3),
            "knobs": {},
        }
        print(spec, json.dumps(entry), flush=True)
        faiss.omp_set_num_threads(1)
        knobs = args.ef_search if built.knob == "efSearch" else args.nprobe
        pool = SCAN_POOL if built.scan else HNSW_POOL
        for knob in [int(v) for v in knobs.split(",")]:
            found = np.empty((queries.shape[0], k), dtype=np.int64)
            spent, service_spent, service_rows, service_scores = [], [], [], []
            for i in range(queries.shape[0]):
                t1 = time.perf_counter()
                _, rows = built.search(queries[i : i + 1], k, knob)
                spent.append(time.perf_counter() - t1)
                found[i] = rows[0]

                def search(K: int, i: int = i, built: Built = built, knob: int = knob) -> tuple[np.ndarray, np.ndarray]:
                    scores, rows = built.search(queries[i : i + 1], K, knob)
                    return scores[0], rows[0]

                t1 = time.perf_counter()
                rows, scores = service_ranking(collection, lexical, True, i, search, pool, built.scan, k)
                service_spent.append(time.perf_counter() - t1)
                service_rows.append(rows)
                service_scores.append(scores)
            entry["knobs"][f"{built.knob}={knob}"] = {
                f"semantic_recall@{k}": round(recall(found, truth, vectors, queries), 4),
                "p50_ms": percentile_ms(spent, 50),
                "p99_ms": percentile_ms(spent, 99),
                f"service_recall@{k}": round(overlap(service_rows, exact_rows, service_scores, exact_scores), 4),
                "service_path_p50_ms": percentile_ms(service_spent, 50),
            }
            print(spec, knob, json.dumps(entry["knobs"][f"{built.knob}={knob}"]), flush=True)
        report["indexes"][spec] = entry
        del built
        if args.out:
            write(args.out, report)
    return report


def write(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--corpus", choices=("generated", "passages"), default="generated")
    parser.add_argument("--source", type=Path, default=Path("data/wikispeedia/docs.jsonl.gz"), help="passages' text")
    parser.add_argument("--words", type=int, default=60, help="words per passage")
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/ssi-ann"), help="corpus and embeddings, reused")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--indexes", default="ivf:1000,hnsw-ip:32,hnsw-l2:32")
    parser.add_argument("--nprobe", default="8,16,32,64,128")
    parser.add_argument("--ef-search", default="64,128,256,512")
    parser.add_argument("--ef-construction", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2, help="build threads")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report = run(args)
    print(json.dumps(report, indent=2))
    if args.out:
        write(args.out, report)


if __name__ == "__main__":
    main()
