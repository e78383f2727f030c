"""`POST /clicks`: a user clicked a result of an answer; the trainer learns from these (docs: learning from users).

Who may report: whoever may search. A public search page has no key, so a click is trusted only as far as
its impression: it must name an impression this service issued (an unguessable id, recent: within
SSI_EVENTS_MAX_AGE_DAYS) and an id that impression showed, and a repeat counts once; with SSI_READ_KEY set, a
click needs a read key like a search, and a filtered read key (SSI_READ_KEYS) may only click a document inside its
filter: any other click is answered as one on an unknown impression (404). Clicks go through the search admission
limits (429/503 under floods).
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from service.deps import SearchingDep
from service.errors import NotFound, error_responses
from service.events.schemas import ClickRequest, ClickResponse
from service.events.store import UNKNOWN_IMPRESSION, ClickOutcome
from service.events.traffic import Traffic

router = APIRouter(tags=["events"])


@router.post(
    "/clicks",
    response_model=ClickResponse,
    summary="Report a click on a result of an answer",
    description=(
        "Names the answer's `impression` and the clicked `id` (a document, or an advert of a /match answer), "
        "optionally with `dwell_ms`. Durable once acknowledged. 404: an unknown or expired impression, or an "
        "id the impression did not show; 403: recording is off (SSI_EVENTS=false); 507: the disk is full."
    ),
    responses=error_responses(400, 401, 403, 404, 413, 422, 429, 503, 507),
)
async def click(body: ClickRequest, request: Request, searching: SearchingDep) -> ClickResponse:
    collection = searching.collection
    collection.ready_state()  # a loading collection answers 503 like its searches
    traffic: Traffic = request.app.state.traffic
    visible = searching.visible

    def report() -> ClickOutcome:
        # A filtered key never saw a document outside its filter, so an impression that showed one was another
        # key's: refused as unknown, like an impression id never issued (service.events.store's message).
        if visible.restricted:
            try:
                collection.get(body.id, visible)
            except NotFound:
                raise NotFound(UNKNOWN_IMPRESSION) from None
        return traffic.click(collection.name, body.impression, body.id, body.dwell_ms)

    outcome = await searching.limiter.run(report)
    return ClickResponse(recorded=outcome.recorded, position=outcome.position)
