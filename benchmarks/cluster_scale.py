"""Sharded index build and search on a local Ray cluster against the single-node service, in one run.

    python -m benchmarks.cluster_scale --docs 200000 --shards 1,2,4 --out runs/cluster-scale.json

One generated corpus (short Zipf documents, service.bench.queries.generate_corpus) and one bundle (a
trained one with --bundle, else a random lowrank bundle of --dims × --vocab: build and query costs
depend on N, D and the documents' lengths, not on the values learned). Then, in the same run:

- the single node: `python -m service serve` from scratch (store import + embedding + index, until
  /readyz), its query throughput and latency over HTTP (service.bench.load.run_load), its RSS;
- for each shard count S: `ssi index --ray` on a local Ray cluster (a head and --workers worker nodes
  on loopback, one CPU each), the sharded service on Ray Serve, the same load, each shard replica's
  RSS, and whether its top 10 equals the single node's for --check queries.

Every figure is also given as a ratio to the single node. On a machine with fewer cores than nodes
the Ray figures measure overhead, not scaling: read them with the core count printed at the top.

`--open-vocab` serves both with SSI_OPEN_VOCAB=1 (a BM25 bundle) and `--statistics` with that
SSI_OPEN_VOCAB_STATISTICS: with `collection` every query takes the router's second round trip (each
shard's document frequencies of the query's words, summed), the cost it measures against `bundle`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from service.bench.load import ranked_hits, run_load
from service.bench.queries import generate_corpus, keyword_queries
from service.bench.server import ServedProcess, free_port, wait_ready
from ssi.bundle import load_bundle


def random_bundle(path: Path, dims: int, vocab_words: int, seed: int = 0, bm25: bool = False) -> Path:
    """A lowrank bundle with random U, V over `vocab_words` generated words (costs as a trained one's); `bm25`:
    weighed the BM25 way (the open vocabulary's bundles), else tf-idf."""
    from ssi.bundle import write_bundle
    from ssi.forms import form_class
    from ssi.vocab import Vocabulary
    from ssi.weighting import Bm25
    from training.encoder import build_encoder

    rng = np.random.default_rng(seed)
    letters = np.asarray(list("bdfgklmnprstvz"))
    vowels = np.asarray(list("aeiou"))
    words = sorted(
        {"".join(rng.choice(letters, 3)) + "".join(rng.choice(vowels, 2)) + str(i) for i in range(vocab_words)}
    )
    vocab = Vocabulary.build(
        [" ".join(words[i : i + 50]) for i in range(0, len(words), 50)],
        max_words=vocab_words,
        min_df=1,
        bm25=Bm25() if bm25 else None,
    )
    cls = form_class("lowrank")
    arrays = {
        name: (rng.standard_normal(shape) * 0.1).astype(np.float32)
        for name, shape in cls.shapes(dims, vocab.size).items()
    }
    model = cls(arrays)
    write_bundle(path, form=model, vocab=vocab, encoder_onnx=build_encoder(model.query_map()))
    return path


def agreement(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> float:
    """Share of queries whose top-k ids are the same, in the same order (ties aside, both are exact)."""
    same = sum(1 for x, y in zip(a, b, strict=True) if [i for i, _ in x] == [i for i, _ in y])
    return same / max(1, len(a))


def uss_mb(pid: int) -> float:
    """Memory only this process holds (a Ray worker's RSS also counts pages of the shared object store)."""
    return round(psutil.Process(pid).memory_full_info().uss / 2**20, 1)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def single_node(bundle: Path, corpus: Path, work: Path, bodies: list[dict], args: argparse.Namespace) -> dict[str, Any]:
    threads = str(args.single_threads)
    shutil.rmtree(work / "single", ignore_errors=True)  # a start from scratch, not from an earlier run's cache
    env = {"SSI_CACHE_DIR": str(work / "single"), "SSI_THREADS": threads}
    if args.open_vocab:
        env |= {"SSI_OPEN_VOCAB": "1", "SSI_OPEN_VOCAB_STATISTICS": args.statistics}
    served = ServedProcess(bundle, corpus, work, env)
    try:
        ready = served.start()
        idle_uss = uss_mb(served.process.pid)  # type: ignore[union-attr]
        load = run_load(served.url, bodies, args.clients, args.seconds).as_dict()
        hits, _ = ranked_hits(served.url, bodies[: args.check])
        return {
            "build_seconds": round(ready["ready_seconds"], 2),
            "build_docs_per_s": round(args.docs / ready["ready_seconds"], 1),
            "load": load,
            "rss_mb": round(served.rss_bytes() / 2**20, 1),
            "uss_mb": uss_mb(served.process.pid),  # type: ignore[union-attr]
            "idle_uss_mb": idle_uss,
            "disk_mb": round(folder_bytes(work / "single") / 2**20, 1),
            "hits": hits,
        }
    finally:
        served.stop()


def sharded(
    shards: int, bundle: Path, corpus: Path, work: Path, bodies: list[dict], address: str, args: argparse.Namespace
) -> dict[str, Any]:
    from cluster.deploy import ClusterOptions, start, stop
    from cluster.index_job import build_index
    from service.settings import Settings

    index = work / f"index-{shards}"
    shutil.rmtree(index, ignore_errors=True)
    started = time.perf_counter()
    manifest = build_index(
        corpus,
        bundle,
        index,
        shards,
        ray_address=address,
        batch_size=args.batch_size,
        open_vocab=args.open_vocab,
        statistics=args.statistics,
    )
    build = time.perf_counter() - started
    # Serve's proxy keeps the port it started on
    settings = Settings(
        host="127.0.0.1", port=args.port, open_vocab=args.open_vocab, open_vocab_statistics=args.statistics
    )
    url = f"http://127.0.0.1:{settings.port}"
    serve_started = time.perf_counter()
    start(index, settings, ClusterOptions(shard_cpus=0, threads=1), address=address)
    wait_ready(url, timeout=24 * 3600)
    serve_seconds = time.perf_counter() - serve_started
    described = httpx.get(f"{url}/cluster", timeout=120).json()["shards"]
    try:
        idle_uss = [uss_mb(s["pid"]) for s in described]
        load = run_load(url, bodies, args.clients, args.seconds).as_dict()
        hits, _ = ranked_hits(url, bodies[: args.check])
        rss = [round(psutil.Process(s["pid"]).memory_info().rss / 2**20, 1) for s in described]
        uss = [uss_mb(s["pid"]) for s in described]
    finally:
        stop()
    return {
        "shards": shards,
        "build_seconds": round(build, 2),
        "embed_seconds": manifest.embed_seconds,
        "build_docs_per_s": round(args.docs / build, 1),
        "serve_ready_seconds": round(serve_seconds, 2),
        "documents_per_shard": [e.documents for e in manifest.entries],
        "load": load,
        "shard_rss_mb": rss,
        "shard_uss_mb": uss,
        "shard_idle_uss_mb": idle_uss,
        "shard_disk_mb": [round(folder_bytes(index / e.folder) / 2**20, 1) for e in manifest.entries],
        "hits": hits,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=200_000, help="generated documents (the issue asks ≥ 1M)")
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--bundle", type=Path, default=None, help="a trained bundle (default: a random lowrank one)")
    parser.add_argument("--dims", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=20_000)
    parser.add_argument(
        "--single-threads", type=int, default=os.cpu_count() or 1, help="SSI_THREADS of the single node (its default)"
    )
    parser.add_argument("--workers", type=int, default=1, help="worker nodes beside the head (one CPU each)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--check", type=int, default=50, help="queries whose top 10 is compared with the single node's")
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--open-vocab", action="store_true", help="SSI_OPEN_VOCAB=1 (the bundle weighs BM25)")
    parser.add_argument(
        "--statistics", choices=("bundle", "collection"), default="bundle", help="SSI_OPEN_VOCAB_STATISTICS"
    )
    parser.add_argument("--work", type=Path, default=Path("runs/cluster-scale"))
    parser.add_argument("--out", type=Path, default=Path("runs/cluster-scale.json"))
    args = parser.parse_args()
    args.port = free_port()

    from cluster.local import LocalCluster

    args.work.mkdir(parents=True, exist_ok=True)
    name = "bundle-bm25" if args.open_vocab else "bundle"
    bundle = args.bundle or random_bundle(args.work / name, args.dims, args.vocab, bm25=args.open_vocab)
    corpus = args.work / f"corpus-{args.docs}.jsonl"
    if not corpus.exists():
        generate_corpus(corpus, load_bundle(bundle).vocab, args.docs)
    queries = keyword_queries(corpus, 200, 5)
    bodies = [{"query": q, "k": 10} for q in queries]
    report: dict[str, Any] = {
        "docs": args.docs,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg": os.getloadavg()},
        "settings": {k: str(v) for k, v in vars(args).items()},
    }
    print(f"{args.docs} documents, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    single = single_node(bundle, corpus, args.work, bodies, args)
    print(f"single node: {json.dumps({k: v for k, v in single.items() if k != 'hits'})}", flush=True)
    local = LocalCluster(workers=args.workers, cpus_per_node=1, object_store_mb=1024)
    runs = []
    try:
        local.connect()
        for shards in [int(s) for s in args.shards.split(",")]:
            run = sharded(shards, bundle, corpus, args.work, bodies, local.address, args)
            run["top10_equal_single_node"] = agreement(run.pop("hits"), single["hits"])
            run["ratios"] = {
                "build_throughput": round(run["build_docs_per_s"] / single["build_docs_per_s"], 3),
                "query_throughput": round(run["load"]["throughput_qps"] / single["load"]["throughput_qps"], 3),
                "p50_latency": round(run["load"]["p50_ms"] / single["load"]["p50_ms"], 3),
                "memory_per_shard": round(max(run["shard_rss_mb"]) / single["rss_mb"], 3),
                "unique_memory_per_shard": round(max(run["shard_uss_mb"]) / single["uss_mb"], 3),
            }
            print(f"{shards} shards: {json.dumps(run)}", flush=True)
            runs.append(run)
    finally:
        local.shutdown()
    single.pop("hits")
    report |= {"single_node": single, "sharded": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(
        f"\n| setup | build s | build docs/s | × single | q/s ({args.clients} clients) | × single | p50 ms | ", end=""
    )
    print("RSS per shard MB | top 10 = single |\n|---|---|---|---|---|---|---|---|---|")
    s = single
    print(f"| single node | {s['build_seconds']} | {s['build_docs_per_s']} | 1.00 | ", end="")
    print(f"{s['load']['throughput_qps']:.1f} | 1.00 | {s['load']['p50_ms']:.1f} | {s['rss_mb']} | — |")
    for r in runs:
        ratios, load = r["ratios"], r["load"]
        print(f"| {r['shards']} shards | {r['build_seconds']} | {r['build_docs_per_s']} | ", end="")
        print(f"{ratios['build_throughput']:.2f} | {load['throughput_qps']:.1f} | ", end="")
        print(f"{ratios['query_throughput']:.2f} | {load['p50_ms']:.1f} | ", end="")
        print(f"{', '.join(map(str, r['shard_rss_mb']))} | {r['top10_equal_single_node']:.2f} |")


if __name__ == "__main__":
    main()
