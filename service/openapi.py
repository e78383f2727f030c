"""The OpenAPI schema as this server enforces it: the configured bounds, knobs and collections filled in.

FastAPI derives the schema from the models, which can only hold fixed values; what a request may
send depends on the settings (SSI_MAX_K, SSI_MAX_BATCH, the index type, the hosted collections).
`exact_schema` fills those in, so a client generator or a fuzzer reads the contract the server
applies: every `x-bounds` marker (service.schemas) becomes the keyword it names with the setting's
value; `ef_search` is offered only on an HNSW index and `nprobe` only on IVF (elsewhere they are
refused, like any unknown field); the `{collection}` parameter lists the hosted collections;
a search's `facets` lists the keyword fields the collections have, `filter` is offered once they have any
field, and its `fields` names each field with its type in `x-field-types` (service.fields: all name fields, which
a schema cannot know otherwise; the search page reads them to offer facets and ranges; the schema is made again
when the fields change), with examples of `filter`, `facets`, `fields` and a document's `fields` made of those
fields (so a client generator or a fuzzer sending them gets a 200, never a 422 for a field the collection lacks);
and with SSI_ALLOWED_HOSTS set, every operation may answer 400 for a foreign Host header.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from service.errors import error_responses
from service.settings import Settings
from ssi.fields.schema import KEYWORD_TYPES

BOUNDS_KEY = "x-bounds"
# Request fields that only one index type accepts.
INDEX_KNOBS = {"ef_search": "hnsw", "nprobe": "ivf"}
SEARCH_BODIES = ("SearchRequest", "BatchSearchRequest")
DOCUMENT_BODIES = ("DocumentBody", "DocumentIn")
# A value of each field type, for the examples (ssi.fields.schema: what each type takes).
EXAMPLE_VALUES: dict[str, Any] = {
    "keyword": "example",
    "keyword_list": ["example"],
    "integer": 1,
    "float": 1.5,
    "boolean": True,
    "date": "2024-05-01",
}
# Where a search body's `fields` lists the collections' field names with their types (service/static/fields.js).
FIELD_TYPES_KEY = "x-field-types"


def _fill_bounds(node: Any, settings: Settings) -> None:
    """Replace each `x-bounds: {keyword: setting}` by `keyword: settings.<setting>`, in place, recursively."""
    if isinstance(node, dict):
        bounds = node.pop(BOUNDS_KEY, None)
        if bounds:
            # An optional field (`int | None`) carries its constraints in the non-null branch of anyOf.
            targets = [b for b in node.get("anyOf", []) if b.get("type") != "null"] or [node]
            for keyword, setting in bounds.items():
                for target in targets:
                    target[keyword] = getattr(settings, setting)
        for value in node.values():
            _fill_bounds(value, settings)
    elif isinstance(node, list):
        for value in node:
            _fill_bounds(value, settings)


def _operations(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [op for item in schema.get("paths", {}).values() for op in item.values() if isinstance(op, dict)]


def filter_example(types: dict[str, str]) -> dict[str, Any] | None:
    """A filter over the collections' own fields (a `term` on a keyword or boolean field, a `range` on a number
    or date field, both under `and` when there are both): one any of them answers with a 200."""
    names = sorted(types)
    term = next((n for n in names if types[n] in KEYWORD_TYPES), None)
    ranged = next((n for n in names if types[n] not in KEYWORD_TYPES), None)
    clauses: list[dict[str, Any]] = []
    if term is not None:
        clauses.append({"term": {term: "example" if types[term] != "boolean" else True}})
    if ranged is not None:
        clauses.append({"range": {ranged: {"gte": EXAMPLE_VALUES[types[ranged]]}}})
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"and": clauses}


def _field_options(properties: dict[str, Any], types: dict[str, str]) -> None:
    """A search body's `filter` and `facets` as the collections' fields allow them (service.fields), with
    examples made of those fields, and the fields' types under `fields` (an extension: JSON Schema has no keyword
    for "these names, of these types, may be asked for")."""
    if "filter" in properties and not types:
        properties["filter"] = {"type": "null", "description": properties["filter"].get("description", "")}
    example = filter_example(types)
    if "filter" in properties and example is not None:
        properties["filter"]["examples"] = [example]
    if "fields" in properties and types:
        properties["fields"][FIELD_TYPES_KEY] = dict(sorted(types.items()))
    keyword = sorted(name for name, field_type in types.items() if field_type in KEYWORD_TYPES)
    facets = properties.get("facets")
    if facets is not None:
        if keyword:
            facets["items"] = {**facets.get("items", {}), "enum": keyword}
            facets["examples"] = [keyword[:2]]
        else:
            facets["maxItems"] = 0
    if "fields" in properties and types:
        properties["fields"]["examples"] = [sorted(types)[:3]]


def _document_fields(properties: dict[str, Any], types: dict[str, str]) -> None:
    """A document body's `fields` example: a value of its type for a few of the collections' fields."""
    if "fields" in properties and types:
        properties["fields"]["examples"] = [{name: EXAMPLE_VALUES[types[name]] for name in sorted(types)[:4]}]


def exact_schema(
    app: FastAPI, settings: Settings, collections: list[str], field_types: dict[str, str] | None = None
) -> dict[str, Any]:
    schema = get_openapi(
        title=app.title, version=app.version, summary=app.summary, description=app.description, routes=app.routes
    )
    _fill_bounds(schema, settings)
    components = schema.get("components", {}).get("schemas", {})
    for name in SEARCH_BODIES:
        properties = components.get(name, {}).get("properties", {})
        for knob, index_type in INDEX_KNOBS.items():
            if settings.index_type != index_type:
                properties.pop(knob, None)
        _field_options(properties, field_types or {})
    for name in DOCUMENT_BODIES:
        _document_fields(components.get(name, {}).get("properties", {}), field_types or {})
    host_error = error_responses(400)[400] if settings.allowed_hosts else None
    for operation in _operations(schema):
        filters = [p for p in operation.get("parameters", []) if p.get("in") == "query" and p.get("name") == "filter"]
        if filters and not field_types:  # /similar's filter names fields, as a search body's does
            operation["parameters"] = [p for p in operation["parameters"] if p not in filters]
        body_filter = components.get("SearchRequest", {}).get("properties", {}).get("filter")
        for parameter in filters if field_types and body_filter else []:
            # The query parameter is a search body's filter written as JSON: published as such (OpenAPI's
            # `content`), so that a client generated from the schema sends JSON, not any string.
            parameter.pop("schema", None)
            parameter["content"] = {"application/json": {"schema": body_filter}}
        for parameter in operation.get("parameters", []):
            if parameter.get("in") == "path" and parameter.get("name") == "collection":
                parameter["schema"] = {**parameter["schema"], "enum": sorted(collections)}
                parameter["schema"].pop("pattern", None)
        if host_error is not None and "400" not in operation["responses"]:
            operation["responses"]["400"] = {
                "description": host_error["description"],
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
            }
    return schema


def install_exact_schema(
    app: FastAPI,
    settings: Settings,
    collections: list[str],
    field_types: Callable[[], dict[str, str]] = dict,
) -> None:
    """Serve `exact_schema` at /openapi.json (computed on first request, and again when the fields change)."""
    made_for: list[dict[str, str]] = []

    def openapi() -> dict[str, Any]:
        types = field_types()
        if app.openapi_schema is None or made_for != [types]:
            app.openapi_schema = exact_schema(app, settings, collections, types)
            made_for[:] = [types]
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
