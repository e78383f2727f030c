"""Choosing the baselines' knobs (LSI k, α, feedback parameters, BM25 k1/b) on the split given.

The split evaluated is the validation split (DESIGN.md: tune on validation only), so every
baseline gets its best setting from a small grid on (a fixed-seed sample of) the same queries,
judged by the task's primary metric (MAP for link tasks, NDCG@10 for BEIR) on the numpy path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from training.evaluate.baselines import BASELINES, BaselineContext
from training.evaluate.harness import score_task
from training.evaluate.scorer import Scorer
from training.evaluate.tasks import RetrievalTask


@dataclass
class TuningResult:
    """The chosen knobs of one baseline and the score of every grid point."""

    name: str
    chosen: dict[str, Any]
    metric: str
    n_queries: int
    grid: list[tuple[dict[str, Any], float]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "metric": self.metric,
            "queries": self.n_queries,
            "grid": [{"params": p, "value": v} for p, v in self.grid],
            "seconds": round(self.seconds, 3),
        }


def build_baseline(
    name: str,
    ctx: BaselineContext,
    *,
    tune_on: RetrievalTask | None = None,
) -> tuple[Scorer, TuningResult]:
    """The baseline with its default knobs, or with the grid point best on `tune_on`."""
    spec = BASELINES[name]
    started = time.perf_counter()
    grid = spec.grid(ctx) if tune_on is not None else []
    if tune_on is None or len(grid) <= 1:
        chosen = grid[0] if grid else spec.defaults(ctx)
        result = TuningResult(name, chosen, "", 0, seconds=time.perf_counter() - started)
        return spec.build(ctx, chosen), result
    metric = tune_on.primary_metric
    scored: list[tuple[dict[str, Any], float]] = []
    best: tuple[float, dict[str, Any], Scorer] | None = None
    for params in grid:
        scorer = spec.build(ctx, params)
        value = float(score_task(tune_on, scorer, quick=True, block_size=ctx.block_size, name=name)[metric].mean())
        scored.append((params, value))
        if best is None or value > best[0]:  # ties keep the earlier (simpler) grid point
            best = (value, params, scorer)
    assert best is not None
    result = TuningResult(name, best[1], metric, tune_on.n_queries, scored, time.perf_counter() - started)
    return best[2], result
