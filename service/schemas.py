"""The HTTP contract: request and response bodies, and the errors every route answers with.

Requests are strict (a number where a string belongs, "10" for k, or an unknown field such as
"top_k" is a 422 naming the field) so a client's mistake is reported rather than guessed at.

Each bound is stated twice on purpose. pydantic enforces a fixed ceiling (the largest value the
setting may take, `ceiling`), so a huge body is refused after a length check instead of item by
item (a list stops at its first bad item, `fail_fast`); the bounds an operator sets (SSI_MAX_K,
SSI_MAX_QUERY_CHARS, ...) are checked with clear messages in `service.bounds`. The published
schema carries the configured values: a field's `x-bounds` names the setting behind each keyword
and `service.openapi` fills it in, so the schema a client reads is the one the server enforces.
"""

from __future__ import annotations

from typing import Annotated, Any

import annotated_types
from fastapi import Response
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from service.settings import COLLECTION_NAME, Settings


def ceiling(setting: str) -> int:
    """The largest value `Settings.<setting>` accepts: the bound pydantic enforces whatever the configuration."""
    for meta in Settings.model_fields[setting].metadata:
        if isinstance(meta, annotated_types.Le):
            return int(meta.le)  # type: ignore[call-overload]
    raise ValueError(f"Settings.{setting} has no upper bound")


def _valid_unicode(value: str) -> str:
    """Refuse a lone surrogate (JSON "\\ud800"): Python holds it, but no UTF-8 store or response can."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"not valid Unicode: lone surrogate U+{ord(value[exc.start]):04X} at character {exc.start} "
            "(a \\uD800-\\uDFFF escape must be half of a pair)"
        ) from None
    return value


def _integral(value: Any) -> Any:
    """15.0 is the integer 15, as JSON Schema's "integer" says; 1.5, "15" and true stay refused (strict)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Integer = Annotated[int, BeforeValidator(_integral)]

# Patterns published in the schema (the checks with their messages are in service.bounds): text
# without NUL; not only whitespace; an id without control characters. Whitespace is spelled out as
# Python's str.isspace() has it (the checks use str.strip()); a schema regex's \s means less.
SPACE = r"\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NO_NUL = r"^[^\x00]*$"
NOT_BLANK = rf"^[^\x00]*[^\x00{SPACE}][^\x00]*$"
DOCUMENT_ID = rf"^[^\x00-\x1f\x7f]*[^\x00-\x1f\x7f{SPACE}][^\x00-\x1f\x7f]*$"
# ...and not ending in "/similar": that path is the similar-documents route (service.routes.documents).
WRITTEN_ID = r"^(?![\s\S]*/similar$)" + DOCUMENT_ID[1:]

UnicodeText = Annotated[str, AfterValidator(_valid_unicode)]
QueryText = Annotated[
    UnicodeText,
    Field(
        max_length=ceiling("max_query_chars"),
        description="keywords or natural-language text: not blank, no NUL, at most SSI_MAX_QUERY_CHARS characters",
        json_schema_extra={"minLength": 1, "pattern": NOT_BLANK, "x-bounds": {"maxLength": "max_query_chars"}},
    ),
]
DocumentId = Annotated[
    UnicodeText,
    Field(
        max_length=ceiling("max_id_chars"),
        description="any text without control characters, not blank, not ending in '/similar', "
        "at most SSI_MAX_ID_CHARS characters",
        json_schema_extra={"minLength": 1, "pattern": WRITTEN_ID, "x-bounds": {"maxLength": "max_id_chars"}},
    ),
]
DocumentText = Annotated[UnicodeText, Field(json_schema_extra={"pattern": NO_NUL})]


def _no_nul(value: str) -> str:
    """A path with a NUL byte names no file (the OS refuses it; Python's os calls raise ValueError)."""
    if "\x00" in value:
        raise ValueError(f"a server path may not hold a NUL byte (one at character {value.index(chr(0))})")
    return value


ServerPath = Annotated[
    UnicodeText,
    AfterValidator(_no_nul),
    Field(min_length=1, max_length=4096, json_schema_extra={"pattern": NO_NUL}),
]


