"""Facets: for a keyword field, its most frequent values over every document matching the filter, with counts.

Counted over the whole matching set, not over the top k (Elasticsearch's kNN aggregations see only the top k):
one roaring intersection count per value of the field (`BitMap.intersection_cardinality`), the bitmaps already
there for the filters (ssi.fields.index). At most `size` values are returned, most frequent first (ties by
value); `other` counts the documents' values beyond them (a keyword list's document counts once per value).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyroaring import BitMap

from service.errors import InvalidInput
from ssi.fields.index import FieldIndex
from ssi.fields.schema import KEYWORD_TYPES


@dataclass(frozen=True, slots=True)
class Facet:
    values: list[tuple[Any, int]]  # (value, documents), most first
    other: int  # the counts of the values left out, summed


def check_facets(names: list[str], types: dict[str, str], max_facets: int) -> None:
    """The fields a request wants faceted: known keyword, keyword-list or boolean fields, at most `max_facets`."""
    if len(names) > max_facets:
        raise InvalidInput(f"facets: at most {max_facets} fields (got {len(names)})")
    for name in names:
        field_type = types.get(name)
        if field_type is None:
            raise InvalidInput(f"facets: unknown field {str(name)[:70]!r}")
        if field_type not in KEYWORD_TYPES:
            raise InvalidInput(f"facets: '{name}' is a {field_type} field; facets count keyword and boolean fields")


def facet_order(pair: tuple[Any, int]) -> tuple[int, str]:
    """The order of a facet's values: most frequent first, ties by the value as text (a cluster's router merges
    its shards' facets in the same order: cluster.facet_merge)."""
    return -pair[1], str(pair[0])


def facet(index: FieldIndex, name: str, matching: BitMap | None, size: int) -> Facet:
    """The `size` most frequent values of field `name` among the rows `matching` (live rows only; None: every live
    row)."""
    counts = value_counts(index, name, matching, None)
    counts.sort(key=facet_order)
    return Facet(counts[:size], sum(n for _, n in counts[size:]))


def value_counts(
    index: FieldIndex, name: str, matching: BitMap | None, values: Sequence[Any] | None
) -> list[tuple[Any, int]]:
    """How many of the rows `matching` hold each of `values` of field `name` (0 for a value no row has; None: every
    value some row holds): the exact counts a cluster's router asks a shard for (cluster.facet_merge).

    `matching` None: every live row, a value's count its bitmap's less its dead rows (a row dies into `dead` and
    nowhere else: ssi.fields.index), without a bitmap of every live row to intersect (facets without a filter: over
    a million rows that bitmap took 4 ms to make, and each intersection walked it)."""
    by_value = index.keywords.get(name, {})
    dead = index.dead

    def count(bits: BitMap) -> int:
        if matching is not None:
            return matching.intersection_cardinality(bits)
        return len(bits) - (bits.intersection_cardinality(dead) if dead else 0)

    if values is None:
        counts = ((value, count(bits)) for value, bits in by_value.items())
        return [(value, n) for value, n in counts if n]
    return [(v, count(by_value[v]) if v in by_value else 0) for v in values]
