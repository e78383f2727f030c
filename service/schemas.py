"""The HTTP contract: request and response bodies.

Requests are strict (a number where a string belongs, "10" for k, or an unknown field such as
"top_k" is a 422 naming the field) so a client's mistake is reported rather than guessed at.
Bounds that depend on settings (max k, query length, batch size) are checked in `service.bounds`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SearchOptions(Strict):
    k: int = Field(default=10, ge=1, description="number of hits to return (at most SSI_MAX_K)")
    offset: int = Field(default=0, ge=0, description="hits to skip, for paging (at most SSI_MAX_OFFSET)")
    ef_search: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="HNSW only: size of the search beam (never below the candidate pool, SSI_CANDIDATE_POOL)",
    )
    nprobe: int | None = Field(default=None, ge=1, le=1 << 20, description="IVF only: inverted lists to visit")


class SearchRequest(SearchOptions):
    query: str = Field(description="keywords or natural-language text (at most SSI_MAX_QUERY_CHARS characters)")


class BatchSearchRequest(SearchOptions):
    queries: list[str] = Field(description="query texts, answered in order (at most SSI_MAX_BATCH)")


class Hit(BaseModel):
    """One ranked document; score = semantic + lexical = (A q)·e(d) + Σ w_i q_i d_i (for SSI, (U q)·(V d) + q·d)."""

    id: str
    title: str
    snippet: str
    score: float
    semantic: float
    lexical: float


class SearchResult(BaseModel):
    hits: list[Hit]
    query_words: int = Field(description="distinct query words found in the model's vocabulary")
    candidates: int = Field(description="documents scored exactly for this query")


class SearchResponse(SearchResult):
    collection: str
    took_ms: float


class BatchSearchResponse(BaseModel):
    collection: str
    results: list[SearchResult]
    took_ms: float


class DocumentBody(Strict):
    title: str = ""
    text: str = ""


class DocumentIn(DocumentBody):
    id: str


class DocumentsIn(Strict):
    documents: list[DocumentIn] = Field(description="documents to add or replace (at most SSI_MAX_DOCUMENTS_PER_WRITE)")


class DocumentOut(BaseModel):
    collection: str
    id: str
    title: str
    text: str
    seq: int = Field(description="the write sequence number of this version")


class WriteResponse(BaseModel):
    collection: str
    ids: list[str]
    seq: int = Field(description="the write sequence number of the last document written")


class DeleteResponse(BaseModel):
    collection: str
    id: str
    deleted: bool
    seq: int


class ReloadRequest(Strict):
    collection: str | None = Field(default=None, description="default: the default collection")
    bundle: str | None = Field(default=None, description="bundle folder; default: the collection's current one")


class ReloadResponse(BaseModel):
    collection: str
    bundle: str
    previous_content_hash: str
    content_hash: str
    form: str = Field(description="the model form of the new bundle (ssi.forms)")
    documents: int
    loaded_from: str
    seconds: float


class ModelResponse(BaseModel):
    collection: str
    type: str = Field(description="what the collection holds: documents or adverts")
    bundle: str
    form: str = Field(description="the model form (ssi.forms): lowrank, symmetric, noidentity, diagonal, fullw, psi3")
    n_dims: int = Field(description="N, the size of the model's arrays (0 for a form without embeddings)")
    index_dims: int = Field(description="M, the size of a query embedding and of each vector in the index")
    vocab_size: int
    content_hash: str
    created_at: str
    training: dict[str, Any]
    data: dict[str, Any]
    metrics: dict[str, Any]
    index: dict[str, Any]


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    collections: dict[str, dict[str, Any]]
