"""The field types (ssi.fields.schema), apart so that the settings can name them without importing more."""

from __future__ import annotations

from typing import Literal, get_args

FieldType = Literal["keyword", "keyword_list", "integer", "float", "boolean", "date"]
FIELD_TYPES: tuple[str, ...] = get_args(FieldType)
