"""One benchmark run: BM25 yardstick, then the service with each index type, all on the same queries.

For the exact (flat) index: time to first ready (documents stored, V d computed, index built),
restart time from the cache, process memory, and latency/throughput over HTTP at each client count.
For HNSW and IVF: the same, plus recall@k against the flat index's ranking at each knob setting
(which, by the exactness argument in service.rerank, is the brute-force ranking).
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from service.bench.bm25 import bm25_yardstick
from service.bench.floors import scan_floor
from service.bench.load import http_floor, ranked_hits, run_load, summarize
from service.bench.queries import QuerySampler, generate_corpus, keyword_queries, passage_corpus
from service.bench.ratio import ratio
from service.bench.recall import recall
from service.bench.server import ServedProcess
from service.cores import serve_sizes, usable_cores
from ssi.bundle import load_bundle


@dataclass
class BenchConfig:
    bundle: Path
    corpus: Path | None
    work_dir: Path
    out: Path
    generate: int = 0
    passages: int = 0  # serve the corpus cut into 60-word passages, at most this many
    n_queries: int = 500
    query_words: int = 5
    query_sampler: QuerySampler = "distinct"  # or "positions": stop words included (service.bench.queries)
    k: int = 10
    clients: list[int] = field(default_factory=lambda: [1, 8, 32])
    seconds: float = 10.0
    index_types: list[str] = field(default_factory=lambda: ["flat", "hnsw", "ivf"])
    ef_search: list[int] = field(default_factory=lambda: [64, 128, 256, 512])
    nprobe: list[int] = field(default_factory=lambda: [1, 4, 16, 64, 256])
    threads: int | None = None  # SSI_THREADS of the served process (None: as `ssi serve` chooses)
    workers: int | None = None  # SSI_WORKERS of the served process (None: as `ssi serve` chooses)
    measure_restart: bool = True
    extra_settings: dict[str, str] = field(default_factory=dict)


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _serve_and_measure(
    config: BenchConfig, corpus: Path, index_type: str, bodies: list[dict[str, Any]], log: Any
) -> tuple[dict[str, Any], ServedProcess]:
    cache = config.work_dir / index_type
    settings = {
        "SSI_CACHE_DIR": str(cache),
        "SSI_INDEX_TYPE": index_type,
        "SSI_THREADS": str(config.threads),
        "SSI_WORKERS": str(config.workers),
        # The default admission limits (SSI_MAX_CONCURRENCY), with room to queue every client.
        "SSI_MAX_QUEUE": str(max(64, 2 * max(config.clients))),
        "SSI_QUEUE_TIMEOUT": "60",
        **config.extra_settings,
    }
    server = ServedProcess(config.bundle, corpus, config.work_dir, settings)
    log(f"[{index_type}] starting (first start: store, embed, build)")
    info = server.start()
    result: dict[str, Any] = {
        "first_start_seconds": round(info["ready_seconds"], 3),
        "build_seconds": info["load_seconds"],  # in-process: V d for every document + the FAISS index
        "documents": info["documents"],
        "rss_mb_ready": round(server.rss_bytes() / 2**20, 1),
        "index_cache_mb": round(_folder_bytes(cache / "index") / 2**20, 1),
        "nlist": info.get("nlist"),
    }
    log(f"[{index_type}] ready in {result['first_start_seconds']}s; {result['rss_mb_ready']} MB")
    result["http_floor"] = http_floor(server.url).as_dict()
    log(f"[{index_type}] GET /healthz p50 {result['http_floor']['p50_ms']:.2f} ms (HTTP and framework alone)")
    result["healthz_load"] = {}
    for clients in config.clients:
        cpu = server.cpu_seconds()
        floor = run_load(server.url, [], clients, min(config.seconds, 3.0), path="/healthz")
        result["healthz_load"][str(clients)] = floor.as_dict()
        result["healthz_load"][str(clients)]["server_cpu_ms_per_request"] = round(
            (server.cpu_seconds() - cpu) * 1000 / max(1, floor.requests), 3
        )
        log(f"[{index_type}] GET /healthz, {clients:>3} clients: {floor.throughput_qps:.1f} q/s, "
            f"p99 {floor.p99_ms:.2f} ms")  # fmt: skip
    result["load"] = {}
    for clients in config.clients:
        cpu = server.cpu_seconds()
        measured = run_load(server.url, bodies, clients, config.seconds)
        result["load"][str(clients)] = measured.as_dict()
        cpu_ms = (server.cpu_seconds() - cpu) * 1000 / max(1, measured.requests)
        result["load"][str(clients)]["server_cpu_ms_per_request"] = round(cpu_ms, 3)
        log(f"[{index_type}] {clients:>3} clients: p50 {measured.p50_ms:.2f} ms, p99 {measured.p99_ms:.2f} ms, "
            f"{measured.throughput_qps:.1f} q/s, {measured.errors} errors, "
            f"server CPU {cpu_ms:.2f} ms/request")  # fmt: skip
    result["rss_mb_after_load"] = round(server.rss_bytes() / 2**20, 1)
    result["worker_memory_mb_after_load"] = [
        {name: round(value / 2**20, 1) for name, value in worker.items()} for worker in server.worker_memory()
    ]
    for number, worker in enumerate(result["worker_memory_mb_after_load"]):
        log(f"[{index_type}] worker {number}: PSS {worker.get('pss')} MB (anonymous {worker.get('pss_anon')}, "
            f"files {worker.get('pss_file')}), RSS {worker.get('rss')} MB")  # fmt: skip
    return result, server


def in_process(config: BenchConfig, corpus: Path, queries: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The flat collection searched in this process (from the cache the server left), without HTTP:
    the same work per query as the server does, to separate the ranking's cost from HTTP's; and the
    FAISS scan floor over the same vectors (service.bench.floors)."""
    from service.collection import Collection
    from service.metrics import Metrics
    from service.routes.search import to_result
    from service.settings import CollectionSpec, Settings
    from service.threads import limit_blas_threads

    limit_blas_threads()
    settings = Settings(bundle=config.bundle, corpus=corpus, cache_dir=config.work_dir / "flat", threads=config.threads)
    collection = Collection("documents", CollectionSpec(bundle=config.bundle, corpus=corpus), settings, Metrics())
    collection.load()
    try:
        for query in queries[:20]:
            collection.search([query], config.k, 0)
        latencies = []
        for query in queries:
            sent = time.perf_counter()
            (result,) = collection.search([query], config.k, 0)
            to_result(collection, settings, result, query)
            latencies.append(time.perf_counter() - sent)
        state = collection.ready_state()
        embedded = state.embedder.embed_queries(state.embedder.featurize_queries(queries), queries)
        # The scan on as many threads as the service may use: SSI_THREADS in each of SSI_WORKERS processes.
        floor = scan_floor(
            state.index.all_vectors(), embedded, config.k, config.threads * config.workers, min(config.seconds, 3.0)
        )
    finally:
        collection.close()
    return summarize(latencies, 1, 0, float(sum(latencies))).as_dict(), floor


