"""Exact facets over shards: each shard lists its `size` most frequent values of a field, which summed are not the
cluster's (a value just below the cut on one shard would lose that shard's count, and a value listed by no shard
may still be among the cluster's most frequent). So the router merges in up to three rounds:

1. every shard's top values with their counts and the count of the rest (`other`), with the search;
2. the exact count of each value some shard listed, from each shard that did not list it and has values it left
   out (one `count_values` call per such shard, for every field at once);
3. only when a value no shard listed could still reach the top (its bound, the sum over the shards of the count
   of the last value each listed, is not below the merged top's last count): every count of every value from the
   shards that left some out.

The values listed and their counts are then the ones a single node holding every document would answer
(service.fields.facets: most frequent first, ties by value), and `other` is the total of all values' counts less
theirs, each shard's total being exact. The rounds read the shards at slightly different moments: a write between
them can make a count off by the documents it changed, as a search and its facets can on one node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.fields.facets import Facet, facet_order

# A shard's facet as it answers it (cluster.shard_server.ShardServer.search): its top values and the rest's count.
ShardFacet = Mapping[str, Any]  # {"values": [(value, count), ...], "other": int}
# A shard's exact counts: shard → field → values → [(value, count)] (None: every value it holds).
CountValues = Callable[[int, dict[str, list[Any] | None]], Awaitable[dict[str, list[tuple[Any, int]]]]]


@dataclass
class _Field:
    """One field's merge: every shard's listed counts, whether it left values out, the exact sums so far."""

    listed: list[dict[Any, int]]
    partial: list[bool]  # shard s left values out (other > 0): a value it did not list may still count there
    last: list[int]  # the count of the last value shard s listed first: one it left out counts at most as much
    total: int  # every value's count over every shard (a keyword list's document once per value)

    @classmethod
    def of(cls, facets: Sequence[ShardFacet]) -> _Field:
        listed = [{value: int(n) for value, n in facet["values"]} for facet in facets]
        partial = [int(facet["other"]) > 0 for facet in facets]
        total = sum(sum(counts.values()) + int(facet["other"]) for counts, facet in zip(listed, facets, strict=True))
        last = [min(counts.values(), default=0) for counts in listed]
        return cls(listed, partial, last, total)

    def candidates(self) -> list[Any]:
        return list(dict.fromkeys(value for counts in self.listed for value in counts))

    def missing(self, shard: int) -> list[Any]:
        """The candidates shard `shard` left out although it may hold them."""
        return [v for v in self.candidates() if v not in self.listed[shard]] if self.partial[shard] else []

    def unseen_bound(self) -> int:
        """At most how many documents hold a value that no shard listed: each shard's last listed count, summed."""
        return sum(last for last, part in zip(self.last, self.partial, strict=True) if part)

    def top(self, size: int) -> list[tuple[Any, int]]:
        exact: dict[Any, int] = {}
        for counts in self.listed:
            for value, n in counts.items():
                exact[value] = exact.get(value, 0) + n
        return sorted(((v, n) for v, n in exact.items() if n), key=facet_order)[:size]

    def exact_top(self, size: int) -> bool:
        """Whether the top `size` of the listed values (counted everywhere) is the cluster's: no unlisted value can
        reach it (strictly below its last count, so that no tie by value could put one before it either)."""
        bound = self.unseen_bound()
        if bound == 0:
            return True
        top = self.top(size)
        return len(top) == size and top[-1][1] > bound

    def facet(self, size: int) -> Facet:
        top = self.top(size)
        return Facet(top, self.total - sum(n for _, n in top))


async def merge_facets(
    per_shard: Sequence[Mapping[str, ShardFacet]], names: Sequence[str], size: int, count_values: CountValues
) -> dict[str, Facet]:
    """The cluster's facets of `names` from every shard's first answer (`per_shard[s][name]`), asking the shards
    for the counts they did not list (`count_values(shard, {field: values})`) as the module docstring says."""
    merged = {name: _Field.of([facets[name] for facets in per_shard]) for name in names}
    missing = {s: {name: field.missing(s) for name, field in merged.items()} for s in range(len(per_shard))}
    await _fill(
        merged, {s: {name: values for name, values in m.items() if values} for s, m in missing.items()}, count_values
    )
    every: dict[int, dict[str, list[Any] | None]] = {}
    for name, field in merged.items():
        if not field.exact_top(size):
            for s, part in enumerate(field.partial):
                if part:
                    every.setdefault(s, {})[name] = None
    await _fill(merged, every, count_values)
    return {name: field.facet(size) for name, field in merged.items()}


async def _fill(
    merged: dict[str, _Field], asks: Mapping[int, dict[str, list[Any] | None]], count_values: CountValues
) -> None:
    """Ask each shard of `asks` for its exact counts and take them in (the shard's counts are then complete for
    the values asked; with None, for every value, and it leaves nothing out any more)."""
    asked = [(s, wanted) for s, wanted in asks.items() if wanted]
    replies = await asyncio.gather(*(count_values(s, wanted) for s, wanted in asked))
    for (s, wanted), counted in zip(asked, replies, strict=True):
        for name, pairs in counted.items():
            field = merged[name]
            field.listed[s].update({value: int(n) for value, n in pairs})
            if wanted[name] is None:
                field.partial[s] = False
