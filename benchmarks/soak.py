"""A soak at saturation: searches, batches and writes against a real server for minutes, sampled over time.

More clients than cores keep the server saturated for the whole run, mixing single searches, batch
searches and writes (add, replace, delete through the keyed API). Every `--sample` seconds it records
the server's RSS, the disk used by its data and cache folders, and the latency percentiles and status
counts of each kind of request in that window. A healthy service shows flat RSS and disk, stable
percentiles, and no error other than deliberate 429/503 (load shedding).

The server runs with `ssi serve`'s defaults (a worker per core) unless told otherwise; SSI_COMPACT_DEAD_FRACTION
is set low enough (`--compact-dead-fraction`) that the writes trigger online compactions, and halfway through
the run (`--reload-at`) the bundle is reloaded through POST /admin/reload while the load goes on. The server's
log is kept beside the results, and the compactions it logged are counted.

    python -m benchmarks.soak --bundle BUNDLE --corpus CORPUS --minutes 60 --sample 60 --out bench-results/soak

writes OUT/soak.json (every sample and a summary) and OUT/soak.png (RSS and disk, latency over time).
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import numpy as np
import typer

from service.bench.queries import keyword_queries
from service.bench.server import ServedProcess
from service.snapshot import disk_bytes

API_KEY = "soak-test-key-0123456789"
SHED = {429, 503}  # deliberate answers under overload


@dataclass
class Window:
    """What one sampling window saw: latency per request kind and status counts."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: Counter[str] = field(default_factory=Counter)


async def _client(kind: str, url: str, queries: list[str], state: dict[str, Any], deadline: float, seed: int) -> None:
    """One client sending requests of `kind` back to back until the deadline."""
    rng = random.Random(seed)
    op = kind
    headers = {"X-API-Key": API_KEY}
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=headers) as client:
        while time.perf_counter() < deadline:
            if kind == "search":
                request = client.post("/search", json={"query": rng.choice(queries), "k": 10})
            elif kind == "batch":
                request = client.post("/search/batch", json={"queries": rng.sample(queries, 32), "k": 20})
            else:
                doc_id = f"soak-{rng.randrange(2000)}"
                if rng.random() < 0.25:
                    op, request = "delete", client.delete(f"/documents/{doc_id}")
                else:
                    text = " ".join(rng.sample(queries, 3))
                    op, request = "put", client.put(f"/documents/{doc_id}", json={"title": doc_id, "text": text})
            sent = time.perf_counter()
            try:
                response = await request
                status = str(response.status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            window: Window = state["window"]
            window.latencies[kind].append(time.perf_counter() - sent)
            window.statuses[f"{op if kind == 'write' else kind} {status}"] += 1


async def _sampler(server: ServedProcess, folders: list[Path], state: dict[str, Any], deadline: float,
                   every: float, samples: list[dict[str, Any]]) -> None:  # fmt: skip
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        await asyncio.sleep(every)
        window: Window = state["window"]
        state["window"] = Window()
        sample: dict[str, Any] = {
            "t": round(time.perf_counter() - started, 1),
            "rss_mb": round(server.rss_bytes() / 2**20, 1),
            "disk_mb": round(sum(disk_bytes(f) for f in folders) / 2**20, 2),
            "statuses": dict(window.statuses),
        }
        for kind, values in window.latencies.items():
            ms = np.asarray(values) * 1000
            sample[kind] = {
                "n": len(values),
                "p50_ms": round(float(np.percentile(ms, 50)), 1),
                "p99_ms": round(float(np.percentile(ms, 99)), 1),
            }
        samples.append(sample)
        typer.echo(json.dumps(sample), err=True)


async def _reload(url: str, after: float, reloads: list[dict[str, Any]]) -> None:
    """POST /admin/reload of the served bundle `after` seconds into the soak, the load going on meanwhile."""
    await asyncio.sleep(after)
    sent = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=600, headers={"X-API-Key": API_KEY}) as client:
        response = await client.post("/admin/reload", json={})
    took = round(time.perf_counter() - sent, 2)
    reloads.append({"at_s": round(after, 1), "status": response.status_code, "seconds": took,
                    "answer": response.json()})  # fmt: skip
    typer.echo(f"reload: {reloads[-1]}", err=True)


Samples = list[dict[str, Any]]


async def _soak(server: ServedProcess, folders: list[Path], queries: list[str], minutes: float, every: float,
                clients: dict[str, int], reload_at: float) -> tuple[Samples, Samples]:  # fmt: skip
    state: dict[str, Any] = {"window": Window()}
    samples: list[dict[str, Any]] = []
    reloads: list[dict[str, Any]] = []
    deadline = time.perf_counter() + minutes * 60
    tasks = [
        _client(kind, server.url, queries, state, deadline, seed=1000 * i + j)
        for i, (kind, n) in enumerate(clients.items())
        for j in range(n)
    ]
    if 0 < reload_at < 1:
        tasks.append(_reload(server.url, reload_at * minutes * 60, reloads))
    await asyncio.gather(_sampler(server, folders, state, deadline, every, samples), *tasks)
    return samples, reloads


