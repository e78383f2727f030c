"""The one way a benchmark reports a ratio: three significant figures, so a small ratio is never rounded to 0."""

from __future__ import annotations


def ratio(numerator: float, denominator: float) -> float:
    """`numerator / denominator` to three significant figures (a zero denominator counts as 1e-9).

    Why not `round(x, 3)`: on a tiny corpus the FAISS scan floor runs 10,000 times faster than HTTP, and a fixed
    number of decimals printed that honest 0.0004 as 0.0.
    """
    return float(f"{numerator / max(denominator, 1e-9):.3g}")
