"""`GET /words/{word}/nearest`: the words closest to a word in the served model's embedding space.

Read-only, from the bundle alone (ssi.words, the same function as `ssi words`): a user sees what the
model learned — the synonyms, topics and other senses it puts near a word.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from service.collection import Collection
from service.deps import CollectionDep, SingleQueryValues
from service.errors import Conflict, NotFound, error_responses
from service.schemas import NearestWordsResponse, Neighbour
from ssi.words import NotOneWord, NoWordEmbeddings, UnknownWord, nearest_words

router = APIRouter(tags=["words"])

MAX_WORD_CHARS = 64
MAX_NEIGHBOURS = 100


@router.get(
    "/words/{word}/nearest",
    response_model=NearestWordsResponse,
    summary="Nearest words of a word in the model's embedding space",
    description=(
        "The k words whose embeddings (columns of the model's word table, e.g. V for SSI) are closest to the "
        "word's, by Euclidean distance, nearest first. 404: not one word of the vocabulary, or a word without "
        "an embedding (a rare word, beyond the frequent-word restriction); 409: the model form has no word "
        "embeddings (diagonal, full W); 422: k out of range."
    ),
    responses=error_responses(401, 404, 409, 422, 503),
    dependencies=[SingleQueryValues],
)
def nearest(
    word: Annotated[str, Path(min_length=1, max_length=MAX_WORD_CHARS, description="one word")],
    collection: CollectionDep,
    k: Annotated[int, Query(ge=1, le=MAX_NEIGHBOURS, description="how many neighbours")] = 5,
) -> NearestWordsResponse:
    return nearest_response(collection, word, k)


def nearest_response(collection: Collection, word: str, k: int) -> NearestWordsResponse:
    """GET /words/{word}/nearest of the collection's bundle (a cluster shard answers the router with it)."""
    bundle = collection.ready_state().bundle
    try:
        found = nearest_words(bundle.form, bundle.vocab, word, k)
    except NoWordEmbeddings as exc:
        raise Conflict(str(exc)) from None
    except (NotOneWord, UnknownWord) as exc:  # no such word resource: 404, whatever the text was
        raise NotFound(str(exc)) from None
    return NearestWordsResponse(
        collection=collection.name,
        word=word,
        neighbours=[Neighbour(word=n.word, distance=n.distance) for n in found],
    )
