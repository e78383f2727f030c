"""`ssi bench` end to end on a tiny corpus: it runs, and what it writes is complete and consistent."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from service.bench.queries import keyword_queries, passage_corpus
from service.bench.run import BenchConfig, run_bench


def test_bench_writes_latency_recall_and_the_bm25_yardstick(small_world: dict, tmp_path: Path) -> None:
    """Slow: `ssi bench` end to end at its smallest size (a server process, wrk's load, recall against the brute
    force)."""
    out = tmp_path / "result.json"
    config = BenchConfig(
        bundle=small_world["bundle"],
        corpus=small_world["corpus"],
        work_dir=tmp_path / "work",
        out=out,
        n_queries=40,
        clients=[1, 4],
        seconds=0.5,
        index_types=["flat", "hnsw"],
        ef_search=[64, 256],
        threads=1,
        workers=2,  # a group of two server processes: memory and CPU are summed over them
        measure_restart=False,  # the restart tests cover the cache; one server start less here
    )
    lines: list[str] = []
    report = run_bench(config, log=lines.append)
    assert json.loads(out.read_text()) == report
    setup = report["setup"]
    assert setup["documents"] == len(small_world["docs"]) and setup["queries"] == 40 and setup["N"] == 16
    assert setup["service_workers"] == 2
    for index_type in ("flat", "hnsw"):
        assert report[index_type]["documents"] == len(small_world["docs"])
        assert report[index_type]["rss_mb_ready"] > 10 and report[index_type]["index_cache_mb"] > 0
        # Each worker's proportional set size (a page shared by both counts half in each): the two workers only.
        workers = report[index_type]["worker_memory_mb_after_load"]
        assert len(workers) == 2
        assert all(0 < w["pss"] <= w["rss"] and w["pss_anon"] + w["pss_file"] <= w["pss"] + 1 for w in workers)
        for clients in ("1", "4"):
            level = report[index_type]["load"][clients]
            assert level["errors"] == 0 and level["requests"] > 0
            assert 0 < level["p50_ms"] <= level["p99_ms"]
    recall = report["hnsw"]["recall"]
    assert set(recall) == {"ef_search=64", "ef_search=256"}
    assert all(0.9 <= r["recall@10"] <= 1.0 for r in recall.values())
    assert all(0 < r["load_1_client_p50_ms"] <= r["load_1_client_p99_ms"] for r in recall.values())
    assert report["bm25"]["documents"] == len(small_world["docs"]) and report["bm25"]["single_query"]["p50_ms"] > 0
    assert report["ratios"]["flat_p50_over_bm25_p50"] > 0
    # The floors of the same run: the FAISS scan over the same vectors, and GET /healthz at each client count.
    assert report["scan_floor"]["documents"] == len(small_world["docs"]) and report["scan_floor"]["throughput_qps"] > 0
    assert set(report["flat"]["healthz_load"]) == {"1", "4"}
    assert report["flat"]["load"]["1"]["server_cpu_ms_per_request"] > 0
    assert report["ratios"]["flat_4c_qps_over_scan_qps"] > 0 and report["ratios"]["flat_4c_qps_over_healthz_qps"] > 0
    assert any("recall@10" in line for line in lines)


def test_bench_match_scenario_measures_pages_against_adverts_and_its_floors(small_world: dict, tmp_path: Path) -> None:
    """`ssi bench --scenario match`: the corpus cut into passages as adverts, pages of its documents; /match at
    each client count with no error, the floors of the same run, and an IVF knob's recall against flat.

    Slow: the match scenario of `ssi bench` end to end at its smallest size (a server process and its load)."""
    from service.bench.match import MatchBenchConfig, make_pages, run_match_bench

    out = tmp_path / "match.json"
    config = MatchBenchConfig(
        bundle=small_world["bundle"],
        corpus=small_world["corpus"],
        work_dir=tmp_path / "work",
        out=out,
        ads=[300],
        page_kb=[1, 4],
        pages=4,
        clients=[1, 3],
        seconds=0.5,
        index_types=["flat", "ivf"],
        nprobe=[1000],  # every list: IVF scans it all, so its answers are the flat ones
        # One server process: the first test checks a worker group's accounting; two workers here only doubled
        # each server's start and the CPU its load levels burn.
        workers=1,
    )
    lines: list[str] = []
    report = run_match_bench(config, log=lines.append)
    assert json.loads(out.read_text()) == report
    flat = report["ads"]["300"]["flat"]
    for kb in ("1", "4"):
        size = flat["sizes"][kb]
        for clients in ("1", "3"):
            assert size["load"][clients]["errors"] == 0 and size["load"][clients]["requests"] > 0
        assert size["in_process"]["scan_floor"]["throughput_qps"] > 0 and size["in_process"]["match"]["p50_ms"] > 0
        assert size["ratios"]["1c_p50_over_scan_p50"] > 0 and size["ratios"]["3c_qps_over_scan_qps"] > 0
        assert size["in_process"]["page_words_mean"] > 20
        ivf = report["ads"]["300"]["ivf nprobe=1000"]["sizes"][kb]
        assert ivf["recall@10"] == 1.0 and ivf["load"]["1"]["errors"] == 0
    # Pages are the corpus's text, about the size asked for, cut at a word.
    pages = make_pages(small_world["corpus"], 4, 3, seed=0)
    assert all(3000 <= len(page) <= 4000 and not page.endswith(" ") for page in pages)
    assert report["setup"]["service_workers"] == 1 and any("matches/s" in line for line in lines)


def test_wrk_drives_searches_and_counts_refusals_as_errors(small_world: dict, tmp_path: Path) -> None:
    """The load generator `ssi bench` uses where wrk is installed (CI installs it): real searches answered,
    and a body the server refuses (k = 0: 422) counted as an error, not as a measured request."""
    from service.bench import wrk
    from service.bench.load import run_load
    from tests.service.service_testing import ThreadServer, probe_queries

    if not wrk.available():
        message = "wrk is not installed (Debian package wrk; .ci/run installs it)"
        if os.environ.get("SSI_REQUIRE_WRK") == "1":
            pytest.fail(message)
        pytest.skip(message)
    bodies = [{"query": q, "k": 10} for q in probe_queries(small_world["docs"], 20, seed=3)]
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path) as server:
        good = run_load(server.url, bodies, clients=4, seconds=1, generator="wrk")
        refused = run_load(server.url, [{"query": "anything", "k": 0}], clients=2, seconds=1, warmup=0, generator="wrk")
        health = run_load(server.url, [], clients=2, seconds=1, path="/healthz", generator="wrk")
    assert good.generator == "wrk" and good.errors == 0 and good.requests > 20
    assert 0 < good.p50_ms <= good.p99_ms
    assert refused.requests == 0 and refused.errors > 0
    assert health.errors == 0 and health.requests > good.requests / 4


def test_bench_refuses_a_malformed_setting_before_starting_anything(small_world: dict, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from service.__main__ import app

    args = ["bench", "--bundle", str(small_world["bundle"]), "--generate", "10", "--work-dir", str(tmp_path)]
    result = CliRunner().invoke(app, [*args, "--setting", "ivf_nlist"])
    assert result.exit_code == 2 and "expected NAME=VALUE" in result.output
    result = CliRunner().invoke(app, [*args, "--workers", "0"])
    assert result.exit_code == 2
    result = CliRunner().invoke(app, [*args, "--query-sampler", "stopwords"])
    assert result.exit_code == 2 and "use distinct or positions" in result.output
    assert not any(tmp_path.iterdir())  # nothing was started or written


def test_the_positions_sampler_asks_stop_words_as_often_as_text_has_them(tmp_path: Path) -> None:
    """The two workloads of `ssi bench --query-sampler`: distinct words (stop words at most once a query, as
    rare as any other word) and words at random positions (stop words as often as the text uses them)."""
    filler = " ".join(f"w{i}" for i in range(20))
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for i in range(200):
            text = " ".join(f"the {word} of" for word in filler.split())  # 2 stop words a content word
            handle.write(json.dumps({"id": f"d{i}", "title": "", "text": text}) + "\n")
    share = {}
    for sampler in ("distinct", "positions"):
        queries = keyword_queries(corpus, 200, 5, seed=3, sampler=sampler)
        assert queries == keyword_queries(corpus, 200, 5, seed=3, sampler=sampler)  # seeded
        words = [word for query in queries for word in query.split()]
        assert len(queries) == 200 and all(len(query.split()) == 5 for query in queries)
        share[sampler] = sum(word in ("the", "of") for word in words) / len(words)
    assert share["distinct"] < 0.2 and 0.55 < share["positions"] < 0.8  # 2/22 against 2/3 of the tokens


def test_passages_cut_from_a_corpus_and_from_the_passages_file_itself(tmp_path: Path) -> None:
    """A benchmark's `--corpus` may be the passages file its work folder already holds: cutting it again
    onto itself gives the same passages back (it had emptied the file before reading it), and no partial
    file is left beside it."""
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for i in range(30):
            text = " ".join(f"w{i}_{j}" for j in range(150))  # 60 + 60 + 30 words
            handle.write(json.dumps({"id": f"d{i}", "title": f"T{i}", "text": text}) + "\n")
    passages = passage_corpus(corpus, tmp_path / "work" / "passages.jsonl", limit=50)

    def texts(path: Path) -> list[tuple[str, str]]:
        return [(row["title"], row["text"]) for row in map(json.loads, path.read_text(encoding="utf-8").splitlines())]

    first = texts(passages)
    assert len(first) == 50 and [len(text.split()) for _, text in first[:3]] == [60, 60, 30]
    assert passage_corpus(passages, passages, limit=50) == passages
    assert texts(passages) == first
    assert sorted(p.name for p in passages.parent.iterdir()) == ["passages.jsonl"]
