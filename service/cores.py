"""How many CPU cores this process may use: what `ssi serve` sizes its workers and threads by.

`os.cpu_count()` is the host's count. In a container the cgroup's CPU quota (cgroup v2 `cpu.max`, v1
`cpu.cfs_quota_us` / `cpu.cfs_period_us`, the tightest of the process's cgroup and its ancestors) and
the CPU affinity mask (`taskset`, `docker --cpuset-cpus`) bound it, and a server sized by the host's
count runs more busy threads than it has cores. A fractional quota rounds up (1.5 CPUs: 2 threads that
share them), never below one core.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Cores:
    """The cores this process may use, and what bounded them (for the start-up message)."""

    usable: int
    host: int
    bound_by: str  # "host", "affinity" or "cgroup quota"

    def describe(self) -> str:
        if self.bound_by == "host":
            return f"{self.usable} cores"
        return f"{self.usable} of the host's {self.host} cores ({self.bound_by})"


def _v2_quota(path: Path) -> float | None:
    """cgroup v2: "max 100000" (no quota) or "200000 100000" (2 CPUs)."""
    try:
        quota, period = (path / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _v1_quota(path: Path) -> float | None:
    try:
        quota = int((path / "cpu.cfs_quota_us").read_text())
        period = int((path / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """CPUs the process's cgroup (or an ancestor) may use per period, the tightest; None without a quota."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        _, controllers, relative = line.split(":", 2)
        if controllers == "":  # v2, unified hierarchy
            base, read = root, _v2_quota
        elif "cpu" in controllers.split(","):
            base = next((root / name for name in ("cpu,cpuacct", "cpu", "cpuacct,cpu") if (root / name).is_dir()), root)
            read = _v1_quota
        else:
            continue
        path = base / relative.lstrip("/")
        while True:  # a limit may sit on any ancestor; a container sees its own cgroup as the root
            quota = read(path)
            if quota is not None:
                quotas.append(quota)
            if path == base or base not in path.parents:
                break
            path = path.parent
    return min(quotas) if quotas else None


def usable_cores() -> Cores:
    host = os.cpu_count() or 1
    usable, bound_by = host, "host"
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        affinity = host
    if affinity < usable:
        usable, bound_by = affinity, "affinity"
    quota = cgroup_quota()
    if quota is not None and math.ceil(quota) < usable:
        usable, bound_by = max(1, math.ceil(quota)), "cgroup quota"
    return Cores(usable=usable, host=host, bound_by=bound_by)


MAX_WORKERS = 1024  # Settings.workers' bound: what one supervisor starts at most, given or not


def serve_sizes(cores: int, workers: int | None, threads: int | None) -> tuple[int, int]:
    """(worker processes, threads per worker) for `ssi serve` on `cores` cores, filling in what was not given.

    One process runs the request path's Python under one GIL, so it uses about one core: a worker per core
    (on 2 cores, 100k passages, 32 clients: two workers of one thread 869 searches/s, one process of two
    threads 594, docs/performance/search.md "The defaults against one process"). Threads fill what the
    workers leave, so workers × threads stays within the cores; a single worker keeps its two threads.

    No fixed cap below MAX_WORKERS: a cap of 8 left half of a 16-core host idle (0.47 of the scan floor × 14
    cores). A worker's own memory is what it does not share with the others (docs/operate/workers.md, "What a
    worker costs"): the vectors and tf-idf rows loaded from a snapshot are mapped once for all of them.
    """
    if workers is None:
        workers = max(1, min(MAX_WORKERS, cores // (threads or 1)))
    if threads is None:
        threads = max(1, min(2, cores // workers))
    return workers, threads