MAX_UNKNOWN_FIELDS = 10


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _few_unknown_fields(cls, data: Any) -> Any:
        """Many unknown fields are one error: pydantic reports each on its own (10⁵ of them took 0.8 s)."""
        if isinstance(data, dict) and len(data) > len(cls.model_fields) + MAX_UNKNOWN_FIELDS:
            unknown = [key for key in data if key not in cls.model_fields]
            raise PydanticCustomError(
                "extra_forbidden",
                "{count} unknown fields, such as {first}; the fields are {known}",
                {"count": len(unknown), "first": repr(str(unknown[0])[:40]), "known": ", ".join(cls.model_fields)},
            )
        return data


class SearchOptions(Strict):
    k: Integer = Field(
        default=10,
        ge=1,
        le=ceiling("max_k"),
        description="number of hits to return (at most SSI_MAX_K, 100 by default)",
        json_schema_extra={"x-bounds": {"maximum": "max_k"}},
    )
    offset: Integer = Field(
        default=0,
        ge=0,
        le=ceiling("max_offset"),
        description="hits to skip, for paging (at most SSI_MAX_OFFSET, 1,000 by default)",
        json_schema_extra={"x-bounds": {"maximum": "max_offset"}},
    )
    ef_search: Integer | None = Field(
        default=None,
        ge=1,
        le=ceiling("max_ef_search"),
        description=(
            "HNSW only (a 422 on other indexes): size of the search beam, at most SSI_MAX_EF_SEARCH "
            "(1,024 by default); never below the candidate pool, SSI_CANDIDATE_POOL"
        ),
        json_schema_extra={"x-bounds": {"maximum": "max_ef_search"}},
    )
    nprobe: Integer | None = Field(
        default=None,
        ge=1,
        le=ceiling("max_nprobe"),
        description="IVF only (a 422 on other indexes): inverted lists to visit, at most SSI_MAX_NPROBE (1,024)",
        json_schema_extra={"x-bounds": {"maximum": "max_nprobe"}},
    )


class SearchRequest(SearchOptions):
    query: QueryText


class BatchSearchRequest(SearchOptions):
    queries: list[QueryText] = Field(
        max_length=ceiling("max_batch"),
        fail_fast=True,
        description=(
            "query texts, answered in order: at least one, at most SSI_MAX_BATCH (64 by default), "
            "and queries × k at most SSI_MAX_BATCH_HITS (6,400)"
        ),
        json_schema_extra={"minItems": 1, "x-bounds": {"maxItems": "max_batch"}},
    )


class Hit(BaseModel):
    """One ranked document; score = semantic + lexical = (A q)·e(d) + Σ w_i q_i d_i (for SSI, (U q)·(V d) + q·d),
    + sentence for a hybrid bundle (ssi.hybrid: λ e(q)·e(d), a pre-trained sentence encoder's part)."""

    id: str
    title: str
    snippet: str
    score: float
    semantic: float
    lexical: float
    sentence: float | None = Field(
        default=None, description="a hybrid bundle's third part, λ e(q)·e(d); null for any other bundle"
    )
    fields: dict[str, Any] | None = Field(
        default=None, description="the fields a search asked for (`fields`) that the document has; else null"
    )


class FacetValue(BaseModel):
    value: str | bool
    count: int = Field(description="matching documents with this value")


class FacetOut(BaseModel):
    values: list[FacetValue] = Field(description="the most frequent values, most first (at most SSI_FACET_SIZE)")
    other: int = Field(description="the counts of the values left out, summed")


class SearchResult(BaseModel):
    hits: list[Hit]
    query_words: int = Field(description="distinct query words found in the model's vocabulary")
    candidates: int = Field(description="documents scored exactly for this query")
    impression: str | None = Field(
        default=None,
        description="names this answer in the traffic log: report a click with POST /clicks and it "
        "(null when the server records no traffic, SSI_EVENTS=false)",
    )
    matched: int | None = Field(
        default=None, description="documents matching the search's filter (set when it has a filter or facets)"
    )
    facets: dict[str, FacetOut] | None = Field(default=None, description="the facets asked for, by field")


class SearchResponse(SearchResult):
    collection: str
    took_ms: float


def json_response(body: BaseModel) -> Response:
    """`body` serialized once by pydantic-core, for the hot routes: a model returned from a route is
    validated again against its response_model and then encoded by FastAPI (a search paid for both
    on every request); the route keeps `response_model` for the published schema."""
    return Response(content=body.model_dump_json(), media_type="application/json")


class BatchSearchResponse(BaseModel):
    collection: str
    results: list[SearchResult]
    took_ms: float


