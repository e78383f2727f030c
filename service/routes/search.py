"""`POST /search` and `POST /search/batch`: the exact SSI ranking of the collection for query texts."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Response

from service.batching import BatchKey, QueryBatcher
from service.bounds import check_search
from service.collection import Collection, FieldAnswer, FieldRequest
from service.deps import SearchingDep
from service.errors import Unavailable, error_responses
from service.events.traffic import filter_shown, id_of_result, served_model
from service.fields.http import BatchSearchRequest, FieldOptions, SearchRequest
from service.fields.visibility import EVERYTHING, Visibility
from service.interleave.comparisons import Comparisons
from service.interleave.merge import interleave_results
from service.model_state import QueryResult
from service.schemas import (
    BatchSearchResponse,
    FacetOut,
    FacetValue,
    Hit,
    SearchResponse,
    SearchResult,
    json_response,
)
from service.settings import Settings
from service.snippet import make_snippet, query_pattern
from ssi.tokenize import tokenize

log = logging.getLogger(__name__)

router = APIRouter(tags=["search"])

# 400/413: the body checks; 401: a read key; 404: an unknown collection; 409: an adverts collection.
SEARCH_ERRORS = (400, 401, 404, 409, 413, 422, 429, 503)


_batchers: weakref.WeakKeyDictionary[Collection, QueryBatcher] = weakref.WeakKeyDictionary()
_batchers_lock = threading.Lock()


# What a search batch answers each query with: its result, and when it was interleaved (service.interleave), the
# candidate's content hash and who placed each hit.
Answer = tuple[SearchResult, tuple[str, str] | None]


def _canonical(node: Any) -> str | None:
    return None if node is None else json.dumps(node, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class FieldKey:
    """What single searches asking something of the fields (a filter, facets, fields, or a filtered read key) must
    share to run as one batch: the same of each, filters compared as canonical JSON. A batch of them evaluates its
    filter once (one matching set, count and facets for every query of it), and all of them run on the batcher's
    threads instead of a thread each. The first request's own body and key ride along, out of the comparison, for
    the batch's search."""

    filter: str | None
    facets: tuple[str, ...]
    fields: tuple[str, ...]
    visible: str | None
    body: FieldOptions = field(compare=False, hash=False)
    key: Visibility = field(compare=False, hash=False)

    @classmethod
    def of(cls, body: FieldOptions, visible: Visibility) -> FieldKey:
        filter_json, key_json = _canonical(body.filter), _canonical(visible.filter)
        return cls(filter_json, tuple(body.facets), tuple(body.fields), key_json, body, visible)


def batcher_for(collection: Collection, settings: Settings, comparisons: Comparisons | None = None) -> QueryBatcher:
    """The collection's micro-batcher (service.batching): concurrent single searches share one search call,
    whose leader also reads the hits' titles and snippets. While a comparison runs, the leader has the candidate
    search the batch's answers it picks to interleave (one call for them all) and merges each before titles and
    snippets are read, so an interleaved page reads the store once, for the hits it shows."""
    with _batchers_lock:
        batcher = _batchers.get(collection)
        if batcher is None:
            # A weak reference: the batcher (a value of the weak-keyed registry) must not keep its collection
            # alive, so that a dropped collection takes its batcher and the batcher's threads with it.
            owner = weakref.ref(collection)

            def search(queries: Sequence[str], key: BatchKey) -> list[Answer]:
                found = owner()
                if found is None:
                    raise Unavailable("the collection was closed; retry")
                k, offset, ef_search, nprobe, fields = key
                if fields is not None:  # never interleaved: a candidate model is compared on unfiltered searches
                    answers = search_with_fields(
                        found, settings, fields.body, queries, k, offset, ef_search, nprobe, fields.key
                    )
                    return [(answer, None) for answer in answers]
                results = found.search(list(queries), k, offset, ef_search=ef_search, nprobe=nprobe)
                interleaved: list[tuple[str, str] | None] = [None] * len(results)
                if comparisons is not None:
                    live, chosen = comparisons.pick(found, offset, len(results))
                    if live is not None and live.challenger is not None and chosen:
                        try:
                            others = live.challenger.search([queries[i] for i in chosen], k)
                        except Exception:  # the candidate failed: these answers are the served model's alone
                            log.exception("[%s] the candidate of comparison %s failed", found.name, live.spec.id)
                            others = []
                        rng = comparisons.rng()
                        for i, other in zip(chosen, others, strict=False):
                            results[i], teams = interleave_results(results[i], other, k, rng)
                            interleaved[i] = (live.spec.content_hash, teams)
                        found.metrics.interleaved_searches.labels(found.name).inc(len(others))
                answers = to_results(found, settings, results, queries)
                return list(zip(answers, interleaved, strict=True))

            batcher = QueryBatcher(
                search,
                leaders=settings.threads,
                max_batch=settings.max_batch,
                gather_s=settings.batch_gather_ms / 1000,
            )
            _batchers[collection] = batcher
            weakref.finalize(collection, batcher.close)
        return batcher


