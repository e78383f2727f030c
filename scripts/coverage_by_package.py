"""Line and branch coverage summed by top-level package, from a `coverage json` report.

    python scripts/coverage_by_package.py coverage.json

coverage.py reports file by file; the test budget (docs/contributing.md) is kept package by package, so this sums
the report's own counts per package (`ssi`, `service`, ...) and prints one line each, plus the total.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

COUNTS = ("num_statements", "covered_lines", "num_branches", "covered_branches")


def by_package(report: dict) -> dict[str, dict[str, int]]:
    sums: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COUNTS, 0))
    for path, measured in report["files"].items():
        package = Path(path).parts[0]
        for name in COUNTS:
            sums[package][name] += measured["summary"][name]
    return dict(sorted(sums.items()))


def percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 100.0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    report = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    sums = by_package(report)
    sums["TOTAL"] = {name: sum(package[name] for package in sums.values()) for name in COUNTS}
    print(f"{'package':<10} {'lines':>7} {'covered':>8} {'line %':>7} {'branches':>9} {'covered':>8} {'branch %':>9}")
    for package, n in sums.items():
        print(
            f"{package:<10} {n['num_statements']:>7} {n['covered_lines']:>8} "
            f"{percent(n['covered_lines'], n['num_statements']):>7.2f} {n['num_branches']:>9} "
            f"{n['covered_branches']:>8} {percent(n['covered_branches'], n['num_branches']):>9.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
