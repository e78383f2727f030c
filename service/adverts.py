"""An advert's metadata (active, category, advertiser, budget): four ordinary fields of its document, and the old
`/match` filters as a clause of the filter language.

An advert is a document of an adverts collection; what only adverts have is four fields of it (service.fields),
stored in the document's row and indexed with every other field, so a `/match` filter is the same bitmap operations
as a `/search` filter and an advert's metadata changes in the same transaction as its text:

- `active` (boolean): a paused advert (false) is never matched; an advert without it is active;
- `category`, `advertiser` (keyword): what a request may filter on;
- `budget` (boolean): the advertiser still has budget (an advert without it has); a request may ask for adverts
  with budget only, or without.

The types are declared for every adverts collection (`declared_fields`), so the four names are known before any
advert uses them and a value of another type is refused. `AdFilter`, the request shape `/match` has always taken
(`"filters": {"category": [...], "advertiser": [...], "budget": true}`), is translated to a clause of the filter
language (`AdFilter.clause`) and ANDed with the request's general `filter` and with "not paused"
(`match_filter`): one evaluator, the filter language's.

Before the fields, the metadata lived in a book of its own beside the store (`adverts.sqlite`) and a corpus line
carried it at its top level. Both still load: a corpus line's top-level metadata is read as its fields
(`corpus_fields`, when the line's `fields` object does not name them), and a book left by an earlier version is
written into its documents' fields once, when the collection opens (`adopt_book`), then set aside.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.store import DocumentStore
from ssi.fields.types import FieldType

log = logging.getLogger(__name__)

BOOK_FILE = "adverts.sqlite"  # the metadata book of versions before the fields (adopted once: `adopt_book`)
ADOPTED_SUFFIX = ".adopted"  # the book, renamed once its metadata is in the documents' fields
ADVERT_FIELDS: dict[str, FieldType] = {
    "category": "keyword",
    "advertiser": "keyword",
    "active": "boolean",
    "budget": "boolean",
}
# What every /match is restricted to: not paused (an advert without `active` is active).
NOT_PAUSED: dict[str, Any] = {"not": {"term": {"active": False}}}


@dataclass(frozen=True, slots=True)
class AdvertMeta:
    """An advert's four metadata fields as the advert routes show them (the defaults where a document has none)."""

    active: bool = True
    category: str | None = None
    advertiser: str | None = None
    budget: bool = True

    @classmethod
    def of_fields(cls, fields: Mapping[str, Any] | None) -> AdvertMeta:
        """The metadata of a stored document's fields."""
        held = fields or {}
        category, advertiser = held.get("category"), held.get("advertiser")
        return cls(
            active=held.get("active") is not False,
            category=category if isinstance(category, str) else None,
            advertiser=advertiser if isinstance(advertiser, str) else None,
            budget=held.get("budget") is not False,
        )

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AdvertMeta:
        """The metadata at the top level of an old corpus line or in an old book's row, read as the book read it (a
        number names a category as text; `active` and `budget` are false only when false); anything else ignored."""

        def text(name: str) -> str | None:
            value = record.get(name)
            return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None

        return cls(
            active=record.get("active", True) is not False,
            category=text("category"),
            advertiser=text("advertiser"),
            budget=record.get("budget", True) is not False,
        )

    def fields(self) -> dict[str, Any]:
        """The fields that hold this metadata (a category or advertiser left out when there is none)."""
        held: dict[str, Any] = {"active": self.active, "budget": self.budget}
        if self.category is not None:
            held["category"] = self.category
        if self.advertiser is not None:
            held["advertiser"] = self.advertiser
        return held


def with_meta(fields: Mapping[str, Any] | None, meta: AdvertMeta) -> dict[str, Any]:
    """A document's `fields` with its four metadata fields set to `meta` (a category or advertiser of None removed),
    its other fields kept."""
    kept = {name: value for name, value in (fields or {}).items() if name not in ADVERT_FIELDS}
    return kept | meta.fields()


