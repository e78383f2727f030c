"""What recording the traffic log costs a search: `/search` at one client with SSI_EVENTS on against off.

Two `ssi serve` processes over the same bundle and corpus (each its own cache; SSI_EVENTS=true in one, false in
the other) answer the same queries, 5 random words of random passages (stop words included: the `ssi bench`
workload), one client, in alternating blocks (on, off, on, off, ...) so that the machine's drift and its
neighbours fall on both alike. Reported: each arm's p50 and p99 over all its requests, the median of the
per-block differences of p50 with a bootstrap 95 % interval, each server's CPU time per request over its blocks
(what it did, whatever its neighbours did), and, in process, what `Traffic.show` itself costs (the recording's
only work on the request path: an id and a queue append).

Then `--paired` more queries, each sent to both servers one right after the other (which one first alternates):
a block's p50 moves with whatever the machine's neighbours did during that block, a request pair's two
latencies share their moment. Reported: the median of the per-query differences with a bootstrap 95 % interval.

Which server starts first moves the result (an A/A run differs by −0.02 ms; on − off moved by 0.09 ms between the
two start orders): `--crossover` measures both orders, each with two new servers, and reports the mean of the two
orders' paired medians, with a bootstrap interval that resamples each order's pairs on its own. `--same-process`
leaves the two processes out: one server holds two collections over the same bundle and corpus, the default one
recording and `other` not (its own `"events": false` in SSI_COLLECTIONS), and the arms are `/search` and
`/collections/other/search`; with `--crossover`, the second run swaps which of the two records (the server's CPU
time is then shared by both arms, and counted per block).

    python -m benchmarks.traffic_cost --bundle BUNDLE --corpus ../shared/data/wikispeedia/docs.jsonl.gz \
        --passages 100000 --blocks 12 --block-queries 300
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from service.bench.queries import keyword_queries, passage_corpus
from service.bench.server import ServedProcess
from service.events.traffic import Traffic
from service.settings import Settings


def _block(client: httpx.Client, queries: list[str], path: str = "/search") -> list[float]:
    """Milliseconds of each request of one block, one after another."""
    times = []
    for query in queries:
        started = time.perf_counter()
        response = client.post(path, json={"query": query, "k": 10})
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    return times


def _timed(client: httpx.Client, query: str, path: str) -> float:
    started = time.perf_counter()
    response = client.post(path, json={"query": query, "k": 10})
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return elapsed


def _paired(clients: dict[str, httpx.Client], paths: dict[str, str], queries: list[str]) -> list[float]:
    """Milliseconds on minus off for each query, sent to both arms back to back (alternating who goes first)."""
    diffs = []
    for i, query in enumerate(queries):
        order = ["on", "off"] if i % 2 == 0 else ["off", "on"]
        got = {arm: _timed(clients[arm], query, paths[arm]) for arm in order}
        diffs.append(got["on"] - got["off"])
    return diffs


def _median_ci(values: list[float], seed: int = 1, rounds: int = 2000) -> tuple[float, float, float]:
    """The median and its bootstrap 95 % interval."""
    boot = random.Random(seed)
    medians = sorted(statistics.median(boot.choices(values, k=len(values))) for _ in range(rounds))
    return statistics.median(values), medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def _show_cost(work: Path, calls: int) -> float:
    """Microseconds per `Traffic.show` of a 10-hit answer (the writer thread commits meanwhile, as in service)."""
    traffic = Traffic(Settings(cache_dir=work / "show", events=True))
    hits = [f"doc-{i}" for i in range(10)]
    try:
        traffic.show("documents", "model", "search", "warm up", hits, str)
        started = time.perf_counter()
        for i in range(calls):
            traffic.show("documents", "model", "search", f"query {i % 500}", hits, str)
        return (time.perf_counter() - started) / calls * 1e6
    finally:
        traffic.close()


def _crossover_ci(
    first: list[float], second: list[float], seed: int = 1, rounds: int = 2000
) -> tuple[float, float, float]:
    """The mean of the two orders' medians, and its bootstrap 95 % interval (each order resampled on its own)."""
    boot = random.Random(seed)
    means = sorted(
        (statistics.median(boot.choices(first, k=len(first))) + statistics.median(boot.choices(second, k=len(second))))
        / 2
        for _ in range(rounds)
    )
    return (
        (statistics.median(first) + statistics.median(second)) / 2,
        means[int(0.025 * rounds)],
        means[int(0.975 * rounds) - 1],
    )


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Setup:
    """What one measurement serves and sends."""

    bundle: Path
    served: Path
    queries: list[str]
    blocks: int
    block_queries: int
    paired: int
    seed: int
    control: bool


