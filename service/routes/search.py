"""`POST /search` and `POST /search/batch`: the exact SSI ranking of the collection for query texts."""

from __future__ import annotations

import time

from fastapi import APIRouter

from service.bounds import check_search
from service.collection import Collection
from service.deps import CollectionDep, SearchLimiterDep, SettingsDep
from service.model_state import QueryResult
from service.schemas import BatchSearchRequest, BatchSearchResponse, Hit, SearchRequest, SearchResponse, SearchResult
from service.settings import Settings
from service.snippet import make_snippet, query_pattern
from ssi.tokenize import tokenize

router = APIRouter(tags=["search"])


def to_result(collection: Collection, settings: Settings, result: QueryResult, query: str | None) -> SearchResult:
    """Hits with titles and snippets from the store; `query` None means snippets from the opening of each text."""
    docs = collection.get_many(result.doc_ids)
    pattern = query_pattern(tokenize(query)) if query else None
    hits = []
    for doc_id, score, semantic, lexical in zip(
        result.doc_ids, result.scores, result.semantic, result.lexical, strict=True
    ):
        doc = docs.get(doc_id)
        if doc is None:  # deleted between the ranking and this lookup
            continue
        snippet = make_snippet(doc.text, pattern, settings.snippet_chars)
        hits.append(Hit(id=doc_id, title=doc.title, snippet=snippet, score=score, semantic=semantic, lexical=lexical))
    return SearchResult(hits=hits, query_words=result.query_words, candidates=result.candidates)


@router.post(
    "/search",
    response_model=SearchResponse,
    summary="Rank the collection for one query",
    description=(
        "A short query: refused (422) beyond SSI_MAX_QUERY_CHARS characters (4,096 by default). "
        "Serves `documents` collections; an `adverts` collection answers 409."
    ),
    responses={409: {"description": "the collection holds adverts, not documents"}},
)
async def search(
    body: SearchRequest, collection: CollectionDep, settings: SettingsDep, limiter: SearchLimiterDep
) -> SearchResponse:
    check_search(settings, body, [body.query], batch=False)
    started = time.perf_counter()

    def work() -> SearchResult:
        (result,) = collection.search([body.query], body.k, body.offset, ef_search=body.ef_search, nprobe=body.nprobe)
        return to_result(collection, settings, result, body.query)

    result = await limiter.run(work)
    took = (time.perf_counter() - started) * 1000
    return SearchResponse(**result.model_dump(), collection=collection.name, took_ms=round(took, 3))


@router.post(
    "/search/batch",
    response_model=BatchSearchResponse,
    summary="Rank the collection for several queries",
    description="Each query as in `POST /search`, at most SSI_MAX_BATCH of them.",
    responses={409: {"description": "the collection holds adverts, not documents"}},
)
async def search_batch(
    body: BatchSearchRequest, collection: CollectionDep, settings: SettingsDep, limiter: SearchLimiterDep
) -> BatchSearchResponse:
    check_search(settings, body, body.queries, batch=True)
    started = time.perf_counter()

    def work() -> list[SearchResult]:
        results = collection.search(body.queries, body.k, body.offset, ef_search=body.ef_search, nprobe=body.nprobe)
        return [to_result(collection, settings, r, q) for r, q in zip(results, body.queries, strict=True)]

    results = await limiter.run(work)
    took = (time.perf_counter() - started) * 1000
    return BatchSearchResponse(collection=collection.name, results=results, took_ms=round(took, 3))
