"""What replicated shards cost: searches at 32 clients and a write's latency with 1, 2 and 3 copies, one run.

    python -m benchmarks.replication_cost --out runs/replication-cost.json

The world of benchmarks.replication_faults (a generated corpus, a random bundle, --shards shards) on one local Ray
cluster of three labelled worker nodes. For each layout, in turn on the same cluster: 1 copy (the plain
deployment: one Serve deployment per shard), then 2 and 3 copies (cluster.replication); each is measured with
`--clients` connections searching for `--seconds` (service.bench.load.run_load: wrk where installed) and `--writes`
PUTs sent one after another (a write's latency: the primary's commit, the backups', the coordinator's confirmation).
Ratios are against 1 copy in the same run. On a 2-core machine the three nodes share the two cores: the figures
say what replication adds on one machine, not how it scales.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.replication_faults import build_world, wait_in_sync, write_figures
from service.bench.load import run_load
from service.bench.server import free_port, wait_ready


def write_latencies(url: str, texts: list[str], writes: int, layout: int) -> list[float]:
    took: list[float] = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for i in range(writes):
            body = {"title": f"cost {i}", "text": texts[i % len(texts)]}
            started = time.perf_counter()
            response = client.put(f"/documents/cost-{layout}-{i}", json=body)
            took.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
    return took


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ray import serve

    from cluster import deploy
    from cluster.local import LocalCluster
    from service.settings import Settings

    work = Path(args.work)
    queries, texts = build_world(work, args.docs, args.shards)
    bodies = [{"query": q, "k": 10} for q in queries]
    layouts: dict[str, Any] = {}
    local = LocalCluster(workers=3, cpus_per_node=1, object_store_mb=128)
    try:
        local.connect()
        for copies in (1, 2, 3):
            port = free_port()
            options = deploy.ClusterOptions(
                shard_cpus=0, replicas=copies, node_dir=work / f"nodes-{copies}", router_on_head=True
            )
            deploy.start(work / "index", Settings(host="127.0.0.1", port=port, insecure_writes=True), options)
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, timeout=180)
            if copies > 1:
                wait_in_sync(copies)
            load = run_load(url, bodies, args.clients, args.seconds).as_dict()
            took = write_latencies(url, texts, args.writes, copies)
            layouts[str(copies)] = {
                "search": load,
                "write_p50_ms": round(statistics.median(took), 2),
                "write_p90_ms": round(statistics.quantiles(took, n=10)[-1], 2),
            }
            print(copies, layouts[str(copies)], flush=True)
            deploy.stop()
            serve.shutdown()
    finally:
        local.shutdown()
    one = layouts["1"]
    return {
        "documents": args.docs,
        "shards": args.shards,
        "clients": args.clients,
        "cores": os.cpu_count(),
        "layouts": layouts,
        "search_qps_ratio_to_1_copy": {
            n: round(v["search"]["throughput_qps"] / one["search"]["throughput_qps"], 3) for n, v in layouts.items()
        },
        "write_p50_ratio_to_1_copy": {n: round(v["write_p50_ms"] / one["write_p50_ms"], 3) for n, v in layouts.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--work", default="/tmp/ssi-replication-cost")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    write_figures(run(args), args.out)


if __name__ == "__main__":
    main()
