"""The filter language of `/search`: parsed and checked against the collection's fields, then evaluated to the
set of matching rows from the field index (ssi.fields.index), never by reading the documents.

    {"term":   {"category": "books"}}                one value (of a keyword, keyword list, boolean, number, date)
    {"terms":  {"category": ["books", "music"]}}     any of these values
    {"range":  {"price": {"gte": 10, "lt": 20}}}     gt / gte / lt / lte on an integer, float or date field
    {"exists": {"field": "price"}}                   the document has the field (a non-empty list for a list)
    {"and": [F, ...]}, {"or": [F, ...]}, {"not": F}   combined

A filter's size is bounded (`FilterBounds`: clauses, values of `terms` in all, nesting depth; settings beside the
other request bounds, service.settings); past a bound, or on an unknown operator or field or a value of the wrong
type, it is a `FieldError` that says which (a 422 from the service).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pyroaring import BitMap

from ssi.fields.errors import FieldError
from ssi.fields.filter_form import KEY_FILTER_DEPTH, check_filter_form, exists_field
from ssi.fields.index import FieldIndex, ordered_value
from ssi.fields.schema import KEYWORD_TYPES, ORDERED_TYPES, fits, type_of


@dataclass(frozen=True, slots=True)
class FilterBounds:
    max_clauses: int
    max_terms: int
    max_depth: int


@dataclass(frozen=True, slots=True)
class Term:
    field: str
    values: tuple[Any, ...]  # any of them (`term`: one)


@dataclass(frozen=True, slots=True)
class Range:
    field: str
    low: float | int | None
    low_open: bool
    high: float | int | None
    high_open: bool


@dataclass(frozen=True, slots=True)
class Exists:
    field: str


@dataclass(frozen=True, slots=True)
class Bool:
    op: str  # "and", "or", "not" (one clause)
    clauses: tuple[Clause, ...]


Clause = Term | Range | Exists | Bool

# Bounds for filters that no client sends: a read key's (the operator's, service.fields.visibility), a query set's
# (`ssi rank`, `ssi eval`) and `ssi.load`'s (the caller's own process); only against mistakes, far above a request's.
WIDE_BOUNDS = FilterBounds(max_clauses=10_000, max_terms=1_000_000, max_depth=KEY_FILTER_DEPTH)


class _Parser:
    def __init__(self, types: dict[str, str], bounds: FilterBounds) -> None:
        self.types = types
        self.bounds = bounds
        self.clauses = 0
        self.terms = 0

    def clause(self, node: dict[str, Any], where: str) -> Clause:
        """`node` has the form of a filter already (check_filter_form); here: the bounds, the fields, the types."""
        self.clauses += 1
        if self.clauses > self.bounds.max_clauses:
            raise FieldError(f"{where}: a filter holds at most {self.bounds.max_clauses} clauses")
        ((op, body),) = node.items()
        if op in ("and", "or"):
            return Bool(op, tuple(self.clause(c, f"{where}.{op}[{i}]") for i, c in enumerate(body)))
        if op == "not":
            return Bool("not", (self.clause(body, f"{where}.not"),))
        if op == "exists":
            return Exists(self.field(exists_field(body), f"{where}.exists"))
        ((name, value),) = body.items()
        name = self.field(name, f"{where}.{op}")
        at = f"{where}.{op}.{name}"
        if op == "range":
            return self.range(name, value, at)
        values = value if op == "terms" else [value]
        self.terms += len(values)
        if self.terms > self.bounds.max_terms:
            raise FieldError(f"{at}: a filter holds at most {self.bounds.max_terms} values in all")
        field_type = self.types[name]
        value_type = "keyword" if field_type == "keyword_list" else field_type
        fitted = []
        for item in values:
            got = fits(value_type, item)
            if got is None:
                raise FieldError(f"{at}: field '{name}' has type {field_type}, was given {type_of(item)}")
            fitted.append(got)
        if field_type in ORDERED_TYPES:  # a number or a date: equality is a closed range
            ranges = [Range(name, v, False, v, False) for v in (ordered_value(field_type, x) for x in fitted)]
            return ranges[0] if len(ranges) == 1 else Bool("or", tuple(ranges))
        return Term(name, tuple(dict.fromkeys(fitted)))

    def field(self, name: Any, where: str) -> str:
        if not isinstance(name, str):
            raise FieldError(f"{where}: a field name")
        if name not in self.types:
            known = ", ".join(sorted(self.types)[:20]) or "none yet"
            raise FieldError(f"{where}: unknown field {name[:70]!r} (this collection's fields: {known})")
        return name

    def range(self, name: str, value: Any, at: str) -> Range:
        field_type = self.types[name]
        if field_type not in ORDERED_TYPES:
            raise FieldError(f"{at}: range applies to integer, float and date fields; '{name}' is a {field_type}")
        if ("gt" in value and "gte" in value) or ("lt" in value and "lte" in value):
            raise FieldError(f"{at}: at most one lower bound (gt, gte) and one upper bound (lt, lte)")
        bounds: dict[str, float | int] = {}
        for key, bound in value.items():
            # A number bounds any number (an integer field by 2.5 too); a date field is bounded by dates.
            got = fits("float" if field_type != "date" else "date", bound)
            if got is None:
                raise FieldError(f"{at}.{key}: field '{name}' has type {field_type}, was given {type_of(bound)}")
            bounds[key] = ordered_value("date", got) if field_type == "date" else got
        low_key = "gt" if "gt" in bounds else "gte"
        high_key = "lt" if "lt" in bounds else "lte"
        return Range(name, bounds.get(low_key), low_key == "gt", bounds.get(high_key), high_key == "lt")


def parse_filter(node: Any, types: dict[str, str], bounds: FilterBounds) -> Clause:
    """A filter as a tree of clauses, checked against the collection's field `types` (a `FieldError` naming the
    problem)."""
    try:
        check_filter_form(node, "filter", max_depth=bounds.max_depth)
    except ValueError as error:
        raise FieldError(str(error)) from None
    return _Parser(types, bounds).clause(node, "filter")


def evaluate(clause: Clause, index: FieldIndex, rows: int) -> BitMap:
    """The rows of 0 … rows − 1 matching `clause`, dead rows included (the caller takes `index.dead` out)."""
    if isinstance(clause, Term):
        by_value = index.keywords.get(clause.field, {})
        return BitMap.union(BitMap(), *(by_value[v] for v in clause.values if v in by_value))
    if isinstance(clause, Range):
        column = index.ordered.get(clause.field)
        if column is None:
            return BitMap()
        return column.between(clause.low, clause.low_open, clause.high, clause.high_open)
    if isinstance(clause, Exists):
        return BitMap(index.present.get(clause.field, BitMap()))
    parts = [evaluate(c, index, rows) for c in clause.clauses]
    if clause.op == "and":
        return BitMap.intersection(*parts) if len(parts) > 1 else parts[0]
    if clause.op == "or":
        return BitMap.union(*parts) if len(parts) > 1 else parts[0]
    return BitMap(range(rows)) - parts[0]


def matching_rows(clause: Clause | None, index: FieldIndex, live: np.ndarray) -> np.ndarray:
    """The live rows matching `clause` (None: every live row), sorted (int64): what a filtered search ranks."""
    if clause is None:
        return np.flatnonzero(live)
    found = evaluate(clause, index, live.shape[0]) - index.dead
    rows = np.frombuffer(found.to_array(), dtype=np.uint32).astype(np.int64)
    rows = rows[rows < live.shape[0]]
    return rows[live[rows]]


__all__ = ["KEYWORD_TYPES", "WIDE_BOUNDS", "Clause", "FilterBounds", "evaluate", "matching_rows", "parse_filter"]
