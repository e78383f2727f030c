"""The FastAPI application: routers, middleware, error handlers and the collections' lifecycle.

`create_app(settings)` builds one app around one `Catalog`. The collections load in a background
thread started by the lifespan, so the server answers `/healthz` at once and `/readyz` when ready;
at shutdown unsaved index changes are snapshotted and the stores closed.
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

from service.admission import Limiter
from service.catalog import Catalog
from service.errors import ServiceError
from service.metrics import Metrics, MetricsMiddleware
from service.request_body import BodyLimitMiddleware
from service.routes import admin, documents, health, metrics, model, pages, search
from service.routes.pages import STATIC_DIR
from service.settings import Settings
from service.threads import limit_blas_threads

log = logging.getLogger(__name__)


def _location(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def _validation_message(errors: list[dict[str, Any]]) -> str:
    shown = [f"{_location(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(shown) + more


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        # The offending input is not echoed back: it may be megabytes long.
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()
        ]
        detail = _validation_message(errors)
        content_type = request.headers.get("content-type", "")
        if (
            request.method in {"POST", "PUT"}
            and "json" not in content_type
            and any(e["loc"] == ["body"] for e in errors)
        ):
            # FastAPI reads a body as JSON only when it says so; without this, curl -d gets a puzzling message.
            detail = f"send the body as JSON with 'Content-Type: application/json' (got {content_type or 'none'!r})"
        return JSONResponse({"detail": detail, "errors": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error answering %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error; see the server log"}, status_code=500)


def create_app(settings: Settings, on_fatal: Callable[[str], None] | None = None) -> FastAPI:
    """The service app. `on_fatal(message)` is called if a collection cannot load (the CLI then exits)."""
    limit_blas_threads()
    metrics_registry = Metrics()
    catalog = Catalog(settings, metrics_registry)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        catalog.start_loading(on_fatal)
        try:
            yield
        finally:
            catalog.close()

    app = FastAPI(
        title="SSI search",
        summary="Search ranked by a Supervised Semantic Indexing model: f(q, d) = (A q)·e(d) + Σ w_i q_i d_i",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.catalog = catalog
    app.state.metrics = metrics_registry
    app.state.search_limiter = Limiter(
        "search", settings.max_concurrency, settings.max_queue, settings.queue_timeout, metrics_registry.reject
    )
    app.state.write_limiter = Limiter(
        "write", 1, settings.max_pending_writes, settings.queue_timeout * 6, metrics_registry.reject
    )
    install_error_handlers(app)

    for router in (search.router, documents.router, model.router):
        app.include_router(router)
        app.include_router(router, prefix="/collections/{collection}")
    for router in (admin.router, health.router, metrics.router, pages.router):
        app.include_router(router)
    STATIC_DIR.mkdir(exist_ok=True)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    # Outermost first: metrics see every answer, including the body checks' 413 and 400.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics_registry)
    return app
