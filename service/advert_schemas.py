"""Request and response bodies of the advert routes: POST /match and the advert writes (service.routes.match)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from service.adverts import AdFilter
from service.fields.http import FILTER_EXAMPLE, DocumentFields
from service.schemas import DocumentBody, DocumentId, Integer, Strict, UnicodeText, ceiling

LABEL_CHARS = 200  # a category or an advertiser name


class MatchRequest(Strict):
    """One page (`page` text or `page_id` of a stored document) or a batch (`pages`), k, filters: the adverts'
    own `filters` and the general `filter` of the filter language, ANDed (service.adverts.match_filter)."""

    page: UnicodeText | None = Field(
        default=None,
        description="the page text; cut to SSI_MAX_PAGE_CHARS (65,536) characters and its SSI_MAX_PAGE_WORDS "
        "(2,048) heaviest words, never refused for its length below the body bound (SSI_MAX_BODY_BYTES)",
    )
    page_id: DocumentId | None = Field(
        default=None, description="the id of a document of the documents collection `documents`, used as the page"
    )
    documents: str | None = Field(
        default=None, max_length=64, description="the documents collection `page_id` names (default: the default one)"
    )
    pages: list[UnicodeText] | None = Field(
        default=None,
        max_length=ceiling("max_batch"),
        description="several page texts at once (at most SSI_MAX_BATCH); one result each, in order",
    )
    k: Integer = Field(default=10, ge=1, le=ceiling("max_k"), description="adverts per page (at most SSI_MAX_K)")
    filters: AdFilter = Field(
        default_factory=AdFilter,
        description="the adverts' metadata filters, as /match has always taken them: the same as a `filter` of "
        "terms on category and advertiser and a term on budget (docs/guides/fields.md#match-filters)",
    )
    filter: dict[str, Any] | None = Field(
        default=None,
        description=(
            "only adverts matching it, in the filter language of /search (term, terms, range, exists, and, or, "
            "not; over the adverts' fields, category, advertiser, active and budget included; at most "
            "SSI_MAX_FILTER_CLAUSES clauses, SSI_MAX_FILTER_TERMS values, SSI_MAX_FILTER_DEPTH levels), ANDed "
            "with `filters`: the top k of the score among the matching adverts. A paused advert never matches. "
            f"For example {FILTER_EXAMPLE}"
        ),
    )


class AdMatch(BaseModel):
    id: str
    title: str
    text: str
    score: float = Field(description="f(page, ad) = semantic + lexical (+ sentence for a hybrid bundle)")
    semantic: float = Field(description="(U q)·(V d): the learned part")
    lexical: float = Field(description="Σ w_i q_i d_i: the words page and advert share")
    sentence: float | None = Field(
        default=None, description="a hybrid bundle's third part, λ e(page)·e(ad); null for any other bundle"
    )
    category: str | None
    advertiser: str | None
    budget: bool
    shared_words: list[str] = Field(description="words of both the page and the advert, strongest first")
    related_words: list[str] = Field(
        description="page words that pulled this advert most through the semantic part, strongest first"
    )


class PageMatchOut(BaseModel):
    ads: list[AdMatch]
    page_words: int = Field(description="distinct page words the model knows (after the cut)")
    ranked: int = Field(description="adverts scored exactly for this page")
    impression: str | None = Field(
        default=None, description="names this answer in the traffic log: report an advert's click with POST /clicks"
    )


class MatchResponse(BaseModel):
    collection: str
    results: list[PageMatchOut]
    took_ms: float


class AdvertBody(DocumentBody, DocumentFields):
    """An advert: its text (title, text), its metadata (four fields of its document: service.adverts) and any other
    `fields`; the metadata given here wins over the same names in `fields`."""

    active: bool = Field(default=True, description="false: paused, never matched")
    category: str | None = Field(default=None, max_length=LABEL_CHARS)
    advertiser: str | None = Field(default=None, max_length=LABEL_CHARS)
    budget: bool = Field(default=True, description="the advertiser has budget left")


class AdvertPatch(Strict):
    """Metadata changes only (pause, resume, recategorize): the advert's text and other fields are kept."""

    active: bool | None = None
    category: str | None = Field(default=None, max_length=LABEL_CHARS)
    advertiser: str | None = Field(default=None, max_length=LABEL_CHARS)
    budget: bool | None = None


class AdvertOut(BaseModel):
    collection: str
    id: str
    title: str
    text: str
    active: bool
    category: str | None
    advertiser: str | None
    budget: bool
    fields: dict[str, Any] | None = Field(
        default=None, description="every field of the advert's document (its metadata included), null for none"
    )
    seq: int | None = Field(default=None, description="the write sequence number of the advert's text")
