"""The service under benchmark: `python -m service serve` in its own process, as users run it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(url: str, timeout: float = 600.0) -> float:
    """Seconds until `url`'s /readyz answers 200 (a server or a cluster's router still starting answers 503, or
    nothing); a TimeoutError after `timeout`."""
    started = time.perf_counter()
    with httpx.Client(timeout=120) as client:
        while time.perf_counter() - started < timeout:
            try:
                if client.get(f"{url}/readyz").status_code == 200:
                    return time.perf_counter() - started
            except httpx.TransportError:
                pass
            time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout:g}s")


def smaps_rollup(pid: int) -> dict[str, int]:
    """Rss, Pss, Pss_Anon and Pss_File of a process in bytes ({} where /proc/PID/smaps_rollup is not there)."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return {}
    wanted = {"Rss:": "rss", "Pss:": "pss", "Pss_Anon:": "pss_anon", "Pss_File:": "pss_file"}
    out: dict[str, int] = {}
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] in wanted:
            out[wanted[parts[0]]] = int(parts[1]) * 1024
    return out


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _parent(process: psutil.Process) -> int | None:
    try:
        return process.ppid()
    except psutil.Error:
        return None


class ServedProcess:
    def __init__(self, bundle: Path, corpus: Path, work_dir: Path, settings: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = work_dir / f"serve-{self.port}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SSI_")}
        env.update({"SSI_HOST": "127.0.0.1", "SSI_PORT": str(self.port), "SSI_LOG_LEVEL": "warning", **settings})
        self.env = env
        self.args = [sys.executable, "-m", "service", "serve", "--bundle", str(bundle), "--corpus", str(corpus)]
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 24 * 3600) -> dict[str, Any]:
        """Start and wait until ready; returns /readyz's description of the collection plus wall time."""
        started = time.perf_counter()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.args, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = started + timeout
        with httpx.Client(timeout=10) as client:
            while time.perf_counter() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"ssi serve exited ({self.process.returncode}); see {self.log_path}")
                try:
                    response = client.get(f"{self.url}/readyz")
                    if response.status_code == 200:
                        info = response.json()["collections"]
                        described = next(iter(info.values()))
                        described["ready_seconds"] = time.perf_counter() - started
                        return described
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        raise TimeoutError(f"ssi serve not ready after {timeout}s; see {self.log_path}")

    def _processes(self) -> list[psutil.Process]:
        """The server and, with SSI_WORKERS > 1, its worker processes (service.workers)."""
        assert self.process is not None
        main = psutil.Process(self.process.pid)
        return [main, *main.children(recursive=True)]

    def rss_bytes(self) -> int:
        """Resident memory of the server's processes together (each worker holds its own index)."""
        return sum(p.memory_info().rss for p in self._processes())

    def worker_memory(self) -> list[dict[str, int]]:
        """Each serving process's memory from /proc/PID/smaps_rollup (Linux), in bytes: `pss` (proportional set
        size: a page shared by n processes counts 1/n in each, so the workers' PSS add up to what the group
        holds), `pss_anon` (its private heap), `pss_file` (its share of mapped files: bundle, snapshot) and
        `rss`. The workers only, with SSI_WORKERS > 1 (the supervisor holds no collection); [] off Linux."""
        processes = self._processes()
        # The workers are the children of the supervisor's fork server (service.workers), whose command line they
        # share; the fork server and the resource tracker, the supervisor's own children, hold no collection.
        forkservers = {p.pid for p in processes[1:] if _parent(p) == processes[0].pid}
        workers = [p for p in processes[1:] if _parent(p) in forkservers]
        out = []
        for process in workers or processes[:1]:
            fields = smaps_rollup(process.pid)
            if fields:
                out.append(fields)
        return out

    def cpu_seconds(self) -> float:
        """CPU time the server's processes have used so far (all threads, user + system): on a shared
        machine, CPU per request is what the request costs, where wall time also counts the neighbours."""
        return float(sum(self.cpu_seconds_by_process().values()))

    def cpu_seconds_by_process(self) -> dict[int, float]:
        """`cpu_seconds` of each process by pid (the supervisor and its workers): how evenly a group's work spread."""
        found = {}
        for process in self._processes():
            try:
                times = process.cpu_times()
            except psutil.Error:  # a process gone meanwhile (a worker's helper, a restart)
                continue
            found[process.pid] = times.user + times.system
        return found

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
