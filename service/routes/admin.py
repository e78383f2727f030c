"""`POST /admin/reload`: swap a collection to a new bundle while requests keep being answered.

It needs the admin key: SSI_ADMIN_KEY, or SSI_API_KEY when no admin key is set. The bundle is read
from a new folder (under SSI_BUNDLE_ROOT): the served bundle is memory-mapped, so copying files over
it in place could crash the process.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from service.deps import AdminKeyDep, AdminRoute, CatalogDep
from service.errors import error_responses
from service.schemas import ReloadRequest, ReloadResponse

router = APIRouter(tags=["admin"], route_class=AdminRoute)


@router.post(
    "/admin/reload",
    response_model=ReloadResponse,
    summary="Load a bundle and swap to it atomically",
    responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
)
async def reload(_: AdminKeyDep, catalog: CatalogDep, body: ReloadRequest | None = None) -> ReloadResponse:
    body = body or ReloadRequest()
    collection = catalog.get(body.collection)
    info = await run_in_threadpool(collection.reload, body.bundle)
    return ReloadResponse(**info)
