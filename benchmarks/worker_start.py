"""What a worker group costs to start (`ssi serve --workers N`: service.workers): the CPU seconds of the whole
process tree (supervisor, fork server, workers) when the server first answers /readyz, and the seconds to get there,
for each N asked, the sizes taking turns start by start. With --code DIR (repeatable) each start runs the service
from that checkout (PYTHONPATH), in turn with the others: two checkouts compared in one run on the same load.

Each start is on a new cache folder (the first worker builds and snapshots the index, the others load it) over a
generated corpus (benchmarks.crash_loop's world), with the numba kernels cached on disk (NUMBA_CACHE_DIR, a folder
of the run's unless set; each checkout's first start, which compiles them, is left out).

    python -m benchmarks.worker_start --workers 1 --workers 2 --starts 3
    python -m benchmarks.worker_start --workers 2 --code ../before --code . --out runs/worker-start.json
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from benchmarks.crash_loop import make_world
from benchmarks.replication_faults import write_figures
from service.bench.server import free_port, wait_ready

HZ = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of `root` and every process below it, each one's own."""
    children: dict[int, list[tuple[int, float]]] = {}
    own: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        own[int(entry)] = (int(fields[11]) + int(fields[12])) / HZ
        children.setdefault(int(fields[1]), []).append((int(entry), own[int(entry)]))
    total, todo = own.get(root, 0.0), [root]
    while todo:
        for pid, cpu in children.get(todo.pop(), []):
            total += cpu
            todo.append(pid)
    return total


def start_once(code: Path, workers: int, world: Path, cache: Path) -> dict[str, float]:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "SSI_CACHE_DIR": str(cache),
        "SSI_PORT": str(port),
        "SSI_WORKERS": str(workers),
        "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", str(world / "numba-cache")),  # ssi.jit_cache
    }
    command = [sys.executable, "-m", "service", "serve", "--bundle", str(world / "bundle")]
    started = time.monotonic()
    process = subprocess.Popen(
        [*command, "--corpus", str(world / "corpus.jsonl")], env=env, cwd=code,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=300.0)
        ready = time.monotonic() - started
        cpu = tree_cpu(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=120)
    return {"ready_s": round(ready, 2), "tree_cpu_s": round(cpu, 2)}


def main(
    workers: Annotated[list[int], typer.Option(help="Worker counts to start (repeatable).")] = [1, 2],  # noqa: B006
    code: Annotated[list[Path] | None, typer.Option(help="Checkouts to run the service from (repeatable).")] = None,
    starts: Annotated[int, typer.Option(help="Starts of each size and checkout.")] = 3,
    documents: Annotated[int, typer.Option(help="Documents of the generated corpus.")] = 300,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    checkouts = [c.resolve() for c in code] if code else [Path(__file__).resolve().parents[1]]
    with tempfile.TemporaryDirectory(prefix="ssi-worker-start-") as folder:
        world = Path(folder)
        make_world(world, documents, seed=1)  # corpus.jsonl and a random lowrank bundle
        for checkout in checkouts:  # kernels compiled and cached (numba keys them by source path): not counted
            start_once(checkout, 1, world, world / f"warm-{checkouts.index(checkout)}")
        runs: dict[str, list[dict[str, float]]] = {}
        for trial in range(starts):
            for checkout in checkouts:
                for n in workers:
                    key = f"{checkout} workers={n}"
                    run = start_once(checkout, n, world, world / f"cache-{len(runs)}-{trial}-{n}")
                    runs.setdefault(key, []).append(run)
                    print(f"{key}: ready {run['ready_s']} s, CPU of the process tree {run['tree_cpu_s']} s", flush=True)
    figures = {
        key: {
            "starts": values,
            "tree_cpu_s_median": statistics.median(v["tree_cpu_s"] for v in values),
            "ready_s_median": statistics.median(v["ready_s"] for v in values),
        }
        for key, values in runs.items()
    }
    write_figures(figures, out)


if __name__ == "__main__":
    typer.run(main)
