"""`/healthz` (the process answers) and `/readyz` (every collection is loaded and can serve)."""

from __future__ import annotations

import os

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.deps import CatalogDep
from service.schemas import Health, Readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: 200 when every collection serves, else 503",
    responses={503: {"model": Readiness, "description": "a collection is still loading, or failed to load"}},
)
async def readyz(catalog: CatalogDep) -> JSONResponse:
    collections = {name: c.describe() for name, c in catalog.collections.items()}
    statuses = {c["status"] for c in collections.values()}
    status = "ready" if statuses == {"ready"} else ("failed" if "failed" in statuses else "loading")
    body = Readiness(status=status, collections=collections, pid=os.getpid())
    return JSONResponse(body.model_dump(), status_code=200 if status == "ready" else 503)
