"""Facets: for a keyword field, its most frequent values over every document matching the filter, with counts.

Counted over the whole matching set, not over the top k (Elasticsearch's kNN aggregations see only the top k):
one roaring intersection count per value of the field (`BitMap.intersection_cardinality`), the bitmaps already
there for the filters (ssi.fields.index). At most `size` values are returned, most frequent first (ties by
value); `other` counts the documents' values beyond them (a keyword list's document counts once per value).
"""

from __future__ import annotations

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


def facet(index: FieldIndex, name: str, matching: BitMap, size: int) -> Facet:
    """The `size` most frequent values of field `name` among the rows `matching` (live rows only)."""
    counts = [(value, matching.intersection_cardinality(bits)) for value, bits in index.keywords.get(name, {}).items()]
    counts = [(value, n) for value, n in counts if n]
    counts.sort(key=lambda pair: (-pair[1], str(pair[0])))
    return Facet(counts[:size], sum(n for _, n in counts[size:]))
