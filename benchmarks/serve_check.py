"""The serving must-shows of issue 36, read from the two `ssi bench` reports that scripts/serve_check.sh writes.

- `/search`: throughput at `--search-clients` over the FAISS one-query scan floor with as many scanning threads
  as the server has cores (the bench's `flat_<n>c_qps_over_scan_qps`: the floor is measured in the same run,
  on the same vectors, with `workers × threads` threads), at least SEARCH_FLOOR_SHARE;
- `/match`: p99 at `--match-clients` for the report's page size and advert count, at most MATCH_P99_MS.

A script reads these figures rather than a person reading JSON, so a run on a lent machine ends with the
lines to report (and the same JSON, `summary.json`), whatever the machine.

    python -m benchmarks.serve_check --search OUT/search.json --match OUT/match.json --out OUT/summary.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

SEARCH_FLOOR_SHARE = 0.8  # /search q/s at least this share of the one-query scan floor × cores
MATCH_P99_MS = 200.0  # /match p99 at most this many ms


def search_figures(report: dict[str, Any], clients: int) -> dict[str, Any]:
    """/search at `clients`: q/s, p50/p99, the scan floor it is set against, and their ratio."""
    level = report["flat"]["load"][str(clients)]
    floor = report["scan_floor"]
    share = level["throughput_qps"] / max(floor["throughput_qps"], 1e-9)
    setup = report["setup"]
    return {
        "clients": clients,
        "workers": setup["service_workers"],
        "threads": setup["service_threads"],
        "qps": level["throughput_qps"],
        "p50_ms": level["p50_ms"],
        "p99_ms": level["p99_ms"],
        "errors": level["errors"],
        "generator": level.get("generator"),
        "floor_qps": floor["throughput_qps"],
        "floor_threads": floor["threads"],
        "floor_p50_ms": floor["p50_ms"],
        "share_of_floor": round(share, 3),
        "met": share >= SEARCH_FLOOR_SHARE,
    }


def match_figures(report: dict[str, Any], clients: int) -> list[dict[str, Any]]:
    """/match at `clients` for every advert count and page size of the report (flat index)."""
    found = []
    for ads, served in report["ads"].items():
        for kb, size in served["flat"]["sizes"].items():
            level = size["load"][str(clients)]
            found.append({
                "ads": int(ads),
                "page_kb": int(kb),
                "clients": clients,
                "workers": report["setup"]["service_workers"],
                "threads": report["setup"]["service_threads"],
                "p50_ms": level["p50_ms"],
                "p99_ms": level["p99_ms"],
                "matches_per_s": level["throughput_qps"],
                "errors": level["errors"],
                "generator": level.get("generator"),
                "met": level["p99_ms"] <= MATCH_P99_MS and level["errors"] == 0,
            })  # fmt: skip
    return found


def summary_lines(search: dict[str, Any] | None, match: list[dict[str, Any]]) -> list[str]:
    """One line a must-show, with the figures behind it."""
    lines = []
    if search is not None:
        lines.append(
            f"/search {search['clients']} clients, {search['workers']} workers x {search['threads']} thread(s): "
            f"{search['qps']:.0f} q/s (p50 {search['p50_ms']:.1f} ms, p99 {search['p99_ms']:.1f} ms, "
            f"{search['errors']} errors, {search['generator']}) = {search['share_of_floor']:.3f} of the scan floor "
            f"{search['floor_qps']:.0f} q/s ({search['floor_threads']} threads): "
            f"{'MET' if search['met'] else 'NOT MET'} (>= {SEARCH_FLOOR_SHARE})"
        )
    for m in match:
        lines.append(
            f"/match {m['ads']} adverts, {m['page_kb']} kB pages, {m['clients']} clients, {m['workers']} workers x "
            f"{m['threads']} thread(s): p50 {m['p50_ms']:.1f} ms, p99 {m['p99_ms']:.1f} ms, "
            f"{m['matches_per_s']:.0f} matches/s, {m['errors']} errors ({m['generator']}): "
            f"{'MET' if m['met'] else 'NOT MET'} (p99 <= {MATCH_P99_MS:g} ms)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--search", type=Path, help="ssi bench's report of /search (flat)")
    parser.add_argument("--match", type=Path, help="ssi bench --scenario match's report")
    parser.add_argument("--search-clients", type=int, default=128)
    parser.add_argument("--match-clients", type=int, default=32)
    parser.add_argument("--out", type=Path, help="the figures as JSON")
    args = parser.parse_args(argv)
    search = None
    if args.search is not None and args.search.is_file():
        search = search_figures(json.loads(args.search.read_text(encoding="utf-8")), args.search_clients)
    match = []
    if args.match is not None and args.match.is_file():
        match = match_figures(json.loads(args.match.read_text(encoding="utf-8")), args.match_clients)
    for line in summary_lines(search, match) or ["no report to read"]:
        print(line)
    if args.out is not None:
        args.out.write_text(json.dumps({"search": search, "match": match}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
