"""A schema file: a collection's field types declared before any document uses the names (`ssi serve --schema`,
SSI_SCHEMA; `ssi index --schema`), so that the first value does not decide (a date-like SKU stays a keyword).

    {"sku": "keyword", "tags": "keyword_list", "price": "float", "stock": "integer", "new": "boolean",
     "published": "date"}

A JSON object of field name → type (ssi.fields.types); anything else is a `FieldError` naming the file and the
problem, so a command can print it as one line.
"""

from __future__ import annotations

import json
from pathlib import Path

from ssi.fields.errors import FieldError
from ssi.fields.schema import FIELD_NAME
from ssi.fields.types import FIELD_TYPES, FieldType


def read_schema(path: Path | str) -> dict[str, FieldType]:
    """The field types a schema file declares; a `FieldError` naming the file and what is wrong with it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FieldError(f"schema file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        declared = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FieldError(f"schema file {path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(declared, dict):
        raise FieldError(f'schema file {path}: a JSON object of field name → type, e.g. {{"sku": "keyword"}}')
    for name, field_type in declared.items():
        if not FIELD_NAME.match(name):
            raise FieldError(
                f"schema file {path}: field name {name[:70]!r} must start with a letter or '_' and hold at most 64 "
                "letters, digits, '_', '.' or '-'"
            )
        if field_type not in FIELD_TYPES:
            raise FieldError(
                f"schema file {path}: field '{name}' has unknown type {str(field_type)[:40]!r} "
                f"(one of {', '.join(FIELD_TYPES)})"
            )
    return declared
