"""What a running comparison costs the service: `/search` at 32 (and 1) clients with a candidate interleaved on a
share of first pages, against no comparison, on the same server, in alternating blocks; and the workers' memory
with the candidate loaded.

One `ssi serve` (SSI_WORKERS=2, the defaults otherwise) over real passages (Wikispeedia articles cut into 60-word
passages, the `ssi bench` corpus) serves a BM25 start bundle (training.feedback.start, N = 64). The candidate is a
second start bundle (another seed and N = 32): it ranks as BM25 does, so the merged page is the served one's, but
every interleaved answer pays for a second search of the whole index, its hits' titles and snippets, and the merge
(what a trained candidate costs too: its ranking changes which ids are shown, not how much work they take). Queries
are 5 random words of random passages, stop words included (`ssi bench`'s workload). Blocks alternate none,
running, none, running, ... (the comparison is started and ended between blocks with the admin routes; its test is
given a budget it cannot reach, and no clicks arrive, so it stays undecided), so the machine's drift falls on both.

    python -m benchmarks.interleave_cost --passages 100000 --out runs/interleave-cost.json
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from service.bench import wrk
from service.bench.queries import keyword_queries, passage_corpus
from service.bench.server import ServedProcess
from training.feedback.start import write_bm25_start

ADMIN = "interleave-cost-admin"


def _start(client: httpx.Client, candidate: Path, share: float) -> float:
    """Start the comparison; seconds until the answering worker has the candidate loaded."""
    started = time.perf_counter()
    answer = client.post(
        "/admin/interleave", json={"bundle": str(candidate), "share": share, "budget": 10_000_000}, timeout=3600
    )
    answer.raise_for_status()
    return time.perf_counter() - started


def _wait_loaded(server: ServedProcess, client: httpx.Client, timeout: float = 3600) -> None:
    """Until every worker answers interleaved pages (each loads the candidate at its next look at the record)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = _interleaved(client)
        for _ in range(40):  # new connections: either worker
            httpx.post(f"{server.url}/search", json={"query": "the history of", "k": 10}, timeout=60)
        if _interleaved(client) - before >= 40 * 0.25:
            return
        time.sleep(1)
    raise TimeoutError("the workers did not load the candidate")


def _interleaved(client: httpx.Client) -> int:
    status = client.get("/admin/interleave").json()
    return int(status.get("tally", {}).get("impressions", 0))


def main(
    corpus: Annotated[Path, typer.Option(help="Articles (JSONL) cut into passages.")] = Path(
        "../shared/data/wikispeedia/docs.jsonl.gz"
    ),
    passages: Annotated[int, typer.Option(help="60-word passages served.")] = 100_000,
    share: Annotated[float, typer.Option(help="Share of first pages interleaved while the comparison runs.")] = 0.5,
    blocks: Annotated[int, typer.Option(help="Blocks per arm (alternating).")] = 3,
    seconds: Annotated[float, typer.Option(help="Seconds of each block.")] = 15.0,
    clients: Annotated[str, typer.Option(help="wrk connections, comma-separated.")] = "32,1",
    out: Annotated[Path, typer.Option(help="JSON result file.")] = Path("runs/interleave-cost.json"),
) -> None:
    """Print p50, p99 and throughput per arm and client count, their ratios, and the workers' memory."""
    if not wrk.available():
        raise typer.BadParameter("wrk is not installed (scripts/install-wrk.sh)")
    with tempfile.TemporaryDirectory(prefix="ssi-interleave-cost-") as scratch:
        work = Path(scratch)
        texts = passage_corpus(corpus, work / "passages.jsonl", limit=passages)
        bundles = work / "bundles"
        served, candidate = bundles / "served", bundles / "candidate"
        write_bm25_start(texts, served, dims=64, seed=0)
        write_bm25_start(texts, candidate, dims=32, seed=1)
        queries = keyword_queries(texts, 2000, 5, seed=3, sampler="positions")
        bodies = [{"query": q, "k": 10} for q in queries]
        settings = {
            "SSI_WORKERS": "2", "SSI_ADMIN_KEY": ADMIN, "SSI_BUNDLE_ROOT": str(bundles),
            "SSI_DATA_DIR": str(work / "data"), "SSI_CACHE_DIR": str(work / "cache"),
        }  # fmt: skip
        server = ServedProcess(served, texts, work, settings)
        ready = server.start()
        found: dict[str, Any] = {"passages": passages, "share": share, "first_start_seconds": ready["ready_seconds"]}
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {"none": {}, "running": {}}
        memory: dict[str, list[list[dict[str, int]]]] = {"none": [], "running": []}
        loads = []
        try:
            with httpx.Client(base_url=server.url, headers={"X-API-Key": ADMIN}, timeout=60) as client:
                for block in range(blocks):
                    for arm in ("none", "running"):
                        if arm == "running":
                            loads.append(_start(client, candidate, share))
                            _wait_loaded(server, client)
                            time.sleep(5)  # the last worker's build done (its forked featurizers gone)
                        memory[arm].append(server.worker_memory())
                        for c in (int(x) for x in clients.split(",")):
                            result = wrk.run(server.url, bodies, c, seconds, "/search")
                            runs[arm].setdefault(str(c), []).append(result)
                            typer.echo(f"block {block + 1} {arm:>7} {c:>2} clients: {json.dumps(result)}", err=True)
                        if arm == "running":
                            client.delete("/admin/interleave").raise_for_status()
                            time.sleep(2)  # every worker drops the candidate at its next look
        finally:
            server.stop()
    found["candidate_load_seconds"] = [round(s, 2) for s in loads]
    for arm, by_clients in runs.items():
        found[arm] = {
            c: {
                "p50_ms": statistics.median(r["p50_us"] / 1000 for r in results),
                "p99_ms": statistics.median(r["p99_us"] / 1000 for r in results),
                "throughput_qps": statistics.median(r["requests"] / (r["duration_us"] / 1e6) for r in results),
                "errors": sum(r["errors"] for r in results),
            }
            for c, results in by_clients.items()
        }
        found[arm]["worker_pss_mb_per_block"] = [[round(w["pss"] / 2**20, 1) for w in m] for m in memory[arm]]
        found[arm]["workers_pss_mb_median_sum"] = round(
            statistics.median(sum(w["pss"] for w in m) for m in memory[arm]) / 2**20, 1
        )
    found["ratios_running_over_none"] = {
        c: {k: round(found["running"][c][k] / found["none"][c][k], 3) for k in ("p50_ms", "p99_ms", "throughput_qps")}
        for c in runs["none"]
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(found, indent=2))
    typer.echo(json.dumps(found, indent=2))


if __name__ == "__main__":
    typer.run(main)