def machine_setup(threads: int | None, workers: int | None) -> dict[str, Any]:
    """What a benchmark report records of the served process's sizes and of this machine, at the start."""
    return {
        "service_threads": threads,
        "service_workers": workers,
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": list(os.getloadavg()),
    }


def run_bench(config: BenchConfig, log: Any = print) -> dict[str, Any]:
    # What `ssi serve` would choose on this machine where not given, so that the floors use as many threads.
    config.workers, config.threads = serve_sizes(usable_cores().usable, config.workers, config.threads)
    config.work_dir.mkdir(parents=True, exist_ok=True)
    bundle = load_bundle(config.bundle)
    corpus = config.corpus
    if corpus is not None and config.passages:
        source, corpus = corpus, config.work_dir / f"passages-{config.passages}.jsonl"
        if not corpus.is_file():
            log(f"cutting {source} into 60-word passages (at most {config.passages}) into {corpus}")
            passage_corpus(source, corpus, limit=config.passages)
    if corpus is None:
        corpus = config.work_dir / f"generated-{config.generate}.jsonl"
        if not corpus.is_file():
            log(f"generating {config.generate} documents into {corpus}")
            generate_corpus(corpus, bundle.vocab, config.generate)
    queries = keyword_queries(corpus, config.n_queries, config.query_words, sampler=config.query_sampler)
    bodies = [{"query": q, "k": config.k} for q in queries]
    report: dict[str, Any] = {
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "setup": {
            "corpus": str(corpus),
            "bundle": str(config.bundle),
            "model_form": bundle.manifest.form,
            "N": bundle.manifest.n_dims,
            "M": bundle.manifest.index_dims,
            "D": bundle.manifest.vocab_size,
            "queries": len(queries),
            "query_words": config.query_words,
            "query_sampler": config.query_sampler,
            "k": config.k,
            "clients": config.clients,
            "seconds_per_level": config.seconds,
            **machine_setup(config.threads, config.workers),
        },
    }
    log(f"BM25 yardstick over {corpus}")
    report["bm25"] = bm25_yardstick(corpus, queries, config.k)
    report["setup"]["documents"] = report["bm25"]["documents"]

    exact: list[list[tuple[str, float]]] | None = None
    for index_type in config.index_types:
        result, server = _serve_and_measure(config, corpus, index_type, bodies, log)
        try:
            if index_type == "flat":
                exact, _ = ranked_hits(server.url, bodies)
            elif exact is not None:
                knob = "ef_search" if index_type == "hnsw" else "nprobe"
                values = config.ef_search if index_type == "hnsw" else config.nprobe
                if index_type == "ivf" and result.get("nlist"):
                    values = [v for v in values if v <= result["nlist"]] or [result["nlist"]]
                result["recall"] = {}
                for value in values:
                    knob_bodies = [{**b, knob: value} for b in bodies]
                    found, latencies = ranked_hits(server.url, knob_bodies)
                    single = summarize(latencies, 1, 0, float(sum(latencies)))
                    # The same queries under load from one client (wrk where installed): the latency to
                    # set beside the served setting's, without the Python client's own cost.
                    loaded = run_load(server.url, knob_bodies, 1, min(config.seconds, 3.0))
                    result["recall"][f"{knob}={value}"] = {
                        f"recall@{config.k}": round(recall(found, exact), 4),
                        "p50_ms": round(single.p50_ms, 3),
                        "p99_ms": round(single.p99_ms, 3),
                        "load_1_client_p50_ms": round(loaded.p50_ms, 3),
                        "load_1_client_p99_ms": round(loaded.p99_ms, 3),
                    }
                    log(f"[{index_type}] {knob}={value}: recall@{config.k} {recall(found, exact):.4f}, "
                        f"p50 {single.p50_ms:.2f} ms one request at a time, {loaded.p50_ms:.2f} ms under "
                        f"load from 1 client")  # fmt: skip
        finally:
            server.stop()
        if index_type == "flat" and config.measure_restart:
            again = ServedProcess(
                config.bundle, corpus, config.work_dir, {"SSI_CACHE_DIR": str(config.work_dir / index_type)}
            )
            started = time.perf_counter()
            info = again.start()
            result["restart_seconds"] = round(time.perf_counter() - started, 3)
            result["restart_load_seconds"] = info["load_seconds"]
            result["restart_loaded_from"] = info["loaded_from"]
            result["restart_rss_mb"] = round(again.rss_bytes() / 2**20, 1)
            again.stop()
        if index_type == "flat":
            result["in_process"], report["scan_floor"] = in_process(config, corpus, queries)
            log(f"[flat] in-process (no HTTP): p50 {result['in_process']['p50_ms']:.2f} ms")
            floor = report["scan_floor"]
            log(f"[flat] FAISS scan floor: p50 {floor['p50_ms']:.2f} ms (1 thread), "
                f"{floor['throughput_qps']:.1f} q/s ({floor['threads']} threads)")  # fmt: skip
        report[index_type] = result

    bm25_single = report["bm25"]["single_query"]
    ratios: dict[str, Any] = {}
    for index_type in config.index_types:
        one = report[index_type]["load"].get("1")
        if one:
            ratios[f"{index_type}_p50_over_bm25_p50"] = ratio(one["p50_ms"], bm25_single["p50_ms"])
        best = max(level["throughput_qps"] for level in report[index_type]["load"].values())
        ratios[f"{index_type}_best_qps_over_bm25_single_qps"] = ratio(best, bm25_single["throughput_qps"])
    if "flat" in report and "in_process" in report["flat"]:
        direct = report["flat"]["in_process"]
        ratios["flat_in_process_p50_over_bm25_p50"] = ratio(direct["p50_ms"], bm25_single["p50_ms"])
    if "scan_floor" in report and "flat" in report:
        floor = report["scan_floor"]
        for clients, level in report["flat"]["load"].items():
            healthz = report["flat"]["healthz_load"].get(clients, {})
            ratios[f"flat_{clients}c_p50_over_scan_p50"] = ratio(level["p50_ms"], floor["p50_ms"])
            ratios[f"flat_{clients}c_qps_over_scan_qps"] = ratio(level["throughput_qps"], floor["throughput_qps"])
            if healthz:
                qps = healthz["throughput_qps"]
                ratios[f"flat_{clients}c_qps_over_healthz_qps"] = ratio(level["throughput_qps"], qps)
    report["ratios"] = ratios
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    log(f"wrote {config.out}")
    return report
