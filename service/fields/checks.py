"""The fields' checks (ssi.fields) as the service answers them: a malformed document's fields or filter is a 422
(`InvalidInput`) naming the problem, a value of another type than its field's a 409 (`FieldTypeError`), and nothing
is written. The checks themselves live in the contract package, so `ssi.load` and `ssi rank` filter as the service
does; only the mapping to HTTP answers is here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from service.errors import InvalidInput
from ssi.fields import filters, schema
from ssi.fields.errors import FieldError, FieldTypeMismatch
from ssi.fields.filters import Clause, FilterBounds


class FieldTypeError(InvalidInput):
    """A value whose type is not its field's (409: a conflict with the collection's types, not a malformed
    request): nothing of the write is applied."""

    status_code = 409


def parse_filter(node: Any, types: dict[str, str], bounds: FilterBounds) -> Clause:
    """A request's filter over the collection's field `types` (ssi.fields.filters.parse_filter); 422 naming the
    problem."""
    try:
        return filters.parse_filter(node, types, bounds)
    except FieldError as error:
        raise InvalidInput(str(error)) from None


def check_shape(fields: Any, where: str = "fields") -> dict[str, Any]:
    """A document's `fields` as a flat object of bounded values (ssi.fields.schema.check_shape); 422 naming the
    first problem."""
    try:
        return schema.check_shape(fields, where)
    except FieldError as error:
        raise InvalidInput(str(error)) from None


def admit(
    known: Mapping[str, str], documents: Iterable[tuple[str, Mapping[str, Any] | None]]
) -> tuple[dict[str, str], list[dict[str, Any] | None]]:
    """The documents' fields against the collection's types (ssi.fields.schema.admit); a value of another type than
    its field's is a 409."""
    try:
        return schema.admit(known, documents)
    except FieldTypeMismatch as error:
        raise FieldTypeError(str(error)) from None
    except FieldError as error:
        raise InvalidInput(str(error)) from None
