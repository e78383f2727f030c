"""Bodies of `POST /clicks`: a click reported against an impression that an answer named."""

from __future__ import annotations

from pydantic import BaseModel, Field

from service.schemas import DocumentId, Strict, UnicodeText


class ClickRequest(Strict):
    impression: UnicodeText = Field(
        min_length=1, max_length=64, description="the `impression` of the answer that showed the clicked result"
    )
    id: DocumentId = Field(description="the clicked document (or advert) id, one the impression showed")
    dwell_ms: float | None = Field(
        default=None,
        ge=0,
        le=86_400_000,
        description="how long the user stayed on the result, when the client knows it (a repeat may add it)",
    )


class ClickResponse(BaseModel):
    recorded: bool = Field(description="false: this click was reported before and counts once")
    position: int = Field(description="the position (1 = top) at which the clicked result was shown")
