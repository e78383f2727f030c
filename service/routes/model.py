"""`GET /model`: the served bundle's manifest and the state of its index.

Server paths are not shown: the bundle by its folder name (its content hash identifies it), and
any path in the manifest's training and data records (the corpus, the pairs, the output folder) by
its last component.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter

from service.collection import Collection
from service.deps import CollectionDep
from service.errors import error_responses
from service.schemas import ModelResponse

router = APIRouter(tags=["model"])

_PATH = re.compile(r"^(?:[A-Za-z]:)?[\\/~.]?[^\s:]*[\\/][^\s]*$")


def without_paths(value: Any) -> Any:
    """`value` (a JSON-like record) with every string that looks like a file path cut to its last component."""
    if isinstance(value, dict):
        return {key: without_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_paths(item) for item in value]
    if isinstance(value, str) and "://" not in value and _PATH.match(value):
        return re.split(r"[\\/]", value.rstrip("\\/"))[-1]
    return value


@router.get(
    "/model",
    response_model=ModelResponse,
    summary="The served model and its index",
    responses=error_responses(401, 404, 422, 503),
)
def model(collection: CollectionDep) -> ModelResponse:
    return model_response(collection)


def model_response(collection: Collection) -> ModelResponse:
    """The collection's bundle and index, as GET /model shows them (a cluster shard answers the router with it)."""
    state = collection.ready_state()
    manifest = state.bundle.manifest
    return ModelResponse(
        collection=collection.name,
        type=collection.type,
        bundle=collection.bundle_path.name,
        form=manifest.form,
        n_dims=manifest.n_dims,
        index_dims=manifest.index_dims,
        vocab_size=manifest.vocab_size,
        tokenizer=manifest.tokenizer,
        stemmer=state.bundle.vocab.stemmer,
        lexical=manifest.lexical or {"scheme": "tfidf"},
        content_hash=manifest.content_hash,
        created_at=manifest.created_at,
        training=without_paths(manifest.training),
        data=without_paths(manifest.data),
        metrics=manifest.metrics,
        index=state.describe(),
    )
