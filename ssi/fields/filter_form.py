"""The form of a filter (ssi.fields.filters), checked without a collection: for the filters of filtered read keys
(service.fields.visibility), checked when the settings load, before any collection's fields are known, and for a
query set's filters before its corpus is read. Apart from ssi.fields.filters so that the settings can import it
without the field index.
"""

from __future__ import annotations

from typing import Any

OPERATORS = ("term", "terms", "range", "exists", "and", "or", "not")
RANGE_KEYS = ("gt", "gte", "lt", "lte")
# How deep a key's filter may nest (a request's: SSI_MAX_FILTER_DEPTH).
KEY_FILTER_DEPTH = 64


def exists_field(body: Any) -> Any:
    """The field an `exists` clause names: `{"exists": {"field": "price"}}`, or the short `{"exists": "price"}`."""
    return body.get("field") if isinstance(body, dict) and len(body) == 1 else body


def check_filter_form(node: Any, where: str = "filter", depth: int = 1, max_depth: int = KEY_FILTER_DEPTH) -> None:
    """Raise ValueError unless `node` has the form of a filter (ssi.fields.filters: operators, objects and
    lists where they go, at most `max_depth` levels); the one definition of that form, for a key's filter when the
    settings load and for a request's before its fields and their types are checked against the collection."""
    if depth > max_depth:
        raise ValueError(f"{where}: a filter nests at most {max_depth} levels deep")
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError(f"{where}: a filter clause is an object with one operator ({', '.join(OPERATORS)})")
    ((op, body),) = node.items()
    if op in ("and", "or"):
        if not isinstance(body, list) or not body:
            raise ValueError(f"{where}.{op}: a non-empty list of filter clauses")
        for i, clause in enumerate(body):
            check_filter_form(clause, f"{where}.{op}[{i}]", depth + 1, max_depth)
    elif op == "not":
        check_filter_form(body, f"{where}.not", depth + 1, max_depth)
    elif op == "exists":
        if not isinstance(exists_field(body), str):
            raise ValueError(f'{where}.exists: a field name, or {{"field": name}}')
    elif op in ("term", "terms", "range"):
        if not isinstance(body, dict) or len(body) != 1:
            raise ValueError(f"{where}.{op}: an object naming one field")
        ((_, value),) = body.items()
        if op == "terms" and (not isinstance(value, list) or not value):
            raise ValueError(f"{where}.terms: a non-empty list of values")
        if op == "range" and (not isinstance(value, dict) or not value or any(k not in RANGE_KEYS for k in value)):
            raise ValueError(f"{where}.range: an object of {', '.join(RANGE_KEYS)}")
    else:
        raise ValueError(f"{where}: unknown filter operator {str(op)[:40]!r} (one of {', '.join(OPERATORS)})")


def filter_fields(node: Any) -> set[str]:
    """The field names a filter of checked form (`check_filter_form`) names: what a cluster's router looks up in
    the collection's field types before the shards parse it (cluster.fanout)."""
    ((op, body),) = node.items()
    if op in ("and", "or"):
        return set().union(*(filter_fields(clause) for clause in body))
    if op == "not":
        return filter_fields(body)
    if op == "exists":
        return {exists_field(body)}
    return set(body)
