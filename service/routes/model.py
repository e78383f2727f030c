"""`GET /model`: the served bundle's manifest and the state of its index."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import CollectionDep
from service.schemas import ModelResponse

router = APIRouter(tags=["model"])


@router.get("/model", response_model=ModelResponse, summary="The served model and its index")
def model(collection: CollectionDep) -> ModelResponse:
    state = collection.ready_state()
    manifest = state.bundle.manifest
    return ModelResponse(
        collection=collection.name,
        type=collection.type,
        bundle=str(collection.bundle_path),
        form=manifest.form,
        n_dims=manifest.n_dims,
        index_dims=manifest.index_dims,
        vocab_size=manifest.vocab_size,
        content_hash=manifest.content_hash,
        created_at=manifest.created_at,
        training=manifest.training,
        data=manifest.data,
        metrics=manifest.metrics,
        index=state.describe(),
    )