def measure(setup: Setup, work: Path, off_first: bool) -> tuple[dict[str, Any], list[float]]:
    """One measurement with two new servers, started in the order given: (its result, the paired differences)."""
    arms = {"on": "false" if setup.control else "true", "off": "false"}
    if off_first:  # which server starts first (and gets which cores' caches) shows in an A/A run: swap it
        arms = {"off": arms["off"], "on": arms["on"]}
    servers = {
        arm: ServedProcess(
            setup.bundle, setup.served, work, {"SSI_CACHE_DIR": str(work / arm), "SSI_EVENTS": flag, "SSI_WORKERS": "1"}
        )
        for arm, flag in arms.items()
    }
    return _measure(setup, servers, dict.fromkeys(arms, "/search"))


def measure_same_process(setup: Setup, work: Path, swap: bool) -> tuple[dict[str, Any], list[float]]:
    """One server, two collections over the same bundle and corpus, one recording and one not (`--same-process`):
    the default collection records and `other` does not, or with `swap` the other way round."""
    record_default, record_other = (not swap, swap) if not setup.control else (False, False)
    other = {"other": {"bundle": str(setup.bundle), "corpus": str(setup.served), "events": record_other}}
    server = ServedProcess(
        setup.bundle,
        setup.served,
        work,
        {
            "SSI_CACHE_DIR": str(work / "both"), "SSI_EVENTS": "true" if record_default else "false",
            "SSI_WORKERS": "1", "SSI_COLLECTIONS": json.dumps(other),
        },
    )  # fmt: skip
    paths = {"on": "/search", "off": "/collections/other/search"}
    if swap:
        paths = {"on": paths["off"], "off": paths["on"]}
    return _measure(setup, {"on": server, "off": server}, paths)


def _measure(
    setup: Setup, servers: dict[str, ServedProcess], paths: dict[str, str]
) -> tuple[dict[str, Any], list[float]]:
    arms = list(servers)  # in the order they start
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    block_p50: dict[str, list[float]] = {arm: [] for arm in arms}
    cpu: dict[str, float] = dict.fromkeys(arms, 0.0)  # server CPU seconds over the measured blocks
    queries = setup.queries
    distinct = list({id(s): s for s in servers.values()}.values())
    try:
        for server in distinct:
            server.start()
        clients = {arm: httpx.Client(base_url=s.url, timeout=60) for arm, s in servers.items()}
        for arm, client in clients.items():  # warm both: first requests compile and fill caches
            _block(client, queries[:100], paths[arm])
        rng = random.Random(setup.seed)
        for b in range(setup.blocks):
            order = ["on", "off"] if b % 2 == 0 else ["off", "on"]
            sample = rng.sample(queries, setup.block_queries)
            for arm in order:
                before = servers[arm].cpu_seconds()
                found = _block(clients[arm], sample, paths[arm])
                cpu[arm] += servers[arm].cpu_seconds() - before
                times[arm] += found
                block_p50[arm].append(statistics.median(found))
        pair_diffs = _paired(clients, paths, rng.sample(queries, setup.paired)) if setup.paired else []
        for client in clients.values():
            client.close()
    finally:
        for server in distinct:
            server.stop()
    diffs = [a - b for a, b in zip(block_p50["on"], block_p50["off"], strict=True)]
    block_median, block_low, block_high = _median_ci(diffs)
    result: dict[str, Any] = {
        "started_first": "one process" if len(distinct) == 1 else next(iter(arms)),
        "recording": paths["on"],
        "p50_ms": {arm: round(statistics.median(v), 3) for arm, v in times.items()},
        "p99_ms": {arm: round(_percentile(v, 0.99), 3) for arm, v in times.items()},
        "p50_difference_ms": round(block_median, 3),
        "p50_difference_ci95_ms": [round(block_low, 3), round(block_high, 3)],
        "ratio_p50_on_off": round(statistics.median(times["on"]) / statistics.median(times["off"]), 4),
        # CPU per request counts what the server did, not what its neighbours did meanwhile.
        "server_cpu_ms_per_request": {arm: round(cpu[arm] / len(times[arm]) * 1000, 3) for arm in arms},
    }
    if pair_diffs:
        pair_median, pair_low, pair_high = _median_ci(pair_diffs)
        result["paired"] = {
            "queries": setup.paired,
            "median_difference_ms": round(pair_median, 3),
            "median_difference_ci95_ms": [round(pair_low, 3), round(pair_high, 3)],
        }
    return result, pair_diffs


