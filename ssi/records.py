"""Typed records shared by the trainer, the evaluator and the service."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Document:
    """A document of a collection: `id` is the user's key, `text` is what gets featurized."""

    id: str
    title: str
    text: str
    # Filterable values (service.fields): a flat object of keywords, keyword lists, numbers, booleans and dates;
    # never featurized. Not hashed (a dict); compared.
    fields: dict[str, Any] | None = field(default=None, hash=False)

    @property
    def full_text(self) -> str:
        """Title and body, the text both halves featurize (titles carry strong words)."""
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True, slots=True)
class Query:
    """A query of a query set; `filter` (a JSONL query set's `filter`, the service's filter language: ssi.fields):
    its ranking holds only the documents matching it (`ssi rank`, `ssi eval`)."""

    id: str
    text: str
    filter: dict[str, Any] | None = field(default=None, hash=False)


@dataclass(frozen=True, slots=True)
class Pair:
    """A (query, relevant document) pair: a link, a click, a qrel."""

    query_id: str
    doc_id: str
