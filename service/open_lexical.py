"""The lexical term of a query with new words (ssi.open_vocab): the bundle words' term plus o(q, d).

`OpenLexicalQuery` wraps a `service.lexical.LexicalQuery` and adds, for the few rows holding one of the query's
new words, o(q, d) ≥ 0 (ssi.open_vocab computes it: the one home of the rule). A query with no new word a live
document holds is never wrapped, so its path (and its cost) is exactly the closed vocabulary's.

Every bound service.rerank relies on still holds: o ≥ 0, so `nonnegative` is the wrapped term's; `max_gain`
grows by the most o can be; `above(θ)` lists every row with l⁺ + o > θ: a row with o = 0 is in the wrapped
`above(θ)`, and every row with o > 0 is added with its exact l.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from service.lexical import LexicalQuery, RareSum
from ssi.open_vocab import OpenPostings


class OpenLexicalQuery:
    """l(d) + o(d) of one query: `rows` (each once, in no order) hold o > 0, `values` their o."""

    def __init__(self, inner: LexicalQuery, rows: np.ndarray, values: np.ndarray, bound: float) -> None:
        self.inner = inner
        self.rows = rows
        self.values = values
        self.nonnegative = inner.nonnegative
        self.max_gain = inner.max_gain + bound
        # `rows` sorted and their o, made on the first lookup (`_open_of`): a flat index's every-row sum only adds o
        # (`everywhere_but_common`), and sorting for it first took ~20 µs of a /match right after another page's.
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # What each search asks to choose its path (service.rerank.prefers_dense), forwarded here rather than through
    # `__getattr__`, whose failed lookup first took ~4 µs an attribute right after another query's ranking.
    def dense_cost_ns(self) -> float:
        return self.inner.dense_cost_ns()

    def every_row_cost_ns(self) -> float:
        return self.inner.every_row_cost_ns()

    def lookup_cost_ns(self, rows: int) -> float:
        return self.inner.lookup_cost_ns(rows)

    def _open_of(self, rows: np.ndarray) -> np.ndarray:
        if not self.rows.shape[0]:  # a shard holding none of the query's new words (cluster.fanout)
            return np.zeros(rows.shape[0], dtype=np.float64)
        if self._sorted is None:
            order = np.argsort(self.rows)
            self._sorted = (self.rows[order], self.values[order])
        held, values = self._sorted
        at = np.minimum(np.searchsorted(held, rows), held.shape[0] - 1)
        return np.where(held[at] == rows, values[at], 0.0)

    def for_rows(
        self, rows: np.ndarray, words: np.ndarray | None = None, base_only: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        lexical, upper = self.inner.for_rows(rows, words, base_only)
        if words is not None or base_only:  # a part of the bundle words' term, asked by the pruning itself
            return lexical, upper
        extra = self._open_of(np.asarray(rows, dtype=np.int64))
        return lexical + extra, upper + extra

    def above(self, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows, lexical, upper = self.inner.above(threshold)
        missing = np.setdiff1d(self.rows, rows, assume_unique=True)
        if missing.shape[0]:
            more_lexical, more_upper = self.inner.for_rows(missing)
            rows = np.concatenate([rows, missing])
            lexical = np.concatenate([lexical, more_lexical])
            upper = np.concatenate([upper, more_upper])
            order = np.argsort(rows, kind="stable")
            rows, lexical, upper = rows[order], lexical[order], upper[order]
        extra = self._open_of(rows) if rows.shape[0] else np.zeros(0, dtype=np.float64)
        return rows, lexical + extra, upper + extra

    def everywhere(self) -> np.ndarray:
        # The wrapped term sums a new array at each call, so o is added into it (a copy of every row's l cost
        # 0.1 ms of a /match).
        out = self.inner.everywhere()
        out[self.rows] += self.values
        return out

    def everywhere_but_common(self) -> RareSum:
        summed = self.inner.everywhere_but_common()  # a new RareSum with a new array, as `everywhere`
        summed.summed[self.rows] += self.values
        return summed


def with_open(
    query: LexicalQuery, postings: OpenPostings, weights: Mapping[str, float]
) -> LexicalQuery | OpenLexicalQuery:
    """`query` with the open term of its new words weighed `weights` (OpenRule.query_weights, by the collection's own
    counts or a sharded collection's) added, or `query` itself where it has none. `postings` may hold none of them
    (a shard): the term is then 0 on every row here, but the query is ranked as one whose open term is not, as on
    one node."""
    if not weights:
        return query
    rows, values, bound = postings.scores(weights)
    return OpenLexicalQuery(query, rows, values, bound)
