"""Progress of long loads: a rich progress bar on a terminal, a log line every tenth otherwise.

A service started by docker or a test harness has no terminal, and a bar redrawn into a log file
is noise; the periodic log lines say the same thing there.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("service.progress")


@contextmanager
def progress(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """Yields `advance(n)`; reports `description` done / total."""
    if sys.stderr.isatty() and total > 0:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=False
        ) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)
        return
    done = 0
    next_report = max(1, total // 10)

    def advance(n: int) -> None:
        nonlocal done, next_report
        done += n
        if done >= next_report or done >= total:
            log.info("%s: %d/%d", description, done, total)
            next_report = done + max(1, total // 10)

    yield advance
