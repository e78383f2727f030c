"""`POST /admin/reload`: swap a collection to a new bundle while requests keep being answered."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from service.deps import ApiKeyDep, CatalogDep
from service.schemas import ReloadRequest, ReloadResponse

router = APIRouter(tags=["admin"])


@router.post("/admin/reload", response_model=ReloadResponse, summary="Load a bundle and swap to it atomically")
async def reload(_: ApiKeyDep, catalog: CatalogDep, body: ReloadRequest | None = None) -> ReloadResponse:
    body = body or ReloadRequest()
    collection = catalog.get(body.collection)
    info = await run_in_threadpool(collection.reload, body.bundle)
    return ReloadResponse(**info)
