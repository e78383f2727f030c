"""FastAPI dependencies, declared once as Annotated aliases and used by every router.

Routes under `/collections/{collection}/...` address a named collection; the same routes without
the prefix address the default one (`documents`), so `CollectionDep` reads the optional path
parameter instead of each route declaring it.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request

from service.admission import Limiter
from service.catalog import Catalog
from service.collection import Collection
from service.errors import Forbidden, Unauthorized
from service.metrics import Metrics
from service.settings import Settings


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_catalog(request: Request) -> Catalog:
    return request.app.state.catalog


def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]


def get_collection(request: Request, catalog: CatalogDep) -> Collection:
    return catalog.get(request.path_params.get("collection"))


CollectionDep = Annotated[Collection, Depends(get_collection)]


def get_search_limiter(request: Request) -> Limiter:
    return request.app.state.search_limiter


def get_write_limiter(request: Request) -> Limiter:
    return request.app.state.write_limiter


SearchLimiterDep = Annotated[Limiter, Depends(get_search_limiter)]
WriteLimiterDep = Annotated[Limiter, Depends(get_write_limiter)]


def require_api_key(
    settings: SettingsDep,
    x_api_key: Annotated[
        str | None, Header(description="the service's API key (SSI_API_KEY); needed for writes")
    ] = None,
) -> None:
    """Writes need X-API-Key equal to SSI_API_KEY, compared in constant time; no key configured: no writes."""
    if settings.api_key is None:
        if settings.insecure_writes:
            return
        raise Forbidden("writes are disabled on this server: it has no API key (set SSI_API_KEY)")
    if x_api_key is None:
        raise Unauthorized("this write needs the X-API-Key header", headers={"WWW-Authenticate": "X-API-Key"})
    expected = settings.api_key.get_secret_value().encode("utf-8")
    if not hmac.compare_digest(x_api_key.encode("utf-8", "surrogateescape"), expected):
        raise Unauthorized("wrong X-API-Key", headers={"WWW-Authenticate": "X-API-Key"})


ApiKeyDep = Annotated[None, Depends(require_api_key)]
