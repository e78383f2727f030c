"""FastAPI dependencies, declared once as Annotated aliases and used by every router.

Routes under `/collections/{collection}/...` address a named collection; the same routes without
the prefix address the default one (`documents`), so `CollectionDep` reads the optional path
parameter instead of each route declaring it (`CollectionPathDep`, added where the prefix is,
declares it in the schema). Keys: `ReadKeyDep` (added to the read routers only when SSI_READ_KEY or SSI_READ_KEYS
is set, so the schema declares what is enforced), `ApiKeyDep` (writes), `AdminKeyDep` (reloads); `VisibleDep` and
`Searching.visible`: what a filtered read key may see (service.fields.visibility).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Path, Request, Response
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader
from pydantic import SecretStr

from service.admission import Limiter
from service.catalog import Catalog
from service.collection import Collection
from service.errors import Forbidden, InvalidInput, Unauthorized
from service.events.traffic import Traffic
from service.fields.visibility import EVERYTHING, Visibility, read_key_id
from service.interleave.comparisons import Comparisons
from service.metrics import Metrics
from service.settings import COLLECTION_NAME, Settings


# The dependencies that do no blocking work are `async def`: FastAPI runs a plain `def` dependency in
# its thread pool, a thread hop each (five per search), which cost more CPU than the search's scan on
# a small collection (py-spy on the 2-core machine).
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_catalog(request: Request) -> Catalog:
    return request.app.state.catalog


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]


def _collection_of(request: Request) -> Collection:
    """The collection the path names (`/collections/{collection}/...`), or the default one."""
    return request.app.state.catalog.get(request.path_params.get("collection"))


async def get_collection(request: Request) -> Collection:
    return _collection_of(request)


async def collection_path(
    collection: Annotated[
        str,
        Path(
            pattern=COLLECTION_NAME.pattern,
            max_length=64,
            description="a collection this service hosts (GET /readyz lists them); the routes without "
            "the /collections/{collection} prefix address the default one",
        ),
    ],
) -> None:
    """Declares (and bounds) the path parameter of the `/collections/{collection}/...` routes;
    `get_collection` reads it, so that the unprefixed routes share the same code."""


CollectionPathDep = Depends(collection_path)


CollectionDep = Annotated[Collection, Depends(get_collection)]


async def get_search_limiter(request: Request) -> Limiter:
    return request.app.state.search_limiter


async def get_write_limiter(request: Request) -> Limiter:
    return request.app.state.write_limiter


SearchLimiterDep = Annotated[Limiter, Depends(get_search_limiter)]
WriteLimiterDep = Annotated[Limiter, Depends(get_write_limiter)]


@dataclass(frozen=True, slots=True)
class Searching:
    """What a search route needs of the app, as one dependency: FastAPI resolves each dependency (and the catalog
    beneath the collection) on the event loop for every request, so the hot routes ask for one, not four."""

    collection: Collection
    settings: Settings
    limiter: Limiter
    traffic: Traffic
    comparisons: Comparisons | None  # None on an app that interleaves nothing (the cluster's router)
    visible: Visibility = EVERYTHING  # what the request's key may see (service.fields.visibility)


async def get_searching(request: Request) -> Searching:
    state = request.app.state
    return Searching(
        _collection_of(request),
        state.settings,
        state.search_limiter,
        state.traffic,
        getattr(state, "comparisons", None),
        key_visibility(state.settings, request.headers.get("x-api-key")),
    )


SearchingDep = Annotated[Searching, Depends(get_searching)]


# The three keys travel in one header; each is its own security scheme so the OpenAPI schema says
# which key a route needs. auto_error=False: the checks below answer with our own messages.
_READ_KEY = APIKeyHeader(
    name="X-API-Key",
    scheme_name="ReadKey",
    auto_error=False,
    description="SSI_READ_KEY, a key of SSI_READ_KEYS (it sees only the documents inside its filter), or the write or "
    "admin key; needed for reads only when SSI_READ_KEY or SSI_READ_KEYS is set",
)
_WRITE_KEY = APIKeyHeader(
    name="X-API-Key", scheme_name="WriteKey", auto_error=False, description="SSI_API_KEY; needed for writes"
)
_ADMIN_KEY = APIKeyHeader(
    name="X-API-Key",
    scheme_name="AdminKey",
    auto_error=False,
    description="SSI_ADMIN_KEY, or SSI_API_KEY when no admin key is set; needed for /admin/reload",
)


async def refuse_repeated_query(request: Request) -> None:
    """A query parameter given twice is refused: FastAPI would keep one value and drop the other unread
    (`k=abc&k=3` answered as k=3), serving the request as something it did not say."""
    names = [name for name, _ in request.query_params.multi_items()]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidInput(f"query parameter {repeated[0]!r} is given {names.count(repeated[0])} times: give it once")


SingleQueryValues = Depends(refuse_repeated_query)


def key_matches(given: str | None, *keys: SecretStr | None) -> bool:
    """Whether `given` equals one of the configured `keys`, compared in constant time (every key is compared)."""
    if given is None:
        return False
    candidate = given.encode("utf-8", "surrogateescape")
    matched = False
    for key in keys:
        if key is not None:
            matched |= hmac.compare_digest(candidate, key.get_secret_value().encode("utf-8"))
    return matched


def _refuse(given: str | None, what: str) -> Unauthorized:
    message = f"{what} needs the X-API-Key header" if given is None else "wrong X-API-Key"
    return Unauthorized(message, headers={"WWW-Authenticate": "X-API-Key"})


def key_visibility(settings: Settings, given: str | None) -> Visibility:
    """What a request with X-API-Key `given` may see: its filtered read key's filter (SSI_READ_KEYS), else every
    document (the read, write and admin keys; without a key the read key check has let the request through, so
    none is needed). Every filtered key is compared, in constant time."""
    if not settings.read_keys or given is None:
        return EVERYTHING
    candidate = given.encode("utf-8", "surrogateescape")
    found = None
    for entry in settings.read_keys:
        if hmac.compare_digest(candidate, entry.key.get_secret_value().encode("utf-8")):
            found = entry.filter
    return EVERYTHING if found is None else Visibility(found, read_key_id(given))


async def get_visibility(request: Request) -> Visibility:
    return key_visibility(request.app.state.settings, request.headers.get("x-api-key"))


VisibleDep = Annotated[Visibility, Depends(get_visibility)]


async def require_read_key(settings: SettingsDep, x_api_key: Annotated[str | None, Depends(_READ_KEY)]) -> None:
    """With SSI_READ_KEY or SSI_READ_KEYS set, reads need one of the service's keys (a writer or an admin may read
    too; a filtered read key sees only its documents: `key_visibility`)."""
    if not settings.reads_need_key:
        return
    filtered = [entry.key for entry in settings.read_keys]
    if not key_matches(x_api_key, settings.read_key, settings.api_key, settings.admin_key, *filtered):
        raise _refuse(x_api_key, "this read (SSI_READ_KEY or SSI_READ_KEYS is set)")


def require_api_key(settings: SettingsDep, x_api_key: Annotated[str | None, Depends(_WRITE_KEY)]) -> None:
    """Writes need X-API-Key equal to SSI_API_KEY, compared in constant time; no key configured: no writes."""
    if settings.api_key is None:
        if settings.insecure_writes:
            return
        raise Forbidden("writes are disabled on this server: it has no API key (set SSI_API_KEY)")
    if not key_matches(x_api_key, settings.api_key):
        raise _refuse(x_api_key, "this write")


def require_admin_key(settings: SettingsDep, x_api_key: Annotated[str | None, Depends(_ADMIN_KEY)]) -> None:
    """Reloads need SSI_ADMIN_KEY, or SSI_API_KEY when no admin key is set (one key for both then)."""
    expected = settings.admin_key or settings.api_key
    if expected is None:
        if settings.insecure_writes:
            return
        raise Forbidden("reloads are disabled on this server: it has no admin key (set SSI_ADMIN_KEY or SSI_API_KEY)")
    if not key_matches(x_api_key, expected):
        raise _refuse(x_api_key, "a reload")


def key_first(check: Callable[[Settings, str | None], None]) -> type[APIRoute]:
    """A route class that runs `check` on the X-API-Key header before the body is read as JSON.

    FastAPI parses a body before it runs the dependencies, so an 8 MB body without a key would be
    parsed on the event loop only to be refused. The dependency stays: it declares the key in the
    schema and is the check of record.
    """

    class KeyFirstRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def keyed(request: Request) -> Response:
                check(request.app.state.settings, request.headers.get("x-api-key"))
                return await handler(request)

            return keyed

    return KeyFirstRoute


WriteRoute = key_first(require_api_key)
AdminRoute = key_first(require_admin_key)
ReadKeyDep = Depends(require_read_key)
ApiKeyDep = Annotated[None, Depends(require_api_key)]
AdminKeyDep = Annotated[None, Depends(require_admin_key)]
