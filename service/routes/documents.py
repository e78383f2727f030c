"""Documents by id: read, "more like this", add or replace, delete.

Ids are arbitrary strings ("C++", "Football_(soccer)", "Áedán_mac_Gabráin", even "a/b"); the routes
take the rest of the path as the id, so clients percent-encode it (`C%2B%2B`; the server sees `%2F`
as "/", like any ASGI server). A path ending in "/similar" is the similar-documents resource for
every method, so an id may not end in "/similar" (the writes refuse one): `PUT .../x/similar` is a
405, not a write of the id "x/similar".

Two routers, so that the read key (when configured) is added to the reads only: `read_router`
(GET a document, GET similar) and `write_router` (PUT, POST, DELETE: the write key).
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from service.bounds import check_document_id, check_documents, check_paging
from service.deps import (
    ApiKeyDep,
    CollectionDep,
    SearchLimiterDep,
    SettingsDep,
    SingleQueryValues,
    VisibleDep,
    WriteLimiterDep,
    WriteRoute,
)
from service.errors import InvalidInput, error_responses
from service.fields.checks import check_shape
from service.fields.http import DocumentBody, DocumentIn, DocumentsIn
from service.routes.search import to_result
from service.schemas import (
    WRITTEN_ID,
    DeleteResponse,
    DocumentOut,
    SearchResponse,
    WriteResponse,
    ceiling,
)
from ssi.records import Document


class DocumentIdConvertor(Convertor[str]):
    """The rest of the path, like Starlette's `path`, but also across newlines, so that a malformed id
    reaches the id check (and its clear message) instead of falling through to a bare 404."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class WrittenIdConvertor(DocumentIdConvertor):
    """An id of a write: the rest of the path unless it ends in "/similar" (then the path is the
    similar-documents resource, which answers 405 to a write)."""

    regex = r"(?![\s\S]*/similar$)[\s\S]*"


register_url_convertor("docid", DocumentIdConvertor())
register_url_convertor("writtenid", WrittenIdConvertor())

# 400/413: the body checks; 401/403: the write key; 404: an unknown collection (or document).
# 409: a field's value of another type than the collection's field (service.fields), or the batch names an id twice.
WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 422, 429, 503, 507)
BATCH_WRITE_ERRORS = WRITE_ERRORS

read_router = APIRouter(tags=["documents"])
write_router = APIRouter(tags=["documents"], route_class=WriteRoute)

# Any id may be looked up (a longer one is simply not found); a written id is bounded and checked.
LookupId = Annotated[str, Path(min_length=1, description="the document id, percent-encoded ('a/b' is a%2Fb)")]
WrittenId = Annotated[
    str,
    Path(
        description="the document id, percent-encoded: not blank, no control characters, not ending in "
        "'/similar', at most SSI_MAX_ID_CHARS",
        json_schema_extra={"minLength": 1, "pattern": WRITTEN_ID, "x-bounds": {"maxLength": "max_id_chars"}},
    ),
]
K = Annotated[
    int,
    Query(
        ge=1,
        le=ceiling("max_k"),
        description="hits (at most SSI_MAX_K)",
        json_schema_extra={"x-bounds": {"maximum": "max_k"}},
    ),
]
OFFSET = Annotated[
    int,
    Query(
        ge=0,
        le=ceiling("max_offset"),
        description="hits to skip (at most SSI_MAX_OFFSET)",
        json_schema_extra={"x-bounds": {"maximum": "max_offset"}},
    ),
]


# A filter in the URL: bounded so that, percent-encoded (up to three characters each) beside an id, the request line
# stays within the HTTP server's 16 KiB (h11's default; past it the server answers 400 before any route).
FILTER = Annotated[
    str | None,
    Query(
        max_length=4096,
        description="only documents matching this filter, as the JSON of a search's `filter` (service.fields), "
        'e.g. {"term": {"category": "books"}}',
    ),
]


