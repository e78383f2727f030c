"""Run every scorer on one task, in one process, on the same queries: the evaluation table.

Queries are scored in blocks (memory ≈ block × n_docs floats per scorer) and each block's
metrics are computed at once, so the full [n_queries, n_docs] score matrix never exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from training.evaluate.metrics import MAP, METRICS, MetricSummary, block_metrics, quick_metrics, summarize
from training.evaluate.scorer import DEFAULT_BLOCK, Scorer
from training.evaluate.tasks import RetrievalTask

REFERENCE = "tfidf"
PAIRED = "bm25"  # the scorer every other one is compared with query by query: the classic one to beat


@dataclass
class ScorerResult:
    """One scorer's per-query values (in task query order) and their summaries."""

    name: str
    per_query: dict[str, np.ndarray]
    summary: dict[str, MetricSummary]
    params: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class EvalTable:
    """All scorers of one run on one task; `ratio` compares MAP to the reference (tf-idf)."""

    task: dict[str, Any]
    query_ids: tuple[str, ...]
    results: dict[str, ScorerResult]
    reference: str = REFERENCE
    notes: dict[str, Any] = field(default_factory=dict)

    def ratio(self, name: str, metric: str = MAP) -> float | None:
        """metric(name) / metric(reference), or None without a reference."""
        ref = self.results.get(self.reference)
        if ref is None or ref.summary[metric].mean == 0:
            return None
        return self.results[name].summary[metric].mean / ref.summary[metric].mean

    def paired_difference(self, name: str, other: str = PAIRED) -> MetricSummary | None:
        """The task's primary metric of `name` minus `other`'s, mean ± standard error of the per-query
        differences (None without `other`): both rank the same queries, so this error is the one that says
        whether a gap is real, smaller than either row's own error whenever the two rankers agree often."""
        base = self.results.get(other)
        if base is None or name == other:
            return None
        metric = self.task["primary_metric"]
        return summarize(self.results[name].per_query[metric] - base.per_query[metric])

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "reference": self.reference if self.reference in self.results else None,
            "scorers": {
                name: {
                    "params": result.params,
                    "seconds": round(result.seconds, 3),
                    "metrics": {m: _summary_json(s) for m, s in result.summary.items()},
                    "map_ratio_to_reference": self.ratio(name),
                    f"paired_difference_to_{PAIRED}": _summary_json(self.paired_difference(name)),
                }
                for name, result in self.results.items()
            },
            "notes": self.notes,
        }


def _summary_json(summary: MetricSummary | None) -> dict[str, float] | None:
    return None if summary is None else {"mean": summary.mean, "stderr": summary.stderr, "n": summary.n}


ProgressFn = Callable[[str, int, int], None]


def _blocks(n: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def score_task(
    task: RetrievalTask,
    scorer: Scorer,
    *,
    quick: bool = False,
    block_size: int = DEFAULT_BLOCK,
    progress: ProgressFn | None = None,
    name: str = "",
) -> dict[str, np.ndarray]:
    """Per-query metrics of one scorer: ranx-backed (`quick=False`) or numpy only (`quick=True`)."""
    if scorer.n_docs != task.n_docs:
        raise ValueError(f"scorer {name!r} ranks {scorer.n_docs} documents, the task has {task.n_docs}")
    measure = quick_metrics if quick else block_metrics
    parts: dict[str, list[np.ndarray]] = {m: [] for m in METRICS}
    relevant, excluded = task.relevant_matrix, task.excluded_matrix
    blocks = _blocks(task.n_queries, block_size)
    for done, (start, stop) in enumerate(blocks, start=1):
        scores = scorer.score(task.query_texts[start:stop])
        if scores.shape != (stop - start, task.n_docs):
            raise ValueError(f"scorer {name!r} returned {scores.shape}, expected {(stop - start, task.n_docs)}")
        values = measure(scores, relevant[start:stop], excluded[start:stop])
        for metric in METRICS:
            parts[metric].append(values[metric])
        if progress is not None:
            progress(name, done, len(blocks))
    return {m: np.concatenate(parts[m]) for m in METRICS}


def evaluate(
    task: RetrievalTask,
    scorers: Mapping[str, Scorer],
    *,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    block_size: int = DEFAULT_BLOCK,
    progress: ProgressFn | None = None,
    reference: str = REFERENCE,
) -> EvalTable:
    """Score `task` with every scorer; MAP, P@10, NDCG@10 (ranx) and rank loss, mean ± stderr."""
    results: dict[str, ScorerResult] = {}
    for name, scorer in scorers.items():
        started = time.perf_counter()
        per_query = score_task(task, scorer, block_size=block_size, progress=progress, name=name)
        seconds = time.perf_counter() - started
        knobs = dict(params.get(name, {})) if params else {}
        if not knobs and hasattr(scorer, "params"):
            knobs = dict(scorer.params())
        results[name] = ScorerResult(
            name=name,
            per_query=per_query,
            summary={m: summarize(v) for m, v in per_query.items()},
            params=knobs,
            seconds=seconds,
        )
    return EvalTable(task=task.describe(), query_ids=task.query_ids, results=results, reference=reference)
