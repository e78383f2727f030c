"""Progress of long loads: a rich progress bar on a terminal, a log line every tenth otherwise; both with the rate.

A service started by docker or a test harness has no terminal, and a bar redrawn into a log file
is noise; the periodic log lines say the same thing there. The rate (documents a second) is what a first start
over a large collection is judged by (a hybrid bundle's encoder sets it: docs/results/hybrid.md), so both say it.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("service.progress")


def _rate_column(unit: str) -> Any:
    """A rich column with the task's items a second (rich's own estimate over its recent steps)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(f"{task.speed:,.0f} {unit}/s" if task.speed else f"? {unit}/s")

    return RateColumn()


@contextmanager
def progress(description: str, total: int, unit: str = "documents") -> Iterator[Callable[[int], None]]:
    """Yields `advance(n)`; reports `description` done / total and `unit`s a second."""
    if sys.stderr.isatty() and total > 0:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _rate_column(unit))
        with Progress(*columns, TimeRemainingColumn(), transient=False) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)
        return
    done = 0
    next_report = max(1, total // 10)
    started = time.perf_counter()

    def advance(n: int) -> None:
        nonlocal done, next_report
        done += n
        if done >= next_report or done >= total:
            rate = done / max(time.perf_counter() - started, 1e-9)
            log.info("%s: %d/%d, %.1f %s/s", description, done, total, rate, unit)
            next_report = done + max(1, total // 10)

    yield advance
