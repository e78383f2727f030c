"""benchmarks.serve_check: the must-show lines that scripts/serve_check.sh prints from `ssi bench`'s reports.

The reports here carry only the fields the summary reads, in the places `ssi bench` writes them
(service.bench.run: `flat.load.<clients>`, `scan_floor`; service.bench.match: `ads.<n>.flat.sizes.<kb>.load`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.serve_check import main, match_figures, search_figures


def _level(qps: float, p50: float, p99: float, errors: int = 0) -> dict:
    return {"throughput_qps": qps, "p50_ms": p50, "p99_ms": p99, "errors": errors, "generator": "wrk"}


def _search_report(qps: float) -> dict:
    return {
        "setup": {"service_workers": 14, "service_threads": 1},
        "flat": {"load": {"128": _level(qps, 20.0, 60.0)}},
        "scan_floor": {"throughput_qps": 10_000.0, "threads": 14, "p50_ms": 1.2},
    }


def _match_report(p99: float, errors: int = 0) -> dict:
    return {
        "setup": {"service_workers": 14, "service_threads": 1},
        "ads": {"100000": {"flat": {"sizes": {"20": {"load": {"32": _level(900.0, 30.0, p99, errors)}}}}}},
    }


def test_search_is_set_against_the_scan_floor_of_as_many_threads() -> None:
    met = search_figures(_search_report(8_000.0), 128)
    assert met["share_of_floor"] == 0.8 and met["met"] and met["floor_threads"] == 14
    assert not search_figures(_search_report(7_990.0), 128)["met"]


def test_match_needs_its_p99_within_bound_and_no_error() -> None:
    (met,) = match_figures(_match_report(200.0), 32)
    assert met["met"] and (met["ads"], met["page_kb"]) == (100_000, 20)
    assert not match_figures(_match_report(200.1), 32)[0]["met"]
    assert not match_figures(_match_report(100.0, errors=1), 32)[0]["met"]


def test_the_summary_reads_both_reports_and_writes_its_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    search, match = tmp_path / "search.json", tmp_path / "match.json"
    search.write_text(json.dumps(_search_report(9_000.0)), encoding="utf-8")
    match.write_text(json.dumps(_match_report(250.0)), encoding="utf-8")
    assert main(["--search", str(search), "--match", str(match), "--out", str(tmp_path / "summary.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("/search 128 clients") and lines[0].endswith("MET (>= 0.8)")
    assert lines[1].startswith("/match 100000 adverts, 20 kB pages, 32 clients") and "NOT MET" in lines[1]
    written = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert written["search"]["met"] and not written["match"][0]["met"]
