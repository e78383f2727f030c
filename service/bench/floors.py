"""Floors measured in the same run as the service: what the FAISS flat scan alone costs on these vectors.

The service's flat search cannot beat a scan of every document's vector, so `ssi bench` reports
its latency and throughput as ratios of this scan (one query per call, as a lone request makes
it): p50 on one thread, and queries/s with `threads` threads scanning at once (FAISS releases the
GIL), for as long as a load level runs, at most 3 s. HTTP's own floor is GET /healthz under the same
client counts (service.bench.load).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import faiss
import numpy as np


def scan_floor(vectors: np.ndarray, queries: np.ndarray, k: int, threads: int, seconds: float = 3.0) -> dict[str, Any]:
    """p50 of one flat inner-product scan (k results, one thread) and q/s of `threads` scanning threads."""
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    faiss.omp_set_num_threads(1)
    for row in range(min(10, queries.shape[0])):
        index.search(queries[row : row + 1], k)
    spent = []
    cpu = []
    for row in range(queries.shape[0]):
        started, started_cpu = time.perf_counter(), time.thread_time()
        index.search(queries[row : row + 1], k)
        spent.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - started_cpu)
    done = [0] * threads
    deadline = time.perf_counter() + seconds

    def scan(slot: int) -> None:
        faiss.omp_set_num_threads(1)
        row = slot
        while time.perf_counter() < deadline:
            index.search(queries[row % queries.shape[0] : row % queries.shape[0] + 1], k)
            done[slot] += 1
            row += threads

    started = time.perf_counter()
    workers = [threading.Thread(target=scan, args=(slot,)) for slot in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    ms = np.asarray(spent) * 1000
    return {
        "k": k,
        "documents": int(vectors.shape[0]),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "cpu_ms": round(float(np.mean(cpu) * 1000), 3),
        "threads": threads,
        "throughput_qps": round(sum(done) / elapsed, 1),
    }
