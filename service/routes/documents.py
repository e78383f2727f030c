"""Documents by id: read, "more like this", add or replace, delete.

Ids are arbitrary strings ("C++", "Football_(soccer)", "Áedán_mac_Gabráin", even "a/b"); the routes
take the rest of the path as the id, so clients percent-encode it (`C%2B%2B`). The "similar" route
is matched first, so an id that itself ends in "/similar" can be read and written but not used
with `GET .../similar`.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from service.bounds import check_document_id, check_documents, check_paging
from service.deps import ApiKeyDep, CollectionDep, SearchLimiterDep, SettingsDep, WriteLimiterDep
from service.routes.search import to_result
from service.schemas import (
    DeleteResponse,
    DocumentBody,
    DocumentIn,
    DocumentOut,
    DocumentsIn,
    SearchResponse,
    WriteResponse,
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


register_url_convertor("docid", DocumentIdConvertor())

router = APIRouter(tags=["documents"])


@router.get(
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
    responses={409: {"description": "the collection holds adverts, not documents"}},
)
async def similar(
    doc_id: str,
    collection: CollectionDep,
    settings: SettingsDep,
    limiter: SearchLimiterDep,
    k: Annotated[int, Query(ge=1)] = 10,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> SearchResponse:
    check_paging(settings, k, offset)
    started = time.perf_counter()
    result = await limiter.run(lambda: to_result(collection, settings, collection.similar(doc_id, k, offset), None))
    took = (time.perf_counter() - started) * 1000
    return SearchResponse(**result.model_dump(), collection=collection.name, took_ms=round(took, 3))


@router.get("/documents/{doc_id:docid}", response_model=DocumentOut, summary="One stored document")
async def get_document(doc_id: str, collection: CollectionDep) -> DocumentOut:
    doc = await run_in_threadpool(collection.get, doc_id)
    return DocumentOut(collection=collection.name, id=doc.id, title=doc.title, text=doc.text, seq=doc.seq)


@router.put("/documents/{doc_id:docid}", response_model=WriteResponse, summary="Add or replace one document")
async def put_document(
    doc_id: str,
    body: DocumentBody,
    _: ApiKeyDep,
    collection: CollectionDep,
    settings: SettingsDep,
    limiter: WriteLimiterDep,
) -> WriteResponse:
    check_documents(settings, [DocumentIn(id=doc_id, title=body.title, text=body.text)], field="document")
    seqs = await limiter.run(collection.put, [Document(id=doc_id, title=body.title, text=body.text)])
    return WriteResponse(collection=collection.name, ids=[doc_id], seq=seqs[-1])


@router.post("/documents", response_model=WriteResponse, summary="Add or replace documents (one transaction)")
async def post_documents(
    body: DocumentsIn,
    _: ApiKeyDep,
    collection: CollectionDep,
    settings: SettingsDep,
    limiter: WriteLimiterDep,
) -> WriteResponse:
    check_documents(settings, body.documents)
    docs = [Document(id=d.id, title=d.title, text=d.text) for d in body.documents]
    seqs = await limiter.run(collection.put, docs)
    return WriteResponse(collection=collection.name, ids=[d.id for d in docs], seq=seqs[-1])


@router.delete("/documents/{doc_id:docid}", response_model=DeleteResponse, summary="Delete one document")
async def delete_document(
    doc_id: str,
    _: ApiKeyDep,
    collection: CollectionDep,
    settings: SettingsDep,
    limiter: WriteLimiterDep,
) -> DeleteResponse:
    check_document_id(settings, doc_id)
    seq = await limiter.run(collection.delete, doc_id)
    return DeleteResponse(collection=collection.name, id=doc_id, deleted=True, seq=seq)
