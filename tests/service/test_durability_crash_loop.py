"""The crash loop, short: five SIGKILLs of the real server during write bursts and clicks (scripts/crash-loop.sh
runs 50+), served by one process and by a group of two workers (whose writes reach each other through the store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.crash_loop import Config, make_world, run_crash_loop


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_loop_loses_nothing_acknowledged_and_keeps_the_ranking_exact(tmp_path: Path, workers: int) -> None:
    """Slow: five SIGKILLs of a real server, each followed by a restart that reloads its index and a check of every
    acknowledged write."""
    config = Config(
        work_dir=tmp_path, kills=5, writers=3, documents=600, burst_min=0.3, burst_max=1.0, seed=1, workers=workers
    )
    docs, corpus, bundle = make_world(tmp_path / "world", config.documents, config.seed)
    lines: list[str] = []
    result = run_crash_loop(config, docs=docs, corpus=corpus, bundle=bundle, log=lines.append)
    summary = result.summary()
    assert summary["kills"] >= 5, lines
    assert summary["acknowledged_puts"] > 50 and summary["acknowledged_deletes"] > 5, summary
    assert summary["acknowledged_clicks"] > 5, summary  # each checked in the traffic log after every restart
    assert len(result.rounds) >= 3