def corpus_fields(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The metadata an old adverts corpus line carries at its top level, as fields (None: it carries none); the
    line's own `fields` object wins for a name it holds (ssi.corpus.iter_corpus merges them so)."""
    if not any(name in record for name in ADVERT_FIELDS):
        return None
    lifted = AdvertMeta.from_record(record).fields()
    return {name: value for name, value in lifted.items() if name in record}


def declared_fields(declared: Mapping[str, FieldType] | None) -> dict[str, FieldType]:
    """An adverts collection's declared field types: its spec's (`declared`) and the four metadata fields, which
    the spec may not declare otherwise (a ValueError naming the field)."""
    for name, field_type in (declared or {}).items():
        if ADVERT_FIELDS.get(name, field_type) != field_type:
            raise ValueError(
                f"field '{name}' of an adverts collection is its metadata, a {ADVERT_FIELDS[name]} field; "
                f"it cannot be declared {field_type}"
            )
    return {**ADVERT_FIELDS, **(declared or {})}


class AdFilter(BaseModel):
    """Which adverts a match may return, in the shape `/match` has always taken; translated to the filter language
    (`clause`). A paused advert is never returned, whatever the filter."""

    model_config = ConfigDict(extra="forbid", strict=True)

    category: list[str] | None = Field(
        default=None, max_length=100, description="only adverts of one of these categories"
    )
    advertiser: list[str] | None = Field(
        default=None, max_length=100, description="only adverts of one of these advertisers"
    )
    budget: bool | None = Field(
        default=None, description="true: only adverts whose advertiser has budget left; false: only those without"
    )

    def clause(self) -> dict[str, Any] | None:
        """The same restriction as a filter (ssi.fields.filters): `terms` on category and advertiser (an empty
        list admits nothing, as before), and on budget a term that counts an advert without the field as having
        budget; None when it restricts nothing."""
        parts: list[dict[str, Any]] = []
        for name in ("category", "advertiser"):
            values = getattr(self, name)
            if values is not None:  # an empty list admits no advert, as before (`terms` takes a non-empty list)
                parts.append({"terms": {name: values}} if values else _nothing(name))
        if self.budget is True:
            parts.append({"not": {"term": {"budget": False}}})
        elif self.budget is False:
            parts.append({"term": {"budget": False}})
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else {"and": parts}


def _nothing(name: str) -> dict[str, Any]:
    """A clause no document matches: has field `name` and has it not."""
    return {"and": [{"exists": name}, {"not": {"exists": name}}]}


def request_filter(filters: AdFilter, node: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What a /match request restricts itself to, as one filter (None: nothing): its old `filters` (translated) and
    its general `filter` (`node`), ANDed. What the traffic log records of a match (service.events)."""
    parts = [part for part in (filters.clause(), node) if part is not None]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"and": parts}


def match_filter(filters: AdFilter, node: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a /match ranks among, as one filter: the request's (`request_filter`) and not paused. The sharded
    router sends the same filter to every shard."""
    asked = request_filter(filters, node)
    return NOT_PAUSED if asked is None else {"and": [NOT_PAUSED, asked]}


def adopt_book(store: DocumentStore) -> int:
    """Write the metadata book of an earlier version (`adverts.sqlite` beside the store), if there is one, into its
    adverts' fields, then rename it (`.adopted`) so it is read once; returns the adverts adopted. The book is the
    truth it was (seeded from the corpus, then the API's writes), so its values replace the documents' four
    fields; an advert the store no longer holds is dropped. Run when the collection opens, before its state: the
    field index is built from the store."""
    book = store.path.parent / BOOK_FILE
    if not book.is_file():
        return 0
    conn = sqlite3.connect(book)
    try:
        rows = conn.execute("SELECT id, meta FROM adverts").fetchall()
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{book}: an adverts metadata book that cannot be read ({exc})") from None
    finally:
        conn.close()
    meta = {ad_id: AdvertMeta.from_record(json.loads(held)) for ad_id, held in rows}
    adopted = store.set_fields({ad_id: lambda fields, m=m: with_meta(fields, m) for ad_id, m in meta.items()})
    book.replace(book.with_name(BOOK_FILE + ADOPTED_SUFFIX))
    log.info("adopted the metadata of %d adverts from %s into their fields", adopted, book)
    return adopted
