"""`POST /match`: the adverts for a web page, and the advert writes (add, update, pause, delete).

The routes address an adverts collection: `/collections/{name}/match`, or `/match` for the one
adverts collection the service hosts. A page is its text, the id of a document of a documents
collection, or a batch of texts. Advert writes go through the keyed write path like documents: an
advert's metadata is four fields of its document (service.adverts), so `PUT /adverts/{id}` writes text and
metadata in one transaction (an advert written paused is never matched, even for a moment), and `PATCH`
(pause, resume, recategorize) writes the advert again with its text and other fields as stored and the
metadata changed: one document write, its text embedded again (about what a one-document PUT costs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from service.advert_schemas import (
    AdMatch,
    AdvertBody,
    AdvertOut,
    AdvertPatch,
    MatchRequest,
    MatchResponse,
    PageMatchOut,
)
from service.adverts import AdvertMeta, match_filter, request_filter, with_meta
from service.batching import QueryBatcher
from service.bounds import check_document_id, check_documents, shown
from service.catalog import Catalog
from service.collection import Collection
from service.deps import (
    ApiKeyDep,
    CatalogDep,
    SearchLimiterDep,
    SettingsDep,
    WriteLimiterDep,
    WriteRoute,
    key_visibility,
)
from service.errors import Forbidden, InvalidInput, NotFound, Unavailable, error_responses
from service.events.traffic import Traffic, filter_shown, id_of_result, served_model
from service.fields.checks import check_shape
from service.matching import PageMatch, match_pages
from service.routes.documents import LookupId, WrittenId
from service.schemas import DeleteResponse, DocumentIn, WriteResponse
from service.settings import Settings
from ssi.records import Document

read_router = APIRouter(tags=["adverts"])
write_router = APIRouter(tags=["adverts"], route_class=WriteRoute)

# 401: a read key; 404: an unknown collection or page document; 409: not an adverts collection.
# 403: a read key with a filter (SSI_READ_KEYS): /match and /adverts do not apply one yet.
MATCH_ERRORS = (400, 401, 403, 404, 409, 413, 422, 429, 503)
WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 422, 429, 503, 507)


def adverts_collection(request: Request, catalog: CatalogDep) -> Collection:
    """The collection named in the path, else the service's one adverts collection. A filtered read key is refused
    first (403, whatever the collection): the adverts routes do not apply a key's filter yet, and never answer it
    unfiltered (docs/operate/keys-and-bounds.md#per-key-visibility)."""
    if key_visibility(request.app.state.settings, request.headers.get("x-api-key")).restricted:
        raise Forbidden(
            "this read key has a filter (SSI_READ_KEYS): /match and /adverts do not apply one yet; "
            "use a read key without a filter"
        )
    name = request.path_params.get("collection")
    if name is not None:
        collection = catalog.get(name)
    else:
        hosted = [c for c in catalog.collections.values() if c.type == "adverts"]
        if len(hosted) != 1:
            raise NotFound(
                "this service hosts no adverts collection"
                if not hosted
                else "this service hosts several adverts collections: use /collections/{name}/match"
            )
        collection = hosted[0]
    collection.require_type("adverts", "/match and /adverts")
    return collection


AdvertsDep = Annotated[Collection, Depends(adverts_collection)]


def warm_adverts(collection: Collection) -> None:
    """Warm an adverts collection's page featurizer as it loads (Catalog.after_load), not on the first /match: each
    worker's first /match waited for it with every page queued behind it (docs/performance/search.md, "A worker's
    first page")."""
    if collection.type == "adverts":
        collection.ready_state().embedder.warm_page_featurizer()


def _page_texts(body: MatchRequest) -> list[str]:
    given = [name for name in ("page", "page_id", "pages") if getattr(body, name) is not None]
    if len(given) != 1:
        raise InvalidInput("give exactly one of page (a text), page_id (a stored document) and pages (a batch)")
    if body.documents is not None and body.page_id is None:
        raise InvalidInput("documents names the collection of page_id: give page_id with it")
    if body.page is not None:
        texts = [body.page]
    elif body.pages is not None:
        if not body.pages:
            raise InvalidInput("pages is empty")
        texts = body.pages
    else:
        return []  # read from the store in the worker thread
    for i, text in enumerate(texts):
        field = "page" if body.page is not None else f"pages[{i}]"
        if not text.strip():
            raise InvalidInput(f"{field} is empty")
        if "\x00" in text:
            raise InvalidInput(f"{field} contains a NUL character")
    return texts


def check_match(body: MatchRequest, settings: Settings) -> list[str]:
    """The request's page texts (none for `page_id`: read later), or the 422 of a request out of bounds; shared with
    the sharded router (cluster.http), so both refuse the same requests with the same messages."""
    texts = _page_texts(body)
    if body.pages is not None and len(body.pages) > settings.max_batch:
        raise InvalidInput(f"at most {settings.max_batch} pages per batch (got {len(body.pages)})")
    if not 1 <= body.k <= settings.max_k:
        raise InvalidInput(f"k must be between 1 and {settings.max_k} (got {body.k})")
    if len(texts) * body.k > settings.max_batch_hits:
        raise InvalidInput(f"pages × k must be at most {settings.max_batch_hits}")
    return texts


def _stored_page(body: MatchRequest, catalog: Catalog) -> str:
    assert body.page_id is not None
    documents = catalog.get(body.documents)
    documents.require_type("documents", "page_id")
    return documents.get(body.page_id).as_document().full_text


_batchers: weakref.WeakKeyDictionary[Collection, QueryBatcher] = weakref.WeakKeyDictionary()
_batchers_lock = threading.Lock()


def match_batcher_for(collection: Collection, settings: Settings) -> QueryBatcher:
    """The adverts collection's micro-batcher (service.batching, as /search's): pages that wait at the same moment
    with the same k and filter are matched by one call, so a busy server embeds them in one ONNX call and evaluates
    the filter once for them all, in at most `threads` threads."""
    with _batchers_lock:
        batcher = _batchers.get(collection)
        if batcher is None:
            owner = weakref.ref(collection)  # the batcher must not keep a dropped collection alive

            def match(pages: Sequence[str], key: tuple[int, str]) -> list[PageMatch]:
                found = owner()
                if found is None:
                    raise Unavailable("the collection was closed; retry")
                k, node = key
                return match_pages(found, settings, pages, k, json.loads(node))

            batcher = QueryBatcher(
                match, leaders=settings.threads, max_batch=settings.max_batch, gather_s=settings.batch_gather_ms / 1000
            )
            _batchers[collection] = batcher
            weakref.finalize(collection, batcher.close)
        return batcher


def page_match_out(match: PageMatch) -> PageMatchOut:
    """A page's matches as the response body; a shard of the sharded router answers with it too."""
    return PageMatchOut(
        ads=[
            AdMatch(
                id=hit.id,
                title=hit.title,
                text=hit.text,
                score=hit.score,
                semantic=hit.semantic,
                lexical=hit.lexical,
                sentence=hit.sentence,
                category=hit.meta.category,
                advertiser=hit.meta.advertiser,
                budget=hit.meta.budget,
                shared_words=hit.shared,
                related_words=hit.related,
            )  # fmt: skip
            for hit in match.hits
        ],
        page_words=match.page_words,
        ranked=match.ranked,
    )


@read_router.post(
    "/match",
    response_model=MatchResponse,
    summary="The adverts for a web page (or a batch of pages)",
    description=(
        "Ranks the adverts the filters admit (`filters`, the adverts' metadata, and `filter`, the filter "
        "language of /search, ANDed; a paused advert never) by the exact score f = semantic + lexical and "
        "returns the top k of them with the score split and the words that made each match: a filter never "
        "returns fewer than k adverts while k matching ones exist. A page is cut like /similar's stored document, "
        "never refused for its length within the body bound (SSI_MAX_BODY_BYTES, 8 MiB: a larger body gets 413)."
    ),
    responses=error_responses(*MATCH_ERRORS),
)
async def match(
    body: MatchRequest,
    collection: AdvertsDep,
    catalog: CatalogDep,
    settings: SettingsDep,
    limiter: SearchLimiterDep,
    request: Request,
) -> MatchResponse:
    texts = check_match(body, settings)
    started = time.perf_counter()
    asked = request_filter(body.filters, body.filter)
    node = match_filter(body.filters, body.filter)
    # Checked here, once, before any page waits in the batcher: a bad filter is the request's 422, not a batch's.
    await run_in_threadpool(collection.where, collection.ready_state(), node)
    pages = texts or [await run_in_threadpool(_stored_page, body, catalog)]
    key = (body.k, json.dumps(node, sort_keys=True, separators=(",", ":")))
    batcher = match_batcher_for(collection, settings)
    async with limiter.slot():  # the pages are matched in the batcher's threads: this request holds none
        futures = [batcher.submit(page, key) for page in pages]
        results: list[PageMatch] = [await asyncio.wrap_future(future) for future in futures]
    took = (time.perf_counter() - started) * 1000
    results_out = [page_match_out(r) for r in results]
    traffic: Traffic = request.app.state.traffic
    model = served_model(collection)
    shown = filter_shown(asked)
    for page, out in zip(pages, results_out, strict=True):
        out.impression, out.ads = traffic.show(
            collection.name, model, "match", page, out.ads, id_of_result, filtered=shown
        )
    return MatchResponse(collection=collection.name, results=results_out, took_ms=round(took, 3))


def _advert_out(collection: Collection, ad_id: str) -> AdvertOut:
    doc = collection.get(ad_id)
    meta = AdvertMeta.of_fields(doc.fields)
    return AdvertOut(
        collection=collection.name, id=doc.id, title=doc.title, text=doc.text, active=meta.active,
        category=meta.category, advertiser=meta.advertiser, budget=meta.budget, fields=doc.fields, seq=doc.seq,
    )  # fmt: skip


@read_router.get(
    "/adverts/{ad_id:docid}",
    response_model=AdvertOut,
    summary="One advert with its metadata",
    responses=error_responses(401, 403, 404, 409, 422, 503),
)
async def get_advert(ad_id: LookupId, collection: AdvertsDep) -> AdvertOut:
    return await run_in_threadpool(_advert_out, collection, ad_id)


@write_router.put(
    "/adverts/{ad_id:writtenid}",
    response_model=WriteResponse,
    summary="Add or replace one advert (text, metadata and other fields)",
    responses=error_responses(*WRITE_ERRORS),
)
async def put_advert(
    ad_id: WrittenId,
    body: AdvertBody,
    _: ApiKeyDep,
    collection: AdvertsDep,
    settings: SettingsDep,
    limiter: WriteLimiterDep,
) -> WriteResponse:
    check_documents(settings, [DocumentIn(id=ad_id, title=body.title, text=body.text)], field="advert")
    meta = AdvertMeta(active=body.active, category=body.category, advertiser=body.advertiser, budget=body.budget)
    fields = with_meta(check_shape(body.fields) if body.fields is not None else None, meta)

    def write() -> list[int]:
        return collection.put([Document(id=ad_id, title=body.title, text=body.text, fields=fields)])

    seqs = await limiter.run(write)
    return WriteResponse(collection=collection.name, ids=[ad_id], seq=seqs[-1])


@write_router.patch(
    "/adverts/{ad_id:writtenid}",
    response_model=AdvertOut,
    summary="Change an advert's metadata: pause (active false), resume, recategorize",
    responses=error_responses(*WRITE_ERRORS),
)
async def patch_advert(
    ad_id: WrittenId,
    body: AdvertPatch,
    _: ApiKeyDep,
    collection: AdvertsDep,
    settings: SettingsDep,
    limiter: WriteLimiterDep,
) -> AdvertOut:
    check_document_id(settings, ad_id)
    changes = body.model_dump(exclude_unset=True)
    if not changes:
        raise InvalidInput("nothing to change: give active, category, advertiser or budget")
    if any(changes.get(name) is None for name in ("active", "budget") if name in changes):
        raise InvalidInput("active and budget must be true or false")

    def write() -> AdvertOut:
        collection.check_writable()
        doc = collection.get_many([ad_id]).get(ad_id)
        if doc is None:
            raise NotFound(f"no advert with id {shown(ad_id)} in collection '{collection.name}'")
        meta = dataclasses.replace(AdvertMeta.of_fields(doc.fields), **changes)
        collection.put([Document(id=ad_id, title=doc.title, text=doc.text, fields=with_meta(doc.fields, meta))])
        return _advert_out(collection, ad_id)

    return await limiter.run(write)


@write_router.delete(
    "/adverts/{ad_id:writtenid}",
    response_model=DeleteResponse,
    summary="Delete one advert (text and metadata)",
    responses=error_responses(401, 403, 404, 409, 422, 429, 503, 507),
)
async def delete_advert(
    ad_id: WrittenId,
    _: ApiKeyDep,
    collection: AdvertsDep,
    settings: SettingsDep,
    limiter: WriteLimiterDep,
) -> DeleteResponse:
    check_document_id(settings, ad_id)
    seq = await limiter.run(lambda: collection.delete(ad_id))
    return DeleteResponse(collection=collection.name, id=ad_id, deleted=True, seq=seq)
