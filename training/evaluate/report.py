"""Render an evaluation table: rich on the terminal, JSON for machines, markdown for the README."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rich.table import Table

from training.evaluate.harness import PAIRED, EvalTable
from training.evaluate.metrics import LABELS, MAP, METRICS

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"


def _knobs(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items() if v is not None)


def _ratio(table: EvalTable, name: str) -> str:
    value = table.ratio(name)
    return "" if value is None else f"{value:.2f}×"


def _paired(table: EvalTable, name: str) -> str:
    value = table.paired_difference(name)
    return "" if value is None else f"{value.mean:+.4f} ± {value.stderr:.4f}"


def _paired_label(table: EvalTable) -> str:
    return f"Δ {LABELS[table.task['primary_metric']]} vs {PAIRED}"


def _title(table: EvalTable) -> str:
    task = table.task
    return (
        f"{task['name']}: {task['queries']} queries × {task['documents']} documents, "
        f"{task['relevant_per_query']:.2f} relevant and {task['excluded_per_query']:.1f} excluded per query"
    )


def rich_table(table: EvalTable) -> Table:
    """Mean ± standard error per metric, MAP relative to the reference, chosen knobs, time."""
    out = Table(title=_title(table), title_justify="left")
    out.add_column("scorer")
    for metric in METRICS:
        out.add_column(LABELS[metric], justify="right")
    out.add_column(f"MAP / {table.reference}", justify="right")
    out.add_column(_paired_label(table), justify="right")
    out.add_column("knobs")
    out.add_column("time", justify="right")
    for name, result in table.results.items():
        out.add_row(
            name,
            *(str(result.summary[m]) for m in METRICS),
            _ratio(table, name),
            _paired(table, name),
            _knobs(result.params),
            f"{result.seconds:.1f}s",
        )
    return out


def markdown_table(table: EvalTable) -> str:
    """The same table as GitHub markdown, with the task line above it."""
    header = ["scorer", *(LABELS[m] for m in METRICS), f"MAP / {table.reference}", _paired_label(table), "knobs"]
    lines = [f"**{_title(table)}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, result in table.results.items():
        cells = [
            name,
            *(str(result.summary[m]) for m in METRICS),
            _ratio(table, name),
            _paired(table, name),
            _knobs(result.params),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"Mean ± standard error over queries; {LABELS[MAP]} ratio against `{table.reference}` in the same run; "
        f"{_paired_label(table)}: mean ± standard error of the per-query differences (same queries, same run)."
    )
    return "\n".join(lines) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_reports(table: EvalTable, out_dir: Path, extra: dict[str, Any] | None = None) -> list[Path]:
    """results.json (everything, with `extra` such as tuning grids and timings) and results.md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = table.to_json()
    if extra:
        payload.update(extra)
    json_path, md_path = out_dir / RESULTS_JSON, out_dir / RESULTS_MD
    _atomic_write(json_path, json.dumps(payload, indent=2, default=str) + "\n")
    _atomic_write(md_path, markdown_table(table))
    return [json_path, md_path]
