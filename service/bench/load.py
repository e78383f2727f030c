"""HTTP load: `clients` concurrent connections send queries back to back for a fixed time.

wrk drives them where it is installed (service.bench.wrk: the Python client costs more CPU than
the server on 2 cores); otherwise one asyncio loop of httpx clients does (threads would cost the
machine more still). Each request's latency is measured from send to full response; the result
names the generator that measured it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import numpy as np

from service.bench import wrk


@dataclass
class LoadResult:
    clients: int
    requests: int
    errors: int
    seconds: float
    throughput_qps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    generator: str = "httpx"

    def as_dict(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def summarize(latencies: list[float], clients: int, errors: int, seconds: float) -> LoadResult:
    ms = np.asarray(latencies, dtype=np.float64) * 1000 if latencies else np.zeros(1)
    return LoadResult(
        clients=clients,
        requests=len(latencies),
        errors=errors,
        seconds=seconds,
        throughput_qps=len(latencies) / seconds if seconds > 0 else 0.0,
        p50_ms=float(np.percentile(ms, 50)),
        p90_ms=float(np.percentile(ms, 90)),
        p99_ms=float(np.percentile(ms, 99)),
        mean_ms=float(ms.mean()),
    )


async def _drive(
    url: str, bodies: list[dict[str, Any]], clients: int, seconds: float, warmup: int, path: str = "/search"
) -> LoadResult:
    latencies: list[float] = []
    errors = 0
    source = itertools.cycle(bodies or [None])

    def send(client: httpx.AsyncClient, body: dict[str, Any] | None) -> Any:
        return client.post(path, json=body) if body is not None else client.get(path)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        for body in itertools.islice(source, warmup):
            await send(client, body)
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                body = next(source)
                sent = time.perf_counter()
                response = await send(client, body)
                if response.status_code == 200:
                    latencies.append(time.perf_counter() - sent)
                else:
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return summarize(latencies, clients, errors, elapsed)


def run_load(
    url: str,
    bodies: list[dict[str, Any]],
    clients: int,
    seconds: float,
    warmup: int = 20,
    path: str = "/search",
    generator: str = "auto",
) -> LoadResult:
    """`clients` connections sending POST `path` (`bodies` in turn), or GET `path` when there are no bodies.

    `generator`: "wrk", "httpx", or "auto" (wrk where installed).
    """
    if generator == "wrk" or (generator == "auto" and wrk.available()):
        asyncio.run(_drive(url, bodies, 1, 0.0, warmup, path))  # the same warm-up requests, unmeasured
        found = wrk.run(url, bodies, clients, seconds, path)
        seconds_run = found["duration_us"] / 1e6
        return LoadResult(
            clients=clients,
            requests=found["requests"] - found["errors"],
            errors=found["errors"],
            seconds=seconds_run,
            throughput_qps=(found["requests"] - found["errors"]) / seconds_run if seconds_run > 0 else 0.0,
            p50_ms=found["p50_us"] / 1000,
            p90_ms=found["p90_us"] / 1000,
            p99_ms=found["p99_us"] / 1000,
            mean_ms=found["mean_us"] / 1000,
            generator="wrk",
        )
    return asyncio.run(_drive(url, bodies, clients, seconds, warmup, path))


def http_floor(url: str, seconds: float = 2.0) -> LoadResult:
    """Latency of GET /healthz from one client: what HTTP, the framework and this client cost alone."""
    latencies: list[float] = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(20):
            client.get("/healthz")
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            client.get("/healthz")
            latencies.append(time.perf_counter() - sent)
    return summarize(latencies, 1, 0, float(sum(latencies)))


def ranked_hits(url: str, bodies: list[dict[str, Any]]) -> tuple[list[list[tuple[str, float]]], list[float]]:
    """Each query's (id, score) hits, one request at a time, with each request's latency in seconds."""
    hits: list[list[tuple[str, float]]] = []
    latencies: list[float] = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for body in bodies:
            sent = time.perf_counter()
            response = client.post("/search", json=body)
            latencies.append(time.perf_counter() - sent)
            response.raise_for_status()
            hits.append([(hit["id"], hit["score"]) for hit in response.json()["hits"]])
    return hits, latencies
