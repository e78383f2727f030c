"""What a document's fields or a filter may get wrong (ssi.fields), as plain Python errors: the service answers them
as 422 and 409 (service.fields.checks), the offline tools (`ssi.load`, `ssi rank`, `ssi eval`, a corpus's lines) as
a ValueError naming the problem."""

from __future__ import annotations


class FieldError(ValueError):
    """Malformed fields or filter: an unknown field or operator, a value of no field type, a bound passed."""


class FieldTypeMismatch(FieldError):
    """A well-formed value whose type is not its field's (a conflict with the collection's types, not a malformed
    value): nothing of the write is applied."""