# A document needs a title or a text that is not blank.
_TITLE_OR_TEXT = {
    "anyOf": [
        {"required": ["title"], "properties": {"title": {"pattern": NOT_BLANK}}},
        {"required": ["text"], "properties": {"text": {"pattern": NOT_BLANK}}},
    ]
}


class DocumentBody(Strict):
    """A title or a text (or both) that is not blank; neither may contain NUL characters."""

    model_config = ConfigDict(json_schema_extra=_TITLE_OR_TEXT)

    title: DocumentText = ""
    text: DocumentText = ""


class DocumentIn(DocumentBody):
    id: DocumentId


class DocumentsIn(Strict):
    documents: list[DocumentIn] = Field(
        max_length=ceiling("max_documents_per_write"),
        fail_fast=True,
        description=(
            "documents to add or replace in one transaction: at least one, at most "
            "SSI_MAX_DOCUMENTS_PER_WRITE (1,000 by default), each id once"
        ),
        json_schema_extra={"minItems": 1, "x-bounds": {"maxItems": "max_documents_per_write"}},
    )


class DocumentOut(BaseModel):
    collection: str
    id: str
    title: str
    text: str
    fields: dict[str, Any] = Field(default_factory=dict, description="the document's fields (service.fields)")
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
    collection: str | None = Field(
        default=None, pattern=COLLECTION_NAME.pattern, max_length=64, description="default: the default collection"
    )
    bundle: ServerPath | None = Field(
        default=None,
        description="a bundle folder under SSI_BUNDLE_ROOT (a new folder, not one copied over the served bundle); "
        "default: the collection's current one",
    )


class WorkersServing(BaseModel):
    serving: int = Field(description="worker processes that serve the new bundle when the answer is sent")
    of: int = Field(description="worker processes of the server (SSI_WORKERS); the others follow within seconds")


class ReloadResponse(BaseModel):
    collection: str
    bundle: str
    previous_content_hash: str
    content_hash: str
    form: str = Field(description="the model form of the new bundle (ssi.forms)")
    documents: int
    loaded_from: str
    seconds: float
    workers: WorkersServing | None = Field(
        default=None, description="in a group of worker processes (SSI_WORKERS > 1): how many serve the new bundle"
    )


class Neighbour(BaseModel):
    word: str
    distance: float


class NearestWordsResponse(BaseModel):
    collection: str
    word: str
    neighbours: list[Neighbour]


class ModelResponse(BaseModel):
    collection: str
    type: str = Field(description="what the collection holds: documents or adverts")
    bundle: str = Field(description="the bundle folder's name (server paths are not shown)")
    form: str = Field(description="the model form (ssi.forms): lowrank, symmetric, noidentity, diagonal, fullw, psi3")
    n_dims: int = Field(description="N, the size of the model's arrays (0 for a form without embeddings)")
    index_dims: int = Field(description="M, the size of a query embedding and of each vector in the index")
    vocab_size: int
    tokenizer: str = Field(
        description="how texts become words: the tokenizer's version, then '+snowball-LANGUAGE' when every word "
        "is looked up by its stem (ssi.stemming)"
    )
    stemmer: str | None = Field(description="the Snowball stemmer the words go through, or null")
    lexical: dict[str, Any] = Field(
        description="the lexical part's weighting (ssi.weighting): {'scheme': 'tfidf'}, or 'bm25' with its k1, b and "
        "the training corpus's average document length, which every document written later is weighted against"
    )
    content_hash: str
    created_at: str
    training: dict[str, Any] = Field(description="the training run (file paths shown by their last component)")
    data: dict[str, Any] = Field(description="the training data (file paths shown by their last component)")
    metrics: dict[str, Any]
    index: dict[str, Any]


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    collections: dict[str, dict[str, Any]]
    pid: int = Field(description="the process that answered: one of the server's SSI_WORKERS worker processes")


class ErrorBody(BaseModel):
    """Every error: a message for the caller (never a traceback)."""

    detail: str


class ValidationIssue(BaseModel):
    loc: list[str | int] = Field(description="where: body field names and list positions, or the parameter")
    msg: str
    type: str


class ValidationErrorBody(ErrorBody):
    """422: the first few problems (`detail` sums them up in one line; `error_count` says how many there were)."""

    errors: list[ValidationIssue] = Field(max_length=10)
    error_count: int
