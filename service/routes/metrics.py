"""`GET /metrics`: Prometheus text exposition of this app's registry."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import MetricsDep
from service.errors import error_responses

router = APIRouter(tags=["health"])


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "the text exposition"},
        **error_responses(401),
    },
)
def metrics(registry: MetricsDep) -> Response:
    return Response(generate_latest(registry.registry), media_type=CONTENT_TYPE_LATEST)
