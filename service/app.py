"""The FastAPI application: routers, middleware, error handlers and the collections' lifecycle.

`create_app(settings)` builds one app around one `Catalog`. The collections load in a background
thread started by the lifespan, so the server answers `/healthz` at once and `/readyz` when ready;
at shutdown unsaved index changes are snapshotted and the stores closed.

Every error is `{"detail": message}` JSON: a 422 adds the first few problems (never the offending
input, never more than `MAX_REPORTED_ERRORS`, each cut short, so a body of a million bad items gets
a small answer); a 405 lists in `Allow` every method of every route of that path.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from service import busy
from service.admission import Limiter
from service.bounds import body_limits
from service.catalog import Catalog
from service.deps import CollectionPathDep, ReadKeyDep
from service.errors import ServiceError
from service.events.traffic import Traffic
from service.interleave.comparisons import Comparisons
from service.metrics import KNOWN_METHODS, Metrics, MetricsMiddleware
from service.openapi import install_exact_schema
from service.request_body import BodyLimitMiddleware
from service.routes import admin, documents, events, health, interleave, match, metrics, model, pages, search, words
from service.routes.pages import STATIC_DIR
from service.settings import Settings
from service.threads import limit_blas_threads
from service.trusted_hosts import AllowedHostsMiddleware

log = logging.getLogger(__name__)


MAX_REPORTED_ERRORS = 10  # problems listed in a 422's `errors`
SUMMARIZED_ERRORS = 5  # of which named in its `detail`
MAX_MESSAGE_CHARS = 200
MAX_LOC_PARTS = 8
MAX_LOC_CHARS = 64


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _issue(error: dict[str, Any]) -> dict[str, Any]:
    """One validation problem, bounded: its location (field names cut short), message and type."""
    loc = [p if isinstance(p, int) else _cut(str(p), MAX_LOC_CHARS) for p in list(error.get("loc", ()))[:MAX_LOC_PARTS]]
    message = str(error.get("msg", "invalid"))
    if error.get("type") == "json_invalid":
        reason = (error.get("ctx") or {}).get("error", "")
        message = f"the body is not valid JSON ({reason} at character {loc[-1] if loc else '?'})"
        loc = ["body"]
    return {"loc": loc, "msg": _cut(message, MAX_MESSAGE_CHARS), "type": _cut(str(error.get("type", "")), 64)}


def _location(loc: list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def _validation_message(issues: list[dict[str, Any]], total: int) -> str:
    shown = [f"{_location(e['loc'])}: {e['msg']}" for e in issues[:SUMMARIZED_ERRORS]]
    more = f" (and {total - len(shown)} more)" if total > len(shown) else ""
    return "; ".join(shown) + more


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of this path answers. Starlette names only the methods of the first route
    that matches the path, so a 405 on /documents/{id} said GET alone; each method is tried on every route."""
    allowed = []
    for method in sorted(KNOWN_METHODS):
        scope = {**request.scope, "method": method}
        if any(route.matches(dict(scope))[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return allowed


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        content: dict[str, Any] = {"detail": exc.message}
        if exc.status_code == 422:  # every 422 has one shape (ValidationErrorBody); the message names the field
            issue = {"loc": [], "msg": _cut(exc.message, MAX_MESSAGE_CHARS), "type": "value_error"}
            content.update(errors=[issue], error_count=1)
        return JSONResponse(content, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # The offending input is not echoed back (it may be megabytes long), and only the first
        # problems are (a body can hold thousands).
        all_errors = exc.errors()
        issues = [_issue(e) for e in all_errors[:MAX_REPORTED_ERRORS]]
        detail = _validation_message(issues, len(all_errors))
        content_type = request.headers.get("content-type", "")
        if (
            request.method in {"POST", "PUT"}
            and "json" not in content_type
            and any(e["loc"] == ["body"] and e["type"] != "json_invalid" for e in issues)
        ):
            # FastAPI reads a body as JSON only when it says so; without this, curl -d gets a puzzling message.
            got = _cut(content_type, 64) or "none"
            detail = f"send the body as JSON with 'Content-Type: application/json' (got {got!r})"
        return JSONResponse({"detail": detail, "errors": issues, "error_count": len(all_errors)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        detail = str(exc.detail)
        if exc.status_code == 405:
            allowed = allowed_methods(request)
            headers["Allow"] = ", ".join(allowed)
            detail = f"method not allowed on this path; it allows {', '.join(allowed)}"
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error answering %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error; see the server log"}, status_code=500)


def create_app(
    settings: Settings, on_fatal: Callable[[str], None] | None = None, board: busy.Board | None = None
) -> FastAPI:
    """The service app. `on_fatal(message)` is called if a collection cannot load (the CLI then exits).

    `board`: where this process counts its searches (service.busy): a worker's slot of its group's array; by
    default one of its own, over the cores its threads may use."""
    limit_blas_threads()
    busy.use(board or busy.Board(cores=settings.workers * settings.threads))
    metrics_registry = Metrics()
    catalog = Catalog(settings, metrics_registry)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        catalog.start_loading(on_fatal)
        app.state.comparisons.watch()
        try:
            yield
        finally:
            app.state.comparisons.close()
            app.state.traffic.close()
            catalog.close()

    app = FastAPI(
        title="SSI search",
        summary="Search ranked by a Supervised Semantic Indexing model: f(q, d) = (A q)·e(d) + Σ w_i q_i d_i",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.catalog = catalog
    catalog.after_load(match.warm_adverts)  # an adverts collection's page featurizer, before its first /match
    app.state.traffic = Traffic(settings, metrics_registry)  # impressions and clicks (service.events)
    # A candidate interleaved with the served model (service.interleave)
    app.state.comparisons = Comparisons(catalog, app.state.traffic, metrics_registry)
    install_error_handlers(app)

    # With SSI_READ_KEY (or SSI_READ_KEYS) set, the read routes need a key; without, they declare none.
    read = [ReadKeyDep] if settings.reads_need_key else []
    for router, needs in (
        (search.router, read),
        (events.router, read),
        (documents.read_router, read),
        (documents.write_router, []),
        (model.router, read),
        (words.router, read),
        (match.read_router, read),
        (match.write_router, []),
    ):
        app.include_router(router, dependencies=needs)
        app.include_router(router, prefix="/collections/{collection}", dependencies=[*needs, CollectionPathDep])
    app.include_router(metrics.router, dependencies=read)
    for router in (admin.router, interleave.router, health.router, pages.router):
        app.include_router(router)
    STATIC_DIR.mkdir(exist_ok=True)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    install_exact_schema(app, settings, list(catalog.collections), catalog.field_types)

    install_guards(app, settings, metrics_registry)
    return app


def install_guards(app: FastAPI, settings: Settings, metrics: Metrics) -> None:
    """What stands in front of every app answering the HTTP API (this one and the cluster's router):
    admission limits for searches and writes, the body and host checks, and the request metrics."""
    app.state.metrics = metrics
    app.state.search_limiter = Limiter(
        "search", settings.max_concurrency, settings.max_queue, settings.queue_timeout, metrics.reject
    )
    app.state.write_limiter = Limiter(
        "write", 1, settings.max_pending_writes, settings.queue_timeout * 6, metrics.reject
    )
    # Added innermost first: metrics see every answer, including the host check's and the body checks' 400/413.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, route_limits=body_limits(settings))
    if settings.allowed_hosts:
        app.add_middleware(AllowedHostsMiddleware, allowed_hosts=settings.allowed_hosts)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(busy.BusyMiddleware)  # a process answering any request uses a core (service.busy)