def report(result: dict[str, Any], setup: Setup) -> None:
    first = result["started_first"]
    where = (
        f"both arms in one server, {result['recording']} recording"
        if first == "one process"
        else f"{first} started first"
    )
    typer.echo(
        f"/search, 1 client, {setup.blocks} blocks × {setup.block_queries} per arm, {where}: "
        f"p50 on {result['p50_ms']['on']} ms, off {result['p50_ms']['off']} ms "
        f"(ratio {result['ratio_p50_on_off']}); median block difference {result['p50_difference_ms']:+.3f} ms, "
        f"95 % interval [{result['p50_difference_ci95_ms'][0]:+.3f}, {result['p50_difference_ci95_ms'][1]:+.3f}]; "
        f"p99 on {result['p99_ms']['on']} ms, off {result['p99_ms']['off']} ms; server CPU per request on "
        f"{result['server_cpu_ms_per_request']['on']} ms, off {result['server_cpu_ms_per_request']['off']} ms"
    )
    if "paired" in result:
        pair = result["paired"]
        low, high = pair["median_difference_ci95_ms"]
        typer.echo(
            f"paired, {pair['queries']} queries to both back to back: median difference on − off "
            f"{pair['median_difference_ms']:+.3f} ms, 95 % interval [{low:+.3f}, {high:+.3f}]"
        )


def main(
    bundle: Annotated[Path, typer.Option(help="Model bundle folder to serve.")],
    corpus: Annotated[Path, typer.Option(help="JSONL corpus (cut into 60-word passages with --passages).")],
    passages: Annotated[int, typer.Option(help="Passages to serve (0: the corpus as it is).")] = 100_000,
    blocks: Annotated[int, typer.Option(help="Blocks per arm, alternating.")] = 12,
    block_queries: Annotated[int, typer.Option(help="Searches per block.")] = 300,
    seed: Annotated[int, typer.Option(help="Query sampling seed.")] = 0,
    paired: Annotated[int, typer.Option(help="Queries sent to both servers back to back, after the blocks.")] = 2000,
    off_first: Annotated[
        bool,
        typer.Option(
            help="Start the server that records nothing first (--same-process: `other` records, not /search)."
        ),
    ] = False,
    crossover: Annotated[
        bool, typer.Option(help="Measure with each server started first in turn; report the mean of both orders.")
    ] = False,
    same_process: Annotated[
        bool,
        typer.Option(help="One server, two collections: one recording, one not (no process to start first)."),
    ] = False,
    control: Annotated[
        bool, typer.Option(help="An A/A run: both servers record nothing (how far two like servers differ).")
    ] = False,
    work_dir: Annotated[Path | None, typer.Option(help="Caches and logs (default: a new temp folder).")] = None,
    out: Annotated[Path, typer.Option(help="JSON result.")] = Path("bench-results/traffic_cost.json"),
) -> None:
    work = work_dir or Path(tempfile.mkdtemp(prefix="traffic-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    served = passage_corpus(corpus, work / "passages.jsonl", limit=passages) if passages else corpus
    queries = keyword_queries(served, max(block_queries * 2, paired), 5, seed=seed, sampler="positions")
    setup = Setup(bundle, served, queries, blocks, block_queries, paired, seed, control)
    orders = [False, True] if crossover else [off_first]
    runs = []
    for i, first_off in enumerate(orders):
        order_work = work / f"order-{i}"
        order_work.mkdir(exist_ok=True)
        if same_process:
            result, pairs = measure_same_process(setup, order_work, first_off)
        else:
            result, pairs = measure(setup, order_work, first_off)
        report(result, setup)
        runs.append((result, pairs))
    summary: dict[str, Any] = {
        "documents": sum(1 for _ in served.open(encoding="utf-8")),
        "queries": len(queries),
        "blocks": blocks,
        "block_queries": block_queries,
        "control": control,
        "show_us": round(_show_cost(work, 20_000), 2),
        "runs": [r for r, _ in runs],
    }
    typer.echo(f"{summary['documents']} documents; Traffic.show {summary['show_us']} µs in process")
    if crossover and paired:
        mean, low, high = _crossover_ci(runs[0][1], runs[1][1])
        summary["crossover_ms"] = {"mean_of_medians": round(mean, 3), "ci95": [round(low, 3), round(high, 3)]}
        typer.echo(
            f"crossover: the two start orders' paired medians, averaged: on − off {mean:+.3f} ms, "
            f"95 % interval [{low:+.3f}, {high:+.3f}]"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    typer.run(main)
