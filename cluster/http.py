"""The router's HTTP API: the single node's routes and bodies (service.schemas), answered by the shards.

`POST /search`, `POST /search/batch`, `GET /documents/{id}`, `GET /documents/{id}/similar`,
`PUT /documents/{id}`, `POST /documents`, `DELETE /documents/{id}`, `GET /model`,
`GET /words/{word}/nearest`, `GET /metrics`, `POST /admin/reload`, `POST /clicks` and, on an adverts index,
`POST /match` (service.routes.match's checks and bodies; `page_id` excepted: no documents collection is served
beside the adverts, so a page is sent as text) take the same requests and give the
same responses as `ssi serve` (documents' fields, filters, facets and fields with each hit included: the bodies
of service.fields.http; cluster.field_schema checks writes against the cluster's field types, cluster.facet_merge
makes facets exact), with its bounds (service.bounds), keys (service.deps: SSI_API_KEY for writes,
SSI_READ_KEY for reads), admission limits (SSI_MAX_CONCURRENCY fan-outs at once, SSI_MAX_QUEUE
waiting: 429/503 beyond), body and host checks, request metrics (service.app.install_guards) and
error bodies (service.app's handlers); `GET /model` adds every shard's index, `GET /cluster` lists
the shards. Ranked answers name their `impression`, and clicks are recorded by the router in its own traffic
log (cluster.events), not by the shards. The app is built per process (`build_app`), so the Ray Serve router
(cluster.deploy) and an in-process router (cluster.fanout.LocalShards) serve the very same routes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path as PathLib
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse

from cluster.events import router_traffic, served_model
from cluster.fanout import Fanout
from cluster.interleave import RouterComparison
from cluster.manifest import ClusterIndexError
from service.advert_schemas import MatchRequest, MatchResponse
from service.adverts import match_filter, request_filter
from service.app import install_error_handlers, install_guards
from service.bounds import check_document_id, check_documents, check_paging, check_search
from service.deps import (
    AdminKeyDep,
    AdminRoute,
    ApiKeyDep,
    ReadKeyDep,
    SearchLimiterDep,
    SettingsDep,
    SingleQueryValues,
    WriteLimiterDep,
)
from service.errors import Forbidden, InvalidInput, NotFound, error_responses
from service.events.schemas import ClickRequest, ClickResponse
from service.events.traffic import filter_shown, id_of_result
from service.fields.checks import check_shape
from service.fields.http import (
    BatchSearchRequest,
    DocumentBody,
    DocumentIn,
    DocumentsIn,
    FieldOptions,
    SearchRequest,
)
from service.interleave.merge import interleave_hits
from service.interleave.schemas import InterleaveRequest, InterleaveStatus
from service.metrics import Metrics
from service.routes import metrics
from service.routes.documents import FILTER, OFFSET, K, LookupId, WrittenId, parsed_filter
from service.routes.match import MATCH_ERRORS, check_match
from service.routes.words import MAX_NEIGHBOURS, MAX_WORD_CHARS
from service.schemas import (
    BatchSearchResponse,
    DeleteResponse,
    DocumentOut,
    ModelResponse,
    NearestWordsResponse,
    ReloadRequest,
    ReloadResponse,
    SearchResponse,
    WriteResponse,
)
from service.settings import Settings
from ssi.fields.filter_form import check_filter_form
from ssi.interleaving import TEST_FIELDS

COLLECTION_NAME = "documents"


def options(body: FieldOptions) -> FieldOptions | None:
    """What a search asks of the fields, or None when it asks nothing (then it is the plain search)."""
    return body if body.asks_fields() else None


async def get_fanout(request: Request) -> Fanout:
    return request.app.state.fanout


def took_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def check_filter(settings: Settings, node: Any) -> None:
    """A request's filter has the form of one (ssi.fields.filter_form, at most SSI_MAX_FILTER_DEPTH levels), a
    422 naming the problem otherwise; its fields and their types are checked by the shards (cluster.fanout)."""
    if node is not None:
        try:
            check_filter_form(node, "filter", max_depth=settings.max_filter_depth)
        except ValueError as error:
            raise InvalidInput(str(error)) from None


def written(doc_id: str, title: str, text: str, fields: Any, where: str) -> dict[str, Any]:
    """A document of a write as the shards take it, its fields checked in shape (a 422 naming the problem); their
    types are checked against the cluster's (cluster.field_schema)."""
    return {"id": doc_id, "title": title, "text": text, "fields": check_shape(fields, where) if fields else None}


