"""service.topk's pass over every row: blocks skipped by a vector test give what the row-by-row pass gives."""

from __future__ import annotations

import numpy as np
import pytest

from service import topk


def _case(seed: int, rows: int) -> dict:
    """Scores like a flat scan's (a few rows far above the rest, some lexical hits), dead rows, ties."""
    rng = np.random.default_rng(seed)
    semantic = (rng.standard_normal(rows) * 0.1).astype(np.float32)
    semantic[rng.integers(0, rows, 3)] += 2.0
    semantic[rng.integers(0, rows, 5)] = semantic[0]  # ties
    lexical = np.where(rng.random(rows) < 0.05, rng.exponential(0.5, rows), 0.0)
    live = rng.random(rows) < 0.9
    radius = (rng.random(rows) * 0.01).astype(np.float32)
    l1 = (rng.random(rows) * 5).astype(np.float32)
    return {"semantic": semantic, "lexical": lexical, "live": live, "radius": radius, "l1": l1}


def _exact_top(case: dict, want: int, factor: float, l1_factor: float, below: float, above: float) -> set[int]:
    """The live rows whose upper end reaches the `want`-th best lower end: what no pass may leave out."""
    f = case["semantic"].astype(np.float64) + case["lexical"]
    r = factor * case["radius"].astype(np.float64) + l1_factor * case["l1"].astype(np.float64)
    live = np.flatnonzero(case["live"])
    if live.shape[0] < want:
        return set(live.tolist())
    cut = np.sort((f - r + below)[live])[-want]
    return set(live[(f + r + above)[live] >= cut].tolist())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("block", [1, 7, topk.BLOCK_ROWS, 1000])
@pytest.mark.parametrize("bounds", ["none", "radius", "l1", "both"])
def test_blocks_give_the_row_by_row_result(seed: int, block: int, bounds: str) -> None:
    rows = 3_000
    case = _case(seed, rows)
    want = [1, 10, 50][seed % 3]
    factor = 0.5 if bounds in ("radius", "both") else 0.0
    l1_factor = 0.002 if bounds in ("l1", "both") else 0.0
    radius = case["radius"] if bounds in ("radius", "both") else None
    l1 = case["l1"] if bounds in ("l1", "both") else None
    below, above = (-0.05, 0.1) if seed % 2 else (0.0, 0.0)
    args = (case["semantic"], case["lexical"], case["live"], want, 1e-4, radius, factor, below, above, l1, l1_factor)
    whole = topk.best(*args, block=rows)
    blocked = topk.best(*args, block=block)
    assert whole[2] == blocked[2]
    np.testing.assert_array_equal(blocked[0], whole[0])
    np.testing.assert_array_equal(blocked[1], whole[1])
    assert _exact_top(case, want, factor, l1_factor, below, above) <= set(blocked[0].tolist())
    assert case["live"][blocked[0]].all()


def test_fewer_live_rows_than_wanted_and_nan_scores() -> None:
    """With fewer live rows than `want` every live row comes back and the cut is −inf; a NaN score is never
    skipped by the vector test (it is kept as the row pass keeps it)."""
    case = _case(9, 1_000)
    live = np.zeros(1_000, dtype=bool)
    live[[3, 500, 999]] = True
    rows, _, cut = topk.best(case["semantic"], case["lexical"], live, 5, 1e-4)
    assert cut == -np.inf and rows.tolist() == [3, 500, 999]
    semantic = case["semantic"].copy()
    semantic[700] = np.nan
    args = (semantic, case["lexical"], case["live"], 10, 1e-4)
    whole, blocked = topk.best(*args, block=1_000), topk.best(*args)
    assert whole[2] == blocked[2] and 700 in whole[0].tolist()
    np.testing.assert_array_equal(blocked[0], whole[0])
