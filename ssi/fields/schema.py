"""Field types and the checks of a document's `fields`: one type per name, fixed by its first use or declared.

A value's own type: a JSON string is a `keyword`, or a `date` when it is written as an ISO 8601 date or date and
time (`2024-05-01`, `2024-05-01T12:30:00Z`); a list of strings a `keyword_list`; `true`/`false` a `boolean`; a whole
number an `integer` (past 64 bits, a `float`); any other number a `float`. Once a name has a type, a value of
another type is refused (naming the field, its type and the type given) and nothing of the write is applied; the
few values that fit without loss are taken: a whole float (15.0) for an integer (as JSON Schema's "integer" has it,
and as every route takes integers: service.schemas.Integer), an integer for a float, and a date-like string for a
keyword.

That refusal is a `FieldTypeMismatch`, which the service answers 409: the request is well formed, and whether it
fits depends on what the collection holds, as for a write naming an id twice (a client generated from the schema
cannot know it); a malformed value (a nested object, a null, a bad name) is a `FieldError` (a 422).

In the contract package so that the service, `ssi.load` and `ssi rank`/`ssi eval` hold one definition of a field's
types (service.fields.checks turns the errors into the service's answers).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from ssi.fields.errors import FieldError, FieldTypeMismatch
from ssi.fields.types import FIELD_TYPES, FieldType

__all__ = ["FIELD_TYPES", "FieldType", "FieldTypeMismatch", "admit", "check_shape", "fits", "parse_date", "type_of"]
# Types whose values are counted by value (bitmaps per value) and can be faceted.
KEYWORD_TYPES = ("keyword", "keyword_list", "boolean")
# Types with an order (sorted arrays): `range` applies to them.
ORDERED_TYPES = ("integer", "float", "date")

FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
MAX_FIELDS = 64  # names per document
MAX_KEYWORD_CHARS = 1024  # one keyword value
MAX_LIST_ITEMS = 256  # values of one keyword list
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?)?$")
_INT64 = 1 << 63


@functools.lru_cache(maxsize=1 << 16)  # a collection's dates repeat (days): an index build parses each once
def parse_date(value: str) -> float | None:
    """Seconds since the epoch of an ISO 8601 date or date and time (UTC when it names no offset), else None."""
    if not _DATE.match(value):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def type_of(value: Any) -> str:
    """The type a value has on its own (its field's type when it is the first to use the name)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer" if -_INT64 <= value < _INT64 else "float"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "date" if parse_date(value) is not None else "keyword"
    if isinstance(value, list):
        return "keyword_list"
    return type(value).__name__ if value is not None else "null"


def fits(field_type: str, value: Any) -> Any | None:
    """`value` as a value of `field_type` (a whole float as an int), or None when it is not one."""
    if field_type == "keyword":
        return value if isinstance(value, str) else None
    if field_type == "date":
        return value if isinstance(value, str) and parse_date(value) is not None else None
    if field_type == "boolean":
        return value if isinstance(value, bool) else None
    if field_type == "integer":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return value if isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64 else None
    if field_type == "float":
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        try:
            number = float(value)
        except OverflowError:  # an integer past float's range
            return None
        return number if math.isfinite(number) else None
    if field_type == "keyword_list":
        return value if isinstance(value, list) and all(isinstance(item, str) for item in value) else None
    return None


def check_shape(fields: Any, where: str = "fields") -> dict[str, Any]:
    """A document's `fields` as a flat object of bounded values (a `FieldError` naming the first problem); types not
    yet."""
    if not isinstance(fields, dict):
        raise FieldError(f"{where}: must be a JSON object of field names to values")
    if len(fields) > MAX_FIELDS:
        raise FieldError(f"{where}: at most {MAX_FIELDS} fields per document (got {len(fields)})")
    for name, value in fields.items():
        if not isinstance(name, str) or not FIELD_NAME.match(name):
            raise FieldError(
                f"{where}: field name {str(name)[:70]!r} must start with a letter or '_' and hold at most 64 "
                "letters, digits, '_', '.' or '-'"
            )
        kind = type_of(value)
        if kind not in FIELD_TYPES:
            raise FieldError(
                f"{where}.{name}: a field's value is a string, a list of strings, a number, true/false or an ISO 8601 "
                f"date (got {kind}); leave a field out to have none"
            )
        if kind == "keyword_list":
            if len(value) > MAX_LIST_ITEMS:
                raise FieldError(f"{where}.{name}: at most {MAX_LIST_ITEMS} values in a list (got {len(value)})")
            if not all(isinstance(item, str) for item in value):
                raise FieldError(f"{where}.{name}: a list's values must all be strings (a keyword list)")
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and len(item) > MAX_KEYWORD_CHARS:
                raise FieldError(f"{where}.{name}: a keyword is at most {MAX_KEYWORD_CHARS} characters")
            if isinstance(item, str) and "\x00" in item:
                raise FieldError(f"{where}.{name}: a keyword must not contain NUL characters")
            if isinstance(item, str) and not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    raise FieldError(f"{where}.{name}: not valid Unicode (a lone surrogate)") from None
            if kind == "float" and fits("float", item) is None:
                raise FieldError(f"{where}.{name}: a number must be finite and within a float's range")
    return fields


def admit(
    known: Mapping[str, str], documents: Iterable[tuple[str, Mapping[str, Any] | None]]
) -> tuple[dict[str, str], list[dict[str, Any] | None]]:
    """Check every document's fields against the collection's types `known` (and the types the earlier documents
    of the same write fix): (the names new to the collection with their types, each document's fields as stored).
    A mismatch is a `FieldTypeMismatch` naming the document, the field, its type and the type given."""
    added: dict[str, str] = {}
    stored: list[dict[str, Any] | None] = []
    for doc_id, fields in documents:
        if not fields:
            stored.append(None)
            continue
        kept: dict[str, Any] = {}
        for name, value in fields.items():
            field_type = known.get(name) or added.get(name)
            if field_type is None:
                field_type = added[name] = type_of(value)
            fitted = fits(field_type, value)
            if fitted is None:
                raise FieldTypeMismatch(
                    f"document {doc_id[:80]!r}: field '{name}' has type {field_type}, was given {type_of(value)} "
                    f"({str(value)[:40]!r}); nothing was written"
                )
            kept[name] = fitted
        stored.append(kept)
    return added, stored