def refuse_filtered_keys(settings: Settings) -> None:
    """Per-key visibility (SSI_READ_KEYS, SSI_READ_KEYS_FILE) is a single server's for now: the router refuses to
    start with filtered read keys (cluster.deploy checks before it joins a cluster), never serving a filtered key
    that would see every document."""
    if settings.read_keys:
        raise ClusterIndexError(
            "SSI_READ_KEYS (filtered read keys, per-key visibility) is not supported by the sharded cluster's router "
            "yet: unset SSI_READ_KEYS and SSI_READ_KEYS_FILE, or serve the collection with `ssi serve`"
        )


def build_app(
    settings: Settings,
    fanout: Fanout,
    about: dict[str, Any] | None = None,
    data_dir: PathLib | None = None,
    traffic: Any | None = None,
) -> FastAPI:
    """The router app over `fanout`; `about` (the manifest's summary) is shown by GET /cluster; `data_dir` holds
    the router's traffic log (cluster.events: cluster.deploy passes `<index>/router`; None keeps no log), or
    `traffic` is the log to keep (with replicated shards: cluster.replication.events.ShippedTraffic over it)."""
    refuse_filtered_keys(settings)
    about = {} if about is None else about  # one dict: a reload's update reaches GET /cluster and the log's model
    traffic = router_traffic(settings, data_dir) if traffic is None else traffic

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            traffic.close()  # the impressions still queued are committed

    app = FastAPI(title="ssi-search (sharded)", description=__doc__, lifespan=lifespan)
    app.state.settings = settings
    app.state.fanout = fanout
    app.state.traffic = traffic
    install_error_handlers(app)
    reads = [ReadKeyDep] if settings.read_key is not None else []
    name = settings.collection
    metrics_of_app = Metrics()  # the request metrics (install_guards) and the comparison's gauges
    comparison = RouterComparison(
        fanout, traffic, name, PathLib(data_dir) if data_dir is not None else None, metrics_of_app
    )
    app.state.comparison = comparison

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        shards = await fanout.describe()
        ready = all(s.get("status") == "ready" for s in shards)
        return JSONResponse(
            {"status": "ready" if ready else "loading", "shards": shards}, status_code=200 if ready else 503
        )

    @app.get("/cluster", dependencies=reads)
    async def cluster() -> dict[str, Any]:
        return {"index": about, "shards": await fanout.describe()}

    @app.post("/search", response_model=SearchResponse, dependencies=reads)
    async def search(body: SearchRequest, settings: SettingsDep, limiter: SearchLimiterDep) -> SearchResponse:
        check_search(settings, body, [body.query], batch=False)
        check_filter(settings, body.filter)
        started = time.perf_counter()
        await comparison.count_now_and_then()
        # a search with fields is never interleaved (its filter is its own), as on one node
        interleave = None if body.asks_fields() else comparison.pick(body.offset, served_model(about))
        interleaved: tuple[str, str] | None = None
        async with limiter.slot():
            served = fanout.search(
                [body.query], body.k, body.offset, body.ef_search, body.nprobe, options(body), settings.facet_size
            )
            if interleave is None:
                (result,) = await served
            else:  # cluster.interleave: both first pages at once, merged by team-draft
                (result,), other = await asyncio.gather(
                    served, comparison.candidate_page(interleave, body.query, body.k)
                )
                if other is not None:
                    result, teams = interleave_hits(result, other, body.k, comparison.rng())
                    interleaved = (interleave.content_hash, teams)
        result.impression, result.hits = traffic.show(
            name,
            served_model(about),
            "search",
            body.query,
            result.hits,
            id_of_result,
            body.offset + 1,
            interleaved,
            filter_shown(body.filter),  # the filter the list was ranked under, as one node records it
        )
        return SearchResponse(**result.model_dump(), collection=name, took_ms=took_ms(started))

    @app.post("/search/batch", response_model=BatchSearchResponse, dependencies=reads)
    async def search_batch(
        body: BatchSearchRequest, settings: SettingsDep, limiter: SearchLimiterDep
    ) -> BatchSearchResponse:
        check_search(settings, body, body.queries, batch=True)
        check_filter(settings, body.filter)
        started = time.perf_counter()
        async with limiter.slot():
            results = await fanout.search(
                body.queries, body.k, body.offset, body.ef_search, body.nprobe, options(body), settings.facet_size
            )
        shown = filter_shown(body.filter)
        for query, result in zip(body.queries, results, strict=True):
            result.impression, result.hits = traffic.show(
                name, served_model(about), "search", query, result.hits, id_of_result, body.offset + 1, filtered=shown
            )
        return BatchSearchResponse(collection=name, results=results, took_ms=took_ms(started))

    @app.get(
        "/documents/{doc_id:docid}/similar", response_model=SearchResponse, dependencies=[*reads, SingleQueryValues]
    )
    async def similar(
        doc_id: LookupId,
        settings: SettingsDep,
        limiter: SearchLimiterDep,
        k: K = 10,
        offset: OFFSET = 0,
        filter: FILTER = None,
    ) -> SearchResponse:
        check_paging(settings, k, offset)
        node = parsed_filter(filter)
        check_filter(settings, node)
        started = time.perf_counter()
        async with limiter.slot():
            result = await fanout.similar(doc_id, k, offset, node)
        return SearchResponse(**result.model_dump(), collection=name, took_ms=took_ms(started))

    def adverts_index() -> None:
        """/match needs an adverts index (`ssi index --type adverts`): a documents index answers as a single node
        that hosts no adverts collection does (404), from a dependency as there."""
        if about.get("type") != "adverts":
            raise NotFound("this service hosts no adverts collection (build one with `ssi index --type adverts`)")

    @app.post(
        "/match",
        response_model=MatchResponse,
        dependencies=[*reads, Depends(adverts_index)],
        responses=error_responses(*MATCH_ERRORS),
    )
    async def match(body: MatchRequest, settings: SettingsDep, limiter: SearchLimiterDep) -> MatchResponse:
        """The adverts for a page or a batch of pages: every shard's exact top k, merged (cluster.fanout.match)."""
        texts = check_match(body, settings)
        if body.page_id is not None:
            raise NotFound(
                f"page_id names a document of a documents collection, and this cluster serves the adverts "
                f"collection '{name}' only: send the page's text (page or pages)"
            )
        started = time.perf_counter()
        async with limiter.slot():
            results = await fanout.match(texts, body.k, match_filter(body.filters, body.filter))
        shown = filter_shown(request_filter(body.filters, body.filter))
        for page, result in zip(texts, results, strict=True):
            result.impression, result.ads = traffic.show(
                name, served_model(about), "match", page, result.ads, id_of_result, filtered=shown
            )
        return MatchResponse(collection=name, results=results, took_ms=took_ms(started))

    @app.post(
        "/clicks",
        response_model=ClickResponse,
        dependencies=reads,
        tags=["events"],
        summary="Report a click on a result of an answer",
        responses=error_responses(400, 401, 403, 404, 413, 422, 429, 503, 507),
    )
    async def click(body: ClickRequest, limiter: SearchLimiterDep) -> ClickResponse:
        """A click on a merged answer the router named (service.routes.events' rules: a recent impression of this
        router's log, an id it showed; a repeat counts once); durable once acknowledged."""
        outcome = await limiter.run(traffic.click, name, body.impression, body.id, body.dwell_ms)
        return ClickResponse(recorded=outcome.recorded, position=outcome.position)

    @app.get("/model", response_model=ModelResponse, dependencies=reads)
    async def model() -> ModelResponse:
        return ModelResponse(**(await fanout.model()))

    @app.get("/words/{word}/nearest", response_model=NearestWordsResponse, dependencies=[*reads, SingleQueryValues])
    async def nearest(
        word: Annotated[str, Path(min_length=1, max_length=MAX_WORD_CHARS, description="one word")],
        k: Annotated[int, Query(ge=1, le=MAX_NEIGHBOURS, description="how many neighbours")] = 5,
    ) -> NearestWordsResponse:
        return NearestWordsResponse(**(await fanout.nearest(word, k)))

    @app.get("/documents/{doc_id:docid}", response_model=DocumentOut, dependencies=reads)
    async def get_document(doc_id: LookupId) -> DocumentOut:
        return DocumentOut(collection=name, **(await fanout.get(doc_id)))

    @app.put("/documents/{doc_id:writtenid}", response_model=WriteResponse)
    async def put_document(
        doc_id: WrittenId, body: DocumentBody, _: ApiKeyDep, settings: SettingsDep, limiter: WriteLimiterDep
    ) -> WriteResponse:
        check_documents(settings, [DocumentIn(id=doc_id, title=body.title, text=body.text)], field="document")
        doc = written(doc_id, body.title, body.text, body.fields, "document.fields")
        async with limiter.slot():
            seqs = await fanout.put([doc])
        return WriteResponse(collection=name, ids=[doc_id], seq=seqs[-1])

    @app.post("/documents", response_model=WriteResponse)
    async def post_documents(
        body: DocumentsIn, _: ApiKeyDep, settings: SettingsDep, limiter: WriteLimiterDep
    ) -> WriteResponse:
        check_documents(settings, body.documents)
        docs = [
            written(d.id, d.title, d.text, d.fields, f"documents[{i}].fields") for i, d in enumerate(body.documents)
        ]
        async with limiter.slot():
            seqs = await fanout.put(docs)
        return WriteResponse(collection=name, ids=[d.id for d in body.documents], seq=max(seqs))

    @app.delete("/documents/{doc_id:writtenid}", response_model=DeleteResponse)
    async def delete_document(
        doc_id: WrittenId, _: ApiKeyDep, settings: SettingsDep, limiter: WriteLimiterDep
    ) -> DeleteResponse:
        check_document_id(settings, doc_id)
        async with limiter.slot():
            seq = await fanout.delete(doc_id)
        return DeleteResponse(collection=name, id=doc_id, deleted=True, seq=seq)

    admin = APIRouter(tags=["admin"], route_class=AdminRoute)

    @admin.post("/admin/reload", response_model=ReloadResponse, responses=error_responses(400, 401, 403, 409, 422, 503))
    async def reload(_: AdminKeyDep, body: ReloadRequest | None = None) -> ReloadResponse:
        """Swap every shard to a new bundle, all or none (cluster.fanout.Fanout.reload)."""
        body = body or ReloadRequest()
        if body.collection not in (None, name):
            raise NotFound(f"no collection '{body.collection}' on this cluster (it serves '{name}')")
        current = str(about.get("bundle", ""))
        bundle = allowed_bundle(settings, current, body.bundle)
        started = time.perf_counter()
        answer = await fanout.reload(str(bundle))
        about.update(bundle=answer["bundle"], bundle_hash=answer["content_hash"], form=answer["form"])
        seconds = round(time.perf_counter() - started, 4)
        return ReloadResponse(collection=name, seconds=seconds, **answer)

    def this_collection(asked: str | None) -> None:
        if asked not in (None, name):
            raise NotFound(f"no collection '{asked}' on this cluster (it serves '{name}')")

    interleave_errors = error_responses(400, 401, 403, 404, 409, 413, 422, 503)

    @admin.post("/admin/interleave", response_model=InterleaveStatus, responses=interleave_errors)
    async def interleave_start(_: AdminKeyDep, body: InterleaveRequest) -> InterleaveStatus:
        """Interleave a candidate bundle with the served one over every shard (cluster.interleave)."""
        this_collection(body.collection)
        bundle = allowed_bundle(settings, str(about.get("bundle", "")), body.bundle)
        test = body.model_dump(include=set(TEST_FIELDS))
        return InterleaveStatus(**await comparison.start(bundle, served_model(about), body.share, test))

    @admin.get("/admin/interleave", response_model=InterleaveStatus, responses=error_responses(401, 403, 404, 422))
    async def interleave_status(_: AdminKeyDep, collection: str | None = None) -> InterleaveStatus:
        this_collection(collection)
        return InterleaveStatus(**await comparison.status(served_model(about)))

    @admin.delete("/admin/interleave", response_model=InterleaveStatus, responses=error_responses(401, 403, 404, 422))
    async def interleave_stop(_: AdminKeyDep, collection: str | None = None) -> InterleaveStatus:
        this_collection(collection)
        return InterleaveStatus(**await comparison.stop(served_model(about)))

    app.include_router(admin)
    app.include_router(metrics.router, dependencies=reads)
    install_guards(app, settings, metrics_of_app)
    return app


def allowed_bundle(settings: Settings, current: str, requested: str | None) -> PathLib:
    """The bundle a reload asks for (the served one when None), if under SSI_BUNDLE_ROOT or, without it, beside
    the served bundle: the single node's rule (service.collection.Collection.resolve_bundle)."""
    if requested is None:
        return PathLib(current)
    path = PathLib(requested).expanduser().resolve()
    root = settings.bundle_root.resolve() if settings.bundle_root is not None else PathLib(current).resolve().parent
    if not (path == root or path.is_relative_to(root)):
        raise Forbidden(f"bundle {requested!r} is outside the allowed bundle folder ({root}); see SSI_BUNDLE_ROOT")
    return path
