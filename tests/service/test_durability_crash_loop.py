"""The crash loop, short: three SIGKILLs of the real server during write bursts, clicks and a start-up
(scripts/crash-loop.sh runs 50+), served by one process and by a group of two workers (whose writes reach each
other through the store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.crash_loop import Config, make_world, run_crash_loop


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_loop_loses_nothing_acknowledged_and_keeps_the_ranking_exact(tmp_path: Path, workers: int) -> None:
    """Each distinct kill once or more: two kills in a burst of writes, searches and clicks (snapshots every 25
    writes and eager compaction, so they land among snapshot writes, log trims and compactions), each followed by
    a restart that reloads its index and a check of every acknowledged write, and a kill of a server that is still
    loading (the first round's restart is killed too: `kill_while_loading=1.0`; at the loop's default of 15 % a
    five-kill run had it only about half the time). Three kills, not the five of before: the two further rounds
    of writes repeated what these check.

    Slow: three SIGKILLs of a real server, and three restarts that each reload the index and are checked."""
    config = Config(
        work_dir=tmp_path, kills=3, writers=3, documents=600, burst_min=0.6, burst_max=1.2, seed=1, workers=workers,
        kill_while_loading=1.0,
    )  # fmt: skip
    docs, corpus, bundle = make_world(tmp_path / "world", config.documents, config.seed)
    lines: list[str] = []
    result = run_crash_loop(config, docs=docs, corpus=corpus, bundle=bundle, log=lines.append)
    summary = result.summary()
    assert summary["kills"] == 3 and summary["kills_while_loading"] == 1, lines
    assert summary["acknowledged_puts"] > 50 and summary["acknowledged_deletes"] > 5, summary
    assert summary["acknowledged_clicks"] > 5, summary  # each checked in the traffic log after every restart
    assert len(result.rounds) == 2, (summary, lines)
    print(summary)