def is_error(key: str) -> bool:
    """Whether "<request> <status>" is a failure: not a success, a deliberate 429/503, or deleting an absent id."""
    op, status = key.split(" ", 1)
    if not status.isdigit():
        return True  # a transport error: the connection broke
    code = int(status)
    return not (200 <= code < 300 or code in SHED or (op == "delete" and code == 404))


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    statuses: Counter[str] = Counter()
    for sample in samples:
        statuses.update(sample["statuses"])
    errors = {key: count for key, count in statuses.items() if is_error(key)}
    return {
        "requests": dict(statuses),
        "errors_other_than_429_503": errors,
        "rss_mb": trend(samples, "rss_mb"),
        "disk_mb": trend(samples, "disk_mb"),
    }


def trend(samples: list[dict[str, Any]], key: str) -> dict[str, float]:
    """First, largest and last value, and the means of the first and second half of the run."""
    values = [float(s[key]) for s in samples]
    half = max(1, len(values) // 2)
    return {
        "first": values[0],
        "max": max(values),
        "last": values[-1],
        "mean_first_half": round(float(np.mean(values[:half])), 2),
        "mean_second_half": round(float(np.mean(values[half:] or values)), 2),
    }


def plot(samples: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t"] / 60 for s in samples]
    fig, (mem, lat) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    mem.plot(t, [s["rss_mb"] for s in samples], label="server RSS (MB)")
    mem.plot(t, [s["disk_mb"] for s in samples], label="data + cache on disk (MB)")
    mem.set_ylim(bottom=0)
    mem.legend()
    mem.set_title("memory and disk over the soak")
    for kind in ("search", "batch", "write"):
        for quantile, style in (("p50_ms", "-"), ("p99_ms", ":")):
            values = [s.get(kind, {}).get(quantile, np.nan) for s in samples]
            lat.plot(t, values, style, label=f"{kind} {quantile[:3]}")
    lat.set_yscale("log")
    lat.set_xlabel("minutes")
    lat.set_ylabel("latency (ms)")
    lat.legend(ncol=3, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(
    bundle: Annotated[Path, typer.Option(help="Model bundle to serve.")],
    corpus: Annotated[Path, typer.Option(help="Corpus JSONL the collection is seeded with.")],
    out: Annotated[Path, typer.Option(help="Folder for soak.json and soak.png.")] = Path("bench-results/soak"),
    minutes: Annotated[float, typer.Option(help="How long to soak.")] = 10.0,
    sample: Annotated[float, typer.Option(help="Seconds per sampling window.")] = 10.0,
    searchers: Annotated[int, typer.Option(help="Clients sending single searches.")] = 6,
    batchers: Annotated[int, typer.Option(help="Clients sending batch searches (32 queries, k=20).")] = 2,
    writers: Annotated[int, typer.Option(help="Clients adding, replacing and deleting documents.")] = 2,
    threads: Annotated[int | None, typer.Option(help="SSI_THREADS of the server (default: ssi serve's).")] = None,
    workers: Annotated[int | None, typer.Option(help="SSI_WORKERS of the server (default: ssi serve's).")] = None,
    compact_dead_fraction: Annotated[
        float, typer.Option(help="SSI_COMPACT_DEAD_FRACTION: low, so that the writes trigger compactions.")
    ] = 0.05,
    reload_at: Annotated[
        float, typer.Option(help="When to reload the bundle, as a fraction of the run (0: never).")
    ] = 0.5,
) -> None:
    """Soak a real server at saturation and record RSS, disk and latency over time."""
    out.mkdir(parents=True, exist_ok=True)
    queries = keyword_queries(corpus, 500, 5)
    with tempfile.TemporaryDirectory(prefix="ssi-soak-") as work:
        work_dir = Path(work)
        settings = {"SSI_API_KEY": API_KEY, "SSI_CACHE_DIR": str(work_dir / "cache"),
                    "SSI_DATA_DIR": str(work_dir / "data"), "SSI_LOG_LEVEL": "info",
                    "SSI_COMPACT_DEAD_FRACTION": str(compact_dead_fraction)}  # fmt: skip
        settings.update({name: str(value) for name, value in (("SSI_THREADS", threads), ("SSI_WORKERS", workers))
                         if value is not None})  # fmt: skip
        server = ServedProcess(bundle, corpus, work_dir, settings)
        ready = server.start()
        typer.echo(f"server ready in {ready['ready_seconds']:.1f}s", err=True)
        try:
            clients = {"search": searchers, "batch": batchers, "write": writers}
            samples, reloads = asyncio.run(_soak(server, [work_dir / "cache", work_dir / "data"], queries, minutes,
                                                 sample, clients, reload_at))  # fmt: skip
        finally:
            server.stop()
            log = server.log_path.read_text(encoding="utf-8", errors="replace")
            (out / "server.log").write_text(log, encoding="utf-8")
    started = next((line for line in log.splitlines() if "worker process" in line), "")
    result = {"minutes": minutes, "clients": clients, "server": started.split(" INFO ")[-1], "bundle": str(bundle),
              "corpus": str(corpus), "reloads": reloads, "compactions": log.count("compacted online"),
              "summary": summarize(samples), "samples": samples}  # fmt: skip
    (out / "soak.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    plot(samples, out / "soak.png")
    typer.echo(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    typer.run(main)
