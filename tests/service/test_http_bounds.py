"""The work of every request is bounded (issue 14, defect 3): snippets scan a bounded window for a bounded
number of query words, index knobs and batch size × k are capped, and a 404 does not repeat a huge id."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from service_testing import API_KEY, ThreadServer, make_bundle, syllable_words, write_corpus

from service.routes.search import scan_chars
from service.settings import Settings
from service.snippet import make_snippet, query_pattern
from ssi.records import Document

KEY = {"X-API-Key": API_KEY}


def test_the_snippet_pattern_holds_at_most_max_words_distinct_words() -> None:
    words = [f"w{i}" for i in range(1000)]
    pattern = query_pattern(words + words, max_words=32)
    assert pattern == frozenset(words[:32])
    assert "w31" in make_snippet("a " * 200 + "w31 b", pattern, 20, 10_000)
    assert "w32" not in make_snippet("a " * 200 + "w32 b", pattern, 20, 10_000)


def test_the_snippet_scan_stops_after_scan_chars() -> None:
    text = "lorem " * 2000 + "needle " + "ipsum " * 10
    pattern = query_pattern(["needle"], max_words=32)
    assert "needle" in make_snippet(text, pattern, 120, scan_chars=len(text))
    near = make_snippet(text, pattern, 120, scan_chars=1000)
    assert "needle" not in near and near.startswith("lorem")


@pytest.fixture(scope="module")
def long_world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """60 documents of about 40,000 characters: what made a snippet scan cost."""
    root = tmp_path_factory.mktemp("long")
    rng = np.random.default_rng(3)
    words = syllable_words(800, rng)
    docs = [
        Document(f"long-{i}", f"Long {i}", " ".join(rng.choice(words, size=6000)) + f" tail{i}.") for i in range(60)
    ]
    return {
        "docs": docs,
        "words": words,
        "corpus": write_corpus(root / "corpus.jsonl", docs),
        "bundle": make_bundle(root / "bundles" / "current", docs, n_dims=8),
        "root": root,
    }


@pytest.fixture(scope="module")
def long_server(long_world: dict):
    settings = dict(api_key=API_KEY, index_type="hnsw", max_k=1000)
    with ThreadServer(
        bundle=long_world["bundle"], corpus=long_world["corpus"], cache_dir=long_world["root"] / "cache", **settings
    ) as s:
        yield s


def test_a_batch_of_long_queries_over_long_documents_is_quick(long_server: ThreadServer, long_world: dict) -> None:
    # Each query: one word every document has, then hundreds found in none, so an unbounded snippet
    # scan runs every hit's text to its end for each of them (before: seconds for this batch).
    queries = []
    for i in range(16):
        filler = " ".join(f"zq{i}x{j}" for j in range(600))
        queries.append(f"{long_world['words'][i]} {filler}"[:4000])
    started = time.perf_counter()
    response = long_server.client.post("/search/batch", json={"queries": queries, "k": 60})
    took = time.perf_counter() - started
    assert response.status_code == 200, response.text
    assert sum(len(r["hits"]) for r in response.json()["results"]) == 16 * 60
    assert took < 2.0, took


def test_a_query_word_beyond_the_scan_window_leaves_the_snippet_at_the_opening(long_server: ThreadServer) -> None:
    hits = long_server.client.post("/search", json={"query": "tail7", "k": 1}).json()["hits"]
    assert hits[0]["id"] == "long-7"
    assert "tail7" not in hits[0]["snippet"] and not hits[0]["snippet"].startswith("…")


def test_ef_search_is_capped(long_server: ThreadServer) -> None:
    ok = long_server.client.post("/search", json={"query": "tail3", "ef_search": 1024})
    assert ok.status_code == 200, ok.text
    for ef in (1025, 65_536):
        response = long_server.client.post("/search", json={"query": "tail3", "ef_search": ef})
        assert response.status_code == 422 and "ef_search must be at most 1024" in response.json()["detail"]


def test_batch_size_times_k_is_capped(long_server: ThreadServer) -> None:
    # max_k is raised to 1000 on this server for single searches; a batch may still ask for 6,400 hits in all.
    assert long_server.client.post("/search", json={"query": "tail3", "k": 1000}).status_code == 200
    allowed = long_server.client.post("/search/batch", json={"queries": ["tail3"] * 6, "k": 1000})
    assert allowed.status_code == 200, allowed.text
    refused = long_server.client.post("/search/batch", json={"queries": ["tail3"] * 64, "k": 101})
    assert refused.status_code == 422
    assert "queries × k must be at most 6400 (got 64 × 101 = 6464)" in refused.json()["detail"]


def test_nprobe_is_capped(small_world: dict, tmp_path: Path) -> None:
    world = small_world
    with ThreadServer(
        bundle=world["bundle"], corpus=world["corpus"], cache_dir=tmp_path, index_type="ivf", max_nprobe=64
    ) as s:
        assert s.client.post("/search", json={"query": "baba", "nprobe": 64}).status_code == 200
        response = s.client.post("/search", json={"query": "baba", "nprobe": 65})
        assert response.status_code == 422 and "nprobe must be at most 64" in response.json()["detail"]


@pytest.mark.parametrize("suffix", ["", "/similar"])
def test_a_404_does_not_repeat_a_huge_id(long_server: ThreadServer, suffix: str) -> None:
    long_id = "a" * 60_000
    response = long_server.client.get(f"/documents/{long_id}{suffix}")
    assert response.status_code == 404
    assert len(response.content) < 400
    assert "'aaaa" in response.json()["detail"] and "(60000 characters)" in response.json()["detail"]


def test_a_huge_id_in_a_write_is_refused_without_repeating_it(long_server: ThreadServer) -> None:
    response = long_server.client.delete("/documents/" + "b" * 60_000, headers=KEY)
    assert response.status_code == 422 and len(response.content) < 400
    response = long_server.client.post(
        "/documents", json={"documents": [{"id": "c" * 500, "text": "x"}, {"id": "c" * 500, "text": "y"}]}, headers=KEY
    )
    assert response.status_code == 409 and len(response.content) < 600
    assert "appears more than once" in response.json()["detail"]


def test_a_request_scans_at_most_its_budget_over_all_hits() -> None:
    settings = Settings(bundle=Path("unused"))
    assert scan_chars(settings, 10) == settings.snippet_scan_chars == 8192
    assert scan_chars(settings, 6400) == 156
    for hits in (1, 100, 999, 6400):
        assert hits * scan_chars(settings, hits) <= settings.snippet_scan_budget


def test_a_large_batch_scans_less_of_each_hit(long_server: ThreadServer, long_world: dict) -> None:
    filler = " ".join(long_world["words"][:300])  # about 2,000 characters before the word
    text = f"{filler} tail3 {filler}"  # tail3: a word of the vocabulary that only long-3 has, near its end
    put = long_server.client.put("/documents/mid", json={"title": "Mid", "text": text}, headers=KEY)
    assert put.status_code == 200, put.text

    def snippet_of_mid(hits: list[dict]) -> str:
        return next(hit["snippet"] for hit in hits if hit["id"] == "mid")

    single = long_server.client.post("/search", json={"query": "tail3", "k": 2}).json()["hits"]
    assert "tail3" in snippet_of_mid(single)
    # 64 queries × 60 hits: about 260 characters of each hit are scanned, so the word is not reached.
    batch = long_server.client.post("/search/batch", json={"queries": ["tail3"] * 64, "k": 60})
    assert batch.status_code == 200, batch.text
    assert "tail3" not in snippet_of_mid(batch.json()["results"][0]["hits"])


def test_a_snippet_from_the_text_prefix_the_store_reads_equals_one_from_the_whole_text() -> None:
    """Search reads only scan + width + 1 characters of each hit's text: the snippet must not change."""
    import random

    from service.snippet import make_snippet, query_pattern

    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(300)]
    for _ in range(200):
        text = " ".join(rng.choice(vocabulary) for _ in range(rng.randrange(1, 3000)))
        scan, width = rng.randrange(100, 3000), rng.randrange(40, 400)
        pattern = query_pattern(rng.sample(vocabulary, 3), 32)
        prefix = text[: scan + width + 1]
        assert make_snippet(prefix, pattern, width, scan) == make_snippet(text, pattern, width, scan)
