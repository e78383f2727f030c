"""The label-free fusions benchmarks.hybrid_weight --variants compares: windows, MaxP, reciprocal rank, min-max."""

from __future__ import annotations

import numpy as np

from benchmarks.hybrid_weight import (
    WINDOW_STEP,
    WINDOW_WORDS,
    _best_per_document,
    _min_max,
    _reciprocal_rank,
    _windows,
)
from ssi.records import Document


def test_windows_cover_the_body_in_order_each_behind_the_title() -> None:
    body = [f"w{i}" for i in range(231)]
    windows = _windows(Document("d", "A title", " ".join(body)))
    assert all(w.startswith("A title\n") for w in windows)
    parts = [w.split("\n", 1)[1].split() for w in windows]
    assert all(len(p) <= WINDOW_WORDS for p in parts)
    assert parts[0][0] == "w0" and parts[-1][-1] == "w230"
    for before, after in zip(parts, parts[1:], strict=False):  # consecutive windows overlap, nothing skipped
        assert after[0] == f"w{int(before[0][1:]) + WINDOW_STEP}"
        assert int(after[0][1:]) <= int(before[-1][1:])
    assert _windows(Document("s", "", "just four short words")) == ["just four short words"]


def test_best_per_document_is_the_largest_of_its_windows() -> None:
    rng = np.random.default_rng(0)
    owner = np.array([0, 0, 1, 2, 2, 2])
    cosines = rng.standard_normal((4, owner.size)).astype(np.float32)
    best = _best_per_document(cosines, owner, 3)
    expected = np.stack([cosines[:, owner == j].max(axis=1) for j in range(3)], axis=1)
    np.testing.assert_array_equal(best, expected)


def test_reciprocal_rank_and_min_max_fuse_by_rank_and_by_range() -> None:
    a = np.array([[3.0, 2.0, 1.0]])
    b = np.array([[10.0, 30.0, 20.0]])
    fused = _reciprocal_rank(a, b)
    np.testing.assert_allclose(fused, [[1 / 61 + 1 / 63, 1 / 62 + 1 / 61, 1 / 63 + 1 / 62]])
    np.testing.assert_allclose(_min_max(b), [[0.0, 1.0, 0.5]])
