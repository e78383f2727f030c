"""Long batches do not hold up writes or single searches: the index lock is taken per query, not per batch."""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import httpx
import numpy as np
from service_testing import API_KEY, ProcessServer, make_bundle, make_corpus, write_corpus

KEY = {"X-API-Key": API_KEY}


def test_a_write_and_single_searches_do_not_wait_for_long_batches(tmp_path: Path) -> None:
    """Slow: a real server process over 10,000 documents (a bundle built for them, each embedded at start-up), so
    that a batch takes long enough to tell a write or a search that waited for it from one that did not."""
    docs = make_corpus(10_000, seed=5, vocab_words=3000)
    corpus = write_corpus(tmp_path / "corpus.jsonl", docs)
    bundle = make_bundle(tmp_path / "bundle", docs, n_dims=32)
    env = {"SSI_CACHE_DIR": str(tmp_path / "cache"), "SSI_API_KEY": API_KEY, "SSI_THREADS": "1"}
    server = ProcessServer(tmp_path, env, ["--bundle", str(bundle), "--corpus", str(corpus)]).start()
    rng = np.random.default_rng(0)
    # 64 queries of 550 words from 40 documents each: every query scores thousands of candidates, the batch
    # takes a while (one document's 100 words, k = 10 and 3,000 documents were enough before the dense rerank of
    # service.rerank and before a flat index ranked every row at once, service.rerank.every_row_top).
    queries = [
        " ".join(rng.choice(" ".join(docs[int(i)].text for i in rng.integers(0, len(docs), 40)).split(), 550))
        for _ in range(64)
    ]
    batch_seconds: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    def batches() -> None:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            while not stop.is_set():
                started = time.perf_counter()
                response = client.post("/search/batch", json={"queries": queries, "k": 100})
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
        with httpx.Client(base_url=server.url, timeout=120) as client:
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
