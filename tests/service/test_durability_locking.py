"""Long batches do not hold up writes or single searches: the index lock is taken per query, not per batch."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import httpx
import numpy as np
from service_testing import API_KEY, TLS, ProcessServer, make_bundle, make_corpus, write_corpus

KEY = {"X-API-Key": API_KEY}


def test_a_write_and_single_searches_do_not_wait_for_long_batches(tmp_path: Path) -> None:
    """Two clients send batches of 1,024 short queries with k = 1 (SSI_MAX_BATCH raised for them) over 2,000
    documents, so that most of a batch's time is ranking, under the index's read lock, and little is snippets, store
    reads and JSON, outside it. Medians over a run, as shares of a batch's time: a write 0.02-0.05, a single search
    0.01-0.03; a write 0.34-0.46 with the server patched to hold the lock for a whole batch (a sitecustomize.py
    wrapping ModelState.search_rows in one read lock), against the 0.25 asserted. The 64 queries of 550 words and
    k = 100 over 10,000 documents this replaced told the two apart no better (0.05 and 0.36) at three times the CPU:
    three quarters of their batch was snippets and JSON, outside the lock.

    Slow: a real server process answering two clients' long batches while a third writes and searches."""
    docs = make_corpus(2000, seed=5)
    corpus = write_corpus(tmp_path / "corpus.jsonl", docs)
    bundle = make_bundle(tmp_path / "bundle", docs)
    env = {
        "SSI_CACHE_DIR": str(tmp_path / "cache"),
        "SSI_API_KEY": API_KEY,
        "SSI_THREADS": "1",
        "SSI_MAX_BATCH": "1024",
    }
    server = ProcessServer(tmp_path, env, ["--bundle", str(bundle), "--corpus", str(corpus)]).start()
    rng = np.random.default_rng(0)
    # 1,024 queries of 50 words from 5 documents each: a flat index scores every row for each (one matrix product
    # a chunk, then service.rerank.every_row_top a query), all of it under the read lock.
    queries = [
        " ".join(rng.choice(" ".join(docs[int(i)].text for i in rng.integers(0, len(docs), 5)).split(), 50))
        for _ in range(1024)
    ]
    batch_seconds: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    def batches() -> None:
        with httpx.Client(base_url=server.url, timeout=120, verify=TLS) as client:
            while not stop.is_set():
                started = time.perf_counter()
                response = client.post("/search/batch", json={"queries": queries, "k": 1})
                if response.status_code != 200:
                    errors.append(response.text)
                batch_seconds.append(time.perf_counter() - started)

    try:
        threads = [threading.Thread(target=batches, daemon=True) for _ in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        put_seconds: list[float] = []
        search_seconds: list[float] = []
        with httpx.Client(base_url=server.url, timeout=120, verify=TLS) as client:
            for i in range(12):
                started = time.perf_counter()
                put = client.put(f"/documents/w-{i}", json={"text": docs[i].text}, headers=KEY)
                put_seconds.append(time.perf_counter() - started)
                assert put.status_code == 200, put.text
                started = time.perf_counter()
                found = client.post("/search", json={"query": docs[i].text[:40], "k": 10})
                search_seconds.append(time.perf_counter() - started)
                assert found.status_code == 200, found.text
                time.sleep(float(rng.uniform(0.02, 0.1)))
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        stop.set()
        server.stop()
    assert not errors, errors[:3]
    batch = statistics.median(batch_seconds)
    put, search = statistics.median(put_seconds), statistics.median(search_seconds)
    figures = f"batch {batch:.3f}s, put {put:.3f}s (max {max(put_seconds):.3f}s), search {search:.3f}s"
    print(figures)
    assert batch > 0.15, f"the batches are too short to tell: {figures}"
    assert put < 0.25 * batch, f"a write waited for a batch: {figures}"
    assert search < 0.25 * batch, f"a single search waited for a batch: {figures}"