def parsed_filter(text: str | None) -> Any:
    """The `filter` query parameter's JSON (a 422 when it is not JSON)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"filter: not JSON ({exc})") from None


@read_router.get(
    "/documents/{doc_id:docid}/similar",
    response_model=SearchResponse,
    summary="Documents most like this one (the stored document is the query; it is left out)",
    description=(
        "The stored document (title and text) is the query, ranked by the exact score like a search. "
        "It is a long query, so it is cut, never refused: to its first SSI_MAX_PAGE_CHARS characters "
        "(65,536 by default, at a word boundary), then to its SSI_MAX_PAGE_WORDS (2,048) distinct words "
        "of highest tf-idf weight, renormalized. Serves `documents` collections; an `adverts` "
        "collection answers 409."
    ),
    responses=error_responses(400, 401, 404, 409, 422, 429, 503),
    dependencies=[SingleQueryValues],
)
async def similar(
    doc_id: LookupId,
    collection: CollectionDep,
    settings: SettingsDep,
    limiter: SearchLimiterDep,
    visible: VisibleDep,
    k: K = 10,
    offset: OFFSET = 0,
    filter: FILTER = None,
) -> SearchResponse:
    check_paging(settings, k, offset)
    node = parsed_filter(filter)
    started = time.perf_counter()
    result = await limiter.run(
        lambda: to_result(
            collection, settings, collection.similar(doc_id, k, offset, node, visible), None, visible=visible
        )
    )
    took = (time.perf_counter() - started) * 1000
    return SearchResponse(**result.model_dump(), collection=collection.name, took_ms=round(took, 3))


@read_router.get(
    "/documents/{doc_id:docid}",
    response_model=DocumentOut,
    summary="One stored document",
    responses=error_responses(401, 404, 422, 503),
)
async def get_document(doc_id: LookupId, collection: CollectionDep, visible: VisibleDep) -> DocumentOut:
    doc = await run_in_threadpool(collection.get, doc_id, visible)
    return DocumentOut(
        collection=collection.name, id=doc.id, title=doc.title, text=doc.text, fields=doc.fields or {}, seq=doc.seq
    )


@write_router.put(
    "/documents/{doc_id:writtenid}",
    response_model=WriteResponse,
    summary="Add or replace one document",
    responses=error_responses(*WRITE_ERRORS),
)
async def put_document(
    doc_id: WrittenId,
    body: DocumentBody,
    _: ApiKeyDep,
    collection: CollectionDep,
    settings: SettingsDep,
    limiter: WriteLimiterDep,
) -> WriteResponse:
    check_documents(settings, [DocumentIn(id=doc_id, title=body.title, text=body.text)], field="document")
    fields = check_shape(body.fields, "document.fields") if body.fields else None
    seqs = await limiter.run(collection.put, [Document(id=doc_id, title=body.title, text=body.text, fields=fields)])
    return WriteResponse(collection=collection.name, ids=[doc_id], seq=seqs[-1])


@write_router.post(
    "/documents",
    response_model=WriteResponse,
    summary="Add or replace documents (one transaction)",
    responses=error_responses(*BATCH_WRITE_ERRORS),
)
async def post_documents(
    body: DocumentsIn,
    _: ApiKeyDep,
    collection: CollectionDep,
    settings: SettingsDep,
    limiter: WriteLimiterDep,
) -> WriteResponse:
    check_documents(settings, body.documents)
    docs = [
        Document(
            id=d.id,
            title=d.title,
            text=d.text,
            fields=check_shape(d.fields, f"documents[{i}].fields") if d.fields else None,
        )
        for i, d in enumerate(body.documents)
    ]
    seqs = await limiter.run(collection.put, docs)
    return WriteResponse(collection=collection.name, ids=[d.id for d in docs], seq=seqs[-1])


@write_router.delete(
    "/documents/{doc_id:writtenid}",
    response_model=DeleteResponse,
    summary="Delete one document",
    responses=error_responses(401, 403, 404, 422, 429, 503, 507),
)
async def delete_document(
    doc_id: WrittenId,
    _: ApiKeyDep,
    collection: CollectionDep,
    settings: SettingsDep,
    limiter: WriteLimiterDep,
) -> DeleteResponse:
    check_document_id(settings, doc_id)
    seq = await limiter.run(collection.delete, doc_id)
    return DeleteResponse(collection=collection.name, id=doc_id, deleted=True, seq=seq)
