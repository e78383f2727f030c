"""The bodies of `/admin/interleave` (service.routes.interleave)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from service.schemas import COLLECTION_NAME, Integer, ServerPath, Strict
from ssi.interleaving import (
    DEFAULT_ALPHA,
    DEFAULT_BETA,
    DEFAULT_BUDGET,
    DEFAULT_DELTA,
    DEFAULT_MODE,
    DEFAULT_SHARE,
    TestMode,
)


class InterleaveRequest(Strict):
    collection: str | None = Field(
        default=None, pattern=COLLECTION_NAME.pattern, max_length=64, description="default: the default collection"
    )
    bundle: ServerPath = Field(description="the candidate's bundle folder, under SSI_BUNDLE_ROOT")
    share: float = Field(default=DEFAULT_SHARE, gt=0, le=1, description="share of first pages interleaved")
    mode: TestMode = Field(
        default=DEFAULT_MODE,
        description="guard: promote unless the candidate loses (H0 win rate 1/2 - delta, H1 1/2); "
        "better: promote only when it wins (H0 1/2, H1 1/2 + delta)",
    )
    delta: float = Field(
        default=DEFAULT_DELTA, gt=0, lt=0.5, description="the gap in win rate between the test's two hypotheses"
    )
    alpha: float = Field(
        default=DEFAULT_ALPHA, gt=0, lt=0.5, description="the test's bound on promoting a candidate at H0's win rate"
    )
    beta: float = Field(
        default=DEFAULT_BETA, gt=0, lt=0.5, description="the test's bound on dropping a candidate at H1's win rate"
    )
    budget: Integer = Field(
        default=DEFAULT_BUDGET,
        ge=1,
        le=10_000_000,
        description="interleaved answers before it ends undecided",
    )


class InterleaveStatus(BaseModel):
    collection: str
    running: bool = Field(description="whether a comparison is recorded (it may be decided and wait for the learner)")
    comparison: dict[str, Any] | None = Field(
        default=None, description="its settings: candidate bundle and content hash, served hash, share, test"
    )
    loaded: bool | None = Field(default=None, description="whether the worker that answered holds the candidate")
    error: str | None = Field(default=None, description="why this worker could not load the candidate")
    serving_compared_model: bool | None = Field(
        default=None, description="false when another model is served now: interleaving pauses"
    )
    tally: dict[str, Any] | None = Field(
        default=None, description="interleaved answers shown, clicked, won, lost and tied by the candidate; the LLR"
    )
    decision: Literal["running", "promote", "drop", "budget"] | None = Field(
        default=None, description="the sequential test's verdict (ssi.interleaving): running until decided"
    )
