"""`/admin/interleave`: confirm a candidate bundle online before it is served to everyone (service.interleave).

POST starts a comparison (the candidate is loaded in every worker beside the served model, and a share of
first pages is answered with the two rankings team-draft interleaved); GET says how it stands, counted from the
traffic log; DELETE ends it. The learner (`ssi learn`) promotes the candidate with POST /admin/reload when the
test says so, or ends the comparison when it does not.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from service.deps import AdminKeyDep, AdminRoute, CatalogDep
from service.errors import error_responses
from service.interleave.comparisons import Comparisons
from service.interleave.schemas import InterleaveRequest, InterleaveStatus
from service.schemas import COLLECTION_NAME
from ssi.interleaving import TEST_FIELDS

router = APIRouter(tags=["admin"], route_class=AdminRoute)

CollectionQuery = Annotated[
    str | None, Query(pattern=COLLECTION_NAME.pattern, max_length=64, description="default: the default collection")
]


def _comparisons(request: Request) -> Comparisons:
    return request.app.state.comparisons


@router.post(
    "/admin/interleave",
    response_model=InterleaveStatus,
    summary="Interleave a candidate bundle with the served one",
    responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
)
async def start(_: AdminKeyDep, catalog: CatalogDep, body: InterleaveRequest, request: Request) -> InterleaveStatus:
    collection = catalog.get(body.collection)
    collection.require_type("documents", "/admin/interleave")
    test = body.model_dump(include={"share", *TEST_FIELDS})
    answer = await run_in_threadpool(_comparisons(request).start, collection, body.bundle, **test)
    return InterleaveStatus(**answer)


@router.get(
    "/admin/interleave",
    response_model=InterleaveStatus,
    summary="How the running comparison stands",
    responses=error_responses(401, 403, 404, 422, 503),
)
async def status(
    _: AdminKeyDep, catalog: CatalogDep, request: Request, collection: CollectionQuery = None
) -> InterleaveStatus:
    found = catalog.get(collection)
    return InterleaveStatus(**await run_in_threadpool(_comparisons(request).status, found))


@router.delete(
    "/admin/interleave",
    response_model=InterleaveStatus,
    summary="End the running comparison",
    responses=error_responses(401, 403, 404, 422, 503),
)
async def stop(
    _: AdminKeyDep, catalog: CatalogDep, request: Request, collection: CollectionQuery = None
) -> InterleaveStatus:
    found = catalog.get(collection)
    return InterleaveStatus(**await run_in_threadpool(_comparisons(request).stop, found))
