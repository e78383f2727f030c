"""The EM kinds' outer loop: iterate, show progress, record the objective per iteration.

Every EM kind (topic models, IBM model 1) has a `step(state) -> (new state, objective of state)`;
this loop runs `iterations` of them under a rich progress bar like the SGD trainer's, and writes
one history row per iteration (`step`, `seconds`, `log_likelihood`) that `training.history_plot`
draws beside the bundle. Row t holds the objective after t iterations (row 0: the start), so the
last row costs one more E-step, whose counts are dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

State = TypeVar("State")


def run_em(
    step: Callable[[State], tuple[State, float]],
    state: State,
    iterations: int,
    *,
    label: str,
    show_progress: bool = True,
    max_seconds: float | None = None,
) -> tuple[State, list[dict[str, float]], float]:
    """(the state after `iterations` EM steps, the history rows, the seconds they took).

    `max_seconds` (`--max-minutes`) is the budget the SGD kinds get too: no new iteration starts after it.
    """
    history: list[dict[str, float]] = []
    columns = (
        TextColumn(f"[bold]{label}[/]"),
        BarColumn(),
        TextColumn("iteration {task.completed:.0f}/{task.total:.0f} · log-likelihood/token {task.fields[ll]}"),
        TimeElapsedColumn(),
    )
    start = time.perf_counter()
    with Progress(*columns, disable=not show_progress, transient=False) as progress:
        task = progress.add_task("em", total=iterations, ll="—")
        for iteration in range(iterations + 1):
            out_of_time = max_seconds is not None and time.perf_counter() - start >= max_seconds
            if iteration < iterations and not out_of_time:
                new_state, objective = step(state)
            else:
                _, objective = step(state)  # the final state's objective; its counts are not used
                new_state = state
            history.append({"step": iteration, "seconds": time.perf_counter() - start, "log_likelihood": objective})
            progress.update(task, completed=min(iteration + 1, iterations), ll=f"{objective:.4f}")
            state = new_state
            if out_of_time:
                break
    return state, history, time.perf_counter() - start
