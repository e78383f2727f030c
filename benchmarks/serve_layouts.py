"""`/search` under load for several layouts of `ssi serve` (worker processes × threads, other settings), each over
the same cached flat index, with the CPU of every process and, where py-spy is given, a profile of the whole group.

Why: on a 16-core machine `ssi serve`'s defaults (14 workers × 1 thread) reached 0.65 of the FAISS scan floor at
128 clients where two cores reach ~0.9, at 3.4 ms of server CPU a search against 1.3 ms on two cores; which part
of a request grows with the cores, and whether another layout does better, was not known. `ssi bench` serves one
layout per run and starts with the floors and BM25; this serves several in turn after one build, then measures
the floor once (the scan on as many threads as the first layout has workers × threads).

    python -m benchmarks.serve_layouts --bundle B --passages P --layout 14x1 --layout 7x2 \\
        --clients 128 --seconds 8 --py-spy /path/to/py-spy --out OUT/layouts.json --profile-dir OUT

A profile (`py-spy record --subprocesses --format raw`, during a second load of the same length, so that the
measured load is not sampled) is written as OUT/profile-<layout>.txt: one line per stack, `frame;frame;… count`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from service.bench.load import run_load
from service.bench.queries import keyword_queries
from service.bench.run import BenchConfig, in_process
from service.bench.server import ServedProcess


def _layout(text: str) -> tuple[int, int]:
    workers, _, threads = text.partition("x")
    return int(workers), int(threads or 1)


def _profile(py_spy: str, pid: int, seconds: float, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--subprocesses", "--duration", str(round(seconds)), "--rate", "97",
         "--format", "raw", "--nonblocking", "--output", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def serve_layout(
    args: argparse.Namespace, layout: str, bodies: list[dict[str, Any]], settings: dict[str, str]
) -> dict[str, Any]:
    workers, threads = _layout(layout)
    env = {
        "SSI_CACHE_DIR": str(args.work_dir / "flat"),
        "SSI_INDEX_TYPE": "flat",
        "SSI_WORKERS": str(workers),
        "SSI_THREADS": str(threads),
        "SSI_MAX_QUEUE": str(max(64, 2 * args.clients)),
        "SSI_QUEUE_TIMEOUT": "60",
        **settings,
    }
    server = ServedProcess(args.bundle, args.passages, args.work_dir, env)
    info = server.start()
    result: dict[str, Any] = {"layout": layout, "settings": settings, "ready_seconds": round(info["ready_seconds"], 1)}
    try:
        run_load(server.url, bodies, args.clients, 2.0)  # warm: every worker's first searches
        before = server.cpu_seconds_by_process()
        measured = run_load(server.url, bodies, args.clients, args.seconds)
        after = server.cpu_seconds_by_process()
        spent = {pid: after[pid] - before.get(pid, 0.0) for pid in after}
        main = server.process.pid if server.process else -1
        result.update(measured.as_dict())
        result["server_cpu_ms_per_request"] = round(sum(spent.values()) * 1000 / max(1, measured.requests), 3)
        result["supervisor_cpu_s"] = round(spent.get(main, 0.0), 2)
        result["worker_cpu_s"] = sorted((round(v, 2) for pid, v in spent.items() if pid != main), reverse=True)
        print(f"[{layout} {settings}] {measured.throughput_qps:.0f} q/s, p50 {measured.p50_ms:.1f} ms, "
              f"p99 {measured.p99_ms:.1f} ms, {measured.errors} errors, {result['server_cpu_ms_per_request']} ms CPU "
              f"a request; workers' CPU s {result['worker_cpu_s']}", flush=True)  # fmt: skip
        if args.py_spy and layout in (args.profile or [layout]):
            name = layout + "".join(f"-{k}{v}" for k, v in settings.items())
            out = args.profile_dir / f"profile-{name}.txt"
            spy = _profile(args.py_spy, main, args.seconds, out)
            run_load(server.url, bodies, args.clients, args.seconds)
            message = spy.communicate(timeout=120)[0].decode(errors="replace")
            result["profile"] = str(out) if out.is_file() else f"none: {message[-400:]}"
            print(f"[{layout}] profile: {result['profile']}", flush=True)
    finally:
        server.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--passages", type=Path, required=True, help="JSONL corpus to serve (60-word passages)")
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--layout", action="append", required=True, help="WORKERSxTHREADS, e.g. 14x1 (repeat)")
    parser.add_argument("--setting", action="append", default=[], help="LAYOUT:SSI_NAME=VALUE, an extra run (repeat)")
    parser.add_argument("--clients", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--py-spy", default=None, help="py-spy binary: profile the layouts named by --profile")
    parser.add_argument("--profile", action="append", default=None, help="a layout to profile (default: all)")
    parser.add_argument("--profile-dir", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    args.profile_dir.mkdir(parents=True, exist_ok=True)
    queries = keyword_queries(args.passages, args.queries, 5)
    bodies = [{"query": q, "k": 10} for q in queries]
    runs: list[tuple[str, dict[str, str]]] = [(layout, {}) for layout in args.layout]
    for extra in args.setting:
        layout, _, setting = extra.partition(":")
        name, _, value = setting.partition("=")
        runs.append((layout, {name: value}))
    report: dict[str, Any] = {"clients": args.clients, "seconds": args.seconds, "layouts": []}
    for layout, settings in runs:
        started = time.perf_counter()
        report["layouts"].append(serve_layout(args, layout, bodies, settings))
        report["layouts"][-1]["wall_seconds"] = round(time.perf_counter() - started, 1)
        args.out.write_text(json.dumps(report, indent=1))
    workers, threads = _layout(args.layout[0])
    config = BenchConfig(bundle=args.bundle, corpus=args.passages, work_dir=args.work_dir, out=args.out,
                         threads=threads, workers=workers)  # fmt: skip
    searched, floor = in_process(config, args.passages, queries)
    report["in_process"], report["scan_floor"] = searched, floor
    for found in report["layouts"]:
        found["share_of_floor"] = round(found["throughput_qps"] / floor["throughput_qps"], 3)
    print(f"scan floor: {floor['throughput_qps']} q/s on {floor['threads']} threads (p50 {floor['p50_ms']} ms); "
          f"in process p50 {searched['p50_ms']} ms", flush=True)  # fmt: skip
    for found in report["layouts"]:
        print(f"{found['layout']} {found['settings']}: {found['share_of_floor']} of the floor", flush=True)
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
