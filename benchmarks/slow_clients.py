"""Searches while slow clients trickle (issue 27): p99 with and without them, as a ratio, in one run.

A real server (`python -m service serve` over benchmarks.api_world's generated collection) takes
`--searches` searches one at a time, quiet, then again while `--slow` connections from other loopback
addresses each send a request a byte a second (another process, asyncio: the clients cost the server,
not this process's GIL). Each round alternates the two; the report gives each round's p50/p99 and the
ratio loaded/quiet, and how many slow connections the server cut (SSI_HEADER_TIMEOUT).

    python -m benchmarks.slow_clients --rounds 5 --out bench-results/slow-clients.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import httpx
import numpy as np
import typer

from benchmarks.api_world import Server, write_world

# The slow clients, run as `python -c TRICKLE PORT N SECONDS`: N connections spread over five loopback
# addresses, each sending a request line and then header bytes one a second; prints "connected", then how
# many connections the server closed within SECONDS.
TRICKLE = """
import asyncio, sys
port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
cut = 0

async def trickle(source):
    global cut
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        for byte in b"GET /healthz HTTP/1.1\\r\\nHost: x\\r\\n" + b"a" * 10_000:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(1.0)
    except OSError:  # the server closed it: the next byte found the connection gone
        cut += 1

async def main():
    tasks = [asyncio.create_task(trickle(f"127.0.0.{10 + i % 5}")) for i in range(n)]
    print("connected", flush=True)
    await asyncio.wait(tasks, timeout=seconds)
    print(cut, flush=True)

asyncio.run(main())
"""


def start_trickle(port: int, n: int, seconds: float) -> subprocess.Popen[str]:
    """The slow clients against `port`, started; read "connected" from its stdout, then the count cut."""
    process = subprocess.Popen(
        [sys.executable, "-c", TRICKLE, str(port), str(n), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "connected":
        process.kill()
        raise RuntimeError("the slow clients did not start")
    return process


def search_latencies(url: str, queries: list[str], n: int) -> np.ndarray:
    """Seconds of `n` searches, one at a time over one kept-alive connection; each must answer 200."""
    took = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for i in range(n):
            started = time.perf_counter()
            response = client.post("/search", json={"query": queries[i % len(queries)], "k": 10})
            took.append(time.perf_counter() - started)
            if response.status_code != 200:
                raise RuntimeError(f"search answered {response.status_code}: {response.text[:200]}")
    return np.asarray(took)


def _summary(took: np.ndarray) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(took, 50) * 1e3), "p99_ms": float(np.percentile(took, 99) * 1e3)}


def main(
    rounds: Annotated[int, typer.Option(help="Quiet/loaded pairs.")] = 5,
    searches: Annotated[int, typer.Option(help="Searches per phase.")] = 1000,
    slow: Annotated[int, typer.Option(help="Slow connections.")] = 200,
    header_timeout: Annotated[float, typer.Option(help="SSI_HEADER_TIMEOUT of the server.")] = 10.0,
    out: Annotated[Path | None, typer.Option(help="Write the report (JSON) here.")] = None,
) -> None:
    """p50/p99 of searches quiet and beside slow clients, per round, and their ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        world = write_world(Path(tmp) / "world", n_docs=2000, seed=1)
        env = {"SSI_HEADER_TIMEOUT": str(header_timeout), "SSI_THREADS": "1"}
        with Server(world, env) as server:
            queries = [" ".join(world.words[i : i + 3]) for i in range(0, 300, 3)]
            search_latencies(server.url, queries, 200)  # warm
            report: list[dict[str, object]] = []
            for round_ in range(rounds):
                quiet = search_latencies(server.url, queries, searches)
                trickle = start_trickle(server.port, slow, header_timeout + 4)
                try:
                    loaded = search_latencies(server.url, queries, searches)
                    cut = int(trickle.communicate(timeout=header_timeout + 30)[0].strip())
                finally:
                    trickle.kill()
                row = {"round": round_, "quiet": _summary(quiet), "loaded": _summary(loaded), "slow_cut": cut}
                row["p99_ratio"] = row["loaded"]["p99_ms"] / row["quiet"]["p99_ms"]  # type: ignore[index]
                report.append(row)
                print(json.dumps(row), flush=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"slow": slow, "searches": searches, "rounds": report}, indent=2))


if __name__ == "__main__":
    typer.run(main)
