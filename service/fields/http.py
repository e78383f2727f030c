"""The service's request bodies with fields (service.fields): the plain ones of service.schemas plus `filter`,
`facets` and `fields` on searches and `fields` on documents, under the same names, so the published schema reads as
before with the new properties in it. One server's routes and the sharded cluster's router (cluster.http) take
the same bodies."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from service import schemas
from ssi.fields.schema import FIELD_NAME, MAX_FIELDS, MAX_KEYWORD_CHARS, MAX_LIST_ITEMS

FieldName = Annotated[str, Field(max_length=64, description="a field name (service.fields)")]
# Fixed examples are in the descriptions, not in `examples`: a fuzzer sends a schema's examples as requests that
# must succeed, and a filter names fields that only some collections have. The served schema's `examples` are made
# of the collections' own fields (service.openapi.filter_example).
FILTER_EXAMPLE = '{"and": [{"term": {"category": "books"}}, {"range": {"price": {"gte": 5, "lt": 20}}}]}'
FIELDS_EXAMPLE = '{"category": "books", "tags": ["new"], "price": 12.5, "published": "2024-05-01"}'
# A field's value as the schema publishes it (ssi.fields.schema.check_shape holds the same bounds).
KEYWORD = {"type": "string", "maxLength": MAX_KEYWORD_CHARS, "pattern": "^[^\\x00]*$"}
FIELDS_SCHEMA = {
    "type": "object",
    "maxProperties": MAX_FIELDS,
    "propertyNames": {"pattern": FIELD_NAME.pattern},
    "additionalProperties": {
        "anyOf": [
            KEYWORD,
            {"type": "number", "minimum": -1e308, "maximum": 1e308},
            {"type": "boolean"},
            {"type": "array", "items": KEYWORD, "maxItems": MAX_LIST_ITEMS},
        ]
    },
}


class FieldOptions(schemas.Strict):
    """What a search asks of the documents' fields; absent, a search is what it always was."""

    filter: dict[str, Any] | None = Field(
        default=None,
        description=(
            "only documents matching it: term, terms, range (gt, gte, lt, lte on integer, float and date fields), "
            "exists, combined with and, or, not; at most SSI_MAX_FILTER_CLAUSES clauses, SSI_MAX_FILTER_TERMS "
            "values in all, SSI_MAX_FILTER_DEPTH levels. The hits are the top k of the score among them. "
            f"For example {FILTER_EXAMPLE}"
        ),
    )
    facets: list[FieldName] = Field(
        default_factory=list,
        max_length=schemas.ceiling("max_facets"),
        json_schema_extra={"x-bounds": {"maxItems": "max_facets"}},
        description="keyword or boolean fields whose most frequent values (SSI_FACET_SIZE) are counted over every "
        "matching document (at most SSI_MAX_FACETS fields)",
    )
    fields: list[FieldName] = Field(
        default_factory=list, max_length=64, description="fields returned with each hit (those the document has)"
    )

    def asks_fields(self) -> bool:
        return self.filter is not None or bool(self.facets) or bool(self.fields)


class SearchRequest(schemas.SearchRequest, FieldOptions):
    pass


class BatchSearchRequest(schemas.BatchSearchRequest, FieldOptions):
    pass


class DocumentFields(schemas.Strict):
    fields: dict[str, Any] | None = Field(
        default=None,
        description="filterable values: a flat object of keywords, keyword lists, integers, floats, booleans and "
        "ISO 8601 dates; a field's type is fixed by its first use (or declared), another type is a 422. "
        f"For example {FIELDS_EXAMPLE}",
        json_schema_extra={"anyOf": [FIELDS_SCHEMA, {"type": "null"}]},
    )


class DocumentBody(schemas.DocumentBody, DocumentFields):
    pass


class DocumentIn(schemas.DocumentIn, DocumentFields):
    pass


class DocumentsIn(schemas.DocumentsIn):
    documents: list[DocumentIn] = Field(  # type: ignore[assignment]
        max_length=schemas.ceiling("max_documents_per_write"),
        fail_fast=True,
        description=schemas.DocumentsIn.model_fields["documents"].description,
        json_schema_extra={"minItems": 1, "x-bounds": {"maxItems": "max_documents_per_write"}},
    )