def scan_chars(settings: Settings, hits: int) -> int:
    """Characters of each hit's text a snippet scans when a request returns `hits` hits in all."""
    return min(settings.snippet_scan_chars, settings.snippet_scan_budget // max(1, hits))


def to_result(
    collection: Collection,
    settings: Settings,
    result: QueryResult,
    query: str | None,
    scan: int | None = None,
    visible: Visibility = EVERYTHING,
) -> SearchResult:
    """Hits with titles and snippets from the store; `query` None means snippets from the opening of each text.

    `scan`: the characters of each hit scanned for a query word (default: as for this result alone).
    """
    return to_results(collection, settings, [result], [query], scan, visible=visible)[0]


def to_results(
    collection: Collection,
    settings: Settings,
    results: Sequence[QueryResult],
    queries: Sequence[str | None],
    scan: int | None = None,
    fields: Sequence[str] = (),
    visible: Visibility = EVERYTHING,
) -> list[SearchResult]:
    """`to_result` of each (result, query), with one store read for the hits of them all (a micro-batch's
    or a /search/batch request's) instead of one per query; `fields`: the fields each hit comes with; `visible`:
    what the request's key may see, checked again on each hit as read (a write may have moved it out since)."""
    scans = [scan_chars(settings, len(r.doc_ids)) if scan is None else scan for r in results]
    wanted = list(dict.fromkeys(doc_id for r in results for doc_id in r.doc_ids))
    # A snippet reads at most scan + width characters; one more tells whether the text goes on ("…").
    docs = collection.get_many(wanted, text_chars=max(scans, default=0) + settings.snippet_chars + 1)
    admitted = collection.admitter(visible)
    out = []
    for result, query, each in zip(results, queries, scans, strict=True):
        pattern = query_pattern(tokenize(query), settings.snippet_words) if query else None
        hits = []
        sentences = result.sentence or [None] * len(result.doc_ids)
        for doc_id, score, semantic, lexical, sentence in zip(
            result.doc_ids, result.scores, result.semantic, result.lexical, sentences, strict=True
        ):
            doc = docs.get(doc_id)
            if doc is None or not admitted(doc.fields):  # deleted (or moved out of the key's filter) since the ranking
                continue
            snippet = make_snippet(doc.text, pattern, settings.snippet_chars, each)
            shown_fields = None
            if fields:
                held = doc.fields or {}
                shown_fields = {name: held[name] for name in fields if name in held}
            hits.append(
                Hit(
                    id=doc_id,
                    title=doc.title,
                    snippet=snippet,
                    score=score,
                    semantic=semantic,
                    lexical=lexical,
                    sentence=sentence,
                    fields=shown_fields,
                )
            )
        out.append(SearchResult(hits=hits, query_words=result.query_words, candidates=result.candidates))
    return out


def search_with_fields(
    collection: Collection,
    settings: Settings,
    body: FieldOptions,
    queries: Sequence[str],
    k: int,
    offset: int,
    ef_search: int | None,
    nprobe: int | None,
    visible: Visibility = EVERYTHING,
) -> list[SearchResult]:
    """A search that asks something of the documents' fields (service.fields): a filter, facets, or fields with
    each hit, or made with a filtered read key (`visible`, service.fields.visibility): every query of `queries`
    under the same filter, evaluated once (a /search/batch request, or the batcher's searches of one FieldKey)."""
    request = FieldRequest(filter=body.filter, facets=list(body.facets))
    found, answer = collection.search_where(
        queries, k, offset, request, ef_search=ef_search, nprobe=nprobe, visible=visible
    )
    scan = scan_chars(settings, sum(len(r.doc_ids) for r in found))
    results = to_results(collection, settings, found, queries, scan, fields=body.fields, visible=visible)
    for result in results:
        add_field_answer(result, body, answer)
    return results


def add_field_answer(result: SearchResult, body: FieldOptions, answer: FieldAnswer) -> None:
    """The count of matching documents and the facets, on a result of a search with a filter or facets."""
    if body.filter is None and not body.facets:
        return
    result.matched = answer.matched
    if body.facets:
        result.facets = {
            name: FacetOut(values=[FacetValue(value=v, count=n) for v, n in facet.values], other=facet.other)
            for name, facet in answer.facets.items()
        }


@router.post(
    "/search",
    response_model=SearchResponse,
    summary="Rank the collection for one query",
    description=(
        "A short query: refused (422) beyond SSI_MAX_QUERY_CHARS characters (4,096 by default). "
        "Each hit's snippet looks for the query's first SSI_SNIPPET_WORDS (32) distinct words in the first "
        "SSI_SNIPPET_SCAN_CHARS (8,192) characters of its text, and in SSI_SNIPPET_SCAN_BUDGET (1,000,000) "
        "characters in all per request (a large batch scans less of each hit). "
        "Serves `documents` collections; an `adverts` collection answers 409."
    ),
    responses=error_responses(*SEARCH_ERRORS),
)
async def search(body: SearchRequest, searching: SearchingDep) -> Response:
    collection, settings, limiter = searching.collection, searching.settings, searching.limiter
    check_search(settings, body, [body.query], batch=False)
    started = time.perf_counter()
    visible = searching.visible
    # A filtered key's search is a filtered one: batched only with searches of the same key's filter.
    fields = FieldKey.of(body, visible) if body.asks_fields() or visible.restricted else None
    key = (body.k, body.offset, body.ef_search, body.nprobe, fields)
    async with limiter.slot():  # the search runs in the batcher's threads: this request holds none
        answer: Answer = await asyncio.wrap_future(
            batcher_for(collection, settings, searching.comparisons).submit(body.query, key)
        )
    result, interleaved = answer
    impression, hits = searching.traffic.show(
        collection.name,
        served_model(collection),
        "search",
        body.query,
        result.hits,
        id_of_result,
        body.offset + 1,
        interleaved,
        filter_shown(body.filter, visible),
    )
    took = (time.perf_counter() - started) * 1000
    return json_response(
        SearchResponse(
            hits=hits,
            query_words=result.query_words,
            candidates=result.candidates,
            matched=result.matched,
            facets=result.facets,
            impression=impression,
            collection=collection.name,
            took_ms=round(took, 3),
        )
    )


@router.post(
    "/search/batch",
    response_model=BatchSearchResponse,
    summary="Rank the collection for several queries",
    description=(
        "Each query as in `POST /search`: at most SSI_MAX_BATCH (64) of them, and queries × k at most "
        "SSI_MAX_BATCH_HITS (6,400)."
    ),
    responses=error_responses(*SEARCH_ERRORS),
)
async def search_batch(body: BatchSearchRequest, searching: SearchingDep) -> Response:
    collection, settings, limiter = searching.collection, searching.settings, searching.limiter
    check_search(settings, body, body.queries, batch=True)
    started = time.perf_counter()

    visible = searching.visible

    def work() -> list[SearchResult]:
        if body.asks_fields() or visible.restricted:
            return search_with_fields(
                collection, settings, body, body.queries, body.k, body.offset, body.ef_search, body.nprobe, visible
            )
        results = collection.search(body.queries, body.k, body.offset, ef_search=body.ef_search, nprobe=body.nprobe)
        return to_results(
            collection, settings, results, body.queries, scan_chars(settings, sum(len(r.doc_ids) for r in results))
        )

    results = await limiter.run(work)
    model = served_model(collection)
    shown = filter_shown(body.filter, visible)
    for query, result in zip(body.queries, results, strict=True):
        result.impression, result.hits = searching.traffic.show(
            collection.name, model, "search", query, result.hits, id_of_result, body.offset + 1, filtered=shown
        )
    took = (time.perf_counter() - started) * 1000
    return json_response(BatchSearchResponse(collection=collection.name, results=results, took_ms=round(took, 3)))
