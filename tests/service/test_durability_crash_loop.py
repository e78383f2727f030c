"""The crash loop, short: three SIGKILLs of the real server (two during bursts of writes and clicks, one while the
next start loads; scripts/crash-loop.sh runs 50+), served by one process and by a group of two workers (whose writes
reach each other through the store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.crash_loop import Config, make_world, run_crash_loop


@pytest.mark.parametrize("workers", [1, 2])
def test_sigkill_loop_loses_nothing_acknowledged_and_keeps_the_ranking_exact(tmp_path: Path, workers: int) -> None:
    """Each burst ends after a random number (30-60) of acknowledged puts and at least one delete and one click, so a
    loaded machine writes as much before a kill as an idle one. The first burst's kill is followed by another while
    the next start loads (kill_while_loading=1.0); the second burst's kill hits a server that had recovered from both.
    Compaction at 1 % dead rows, so that every burst's replaced and deleted documents compact the index online or on
    load (at 3 %, a round of some 35 puts fell short of it now and then).

    Slow: three SIGKILLs of a real server, each burst's followed by a restart that reloads its index and a check of
    every acknowledged write."""
    config = Config(
        work_dir=tmp_path,
        kills=3,
        writers=3,
        documents=600,
        burst_min_writes=30,
        burst_max_writes=60,
        kill_while_loading=1.0,
        compact_dead_fraction=0.01,
        seed=1,
        workers=workers,
    )
    docs, corpus, bundle = make_world(tmp_path / "world", config.documents, config.seed)
    lines: list[str] = []
    result = run_crash_loop(config, docs=docs, corpus=corpus, bundle=bundle, log=lines.append)
    summary = result.summary()
    assert summary["kills"] == 3 and summary["kills_while_loading"] == 1, lines
    assert len(result.rounds) == 2, lines
    for round_ in result.rounds:  # what a burst waits for before its kill: all of it checked after the restart
        assert round_.acked_puts >= config.burst_min_writes, (round_, lines)
        assert round_.acked_deletes >= 1 and round_.acked_clicks >= 1, (round_, lines)
    assert summary["online_compactions"] + summary["compactions_on_load"] >= 1, summary
