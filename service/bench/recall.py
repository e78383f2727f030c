"""The one recall@k of the benchmarks: the share of the exact top k that an answer holds, ties counted as found."""

from __future__ import annotations

import numpy as np

Ranking = list[tuple[str, float]]  # (id, score), best first


def recall(found: list[Ranking], exact: list[Ranking]) -> float:
    """Mean over queries of the share of the exact top k found in the answer's first k.

    A hit scoring at least the exact k-th score counts as found even under another id: every answer carries its
    exact score (the rerank is exact whatever the index), so such a hit belongs to a correct top k, and with ties
    (generated documents repeat; adverts share words) comparing ids alone would count a correct answer as a miss.
    Queries whose exact answer is empty have nothing to miss and are left out; none left: 1.0.
    """
    shares = []
    for got, want in zip(found, exact, strict=True):
        if not want:
            continue
        kth = want[-1][1]
        wanted = {doc_id for doc_id, _ in want}
        tie = kth - 1e-6 * (1 + abs(kth))
        shares.append(sum(1 for doc_id, score in got[: len(want)] if doc_id in wanted or score >= tie) / len(want))
    return float(np.mean(shares)) if shares else 1.0
