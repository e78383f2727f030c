"""Advert metadata (active, category, advertiser, budget) beside an adverts collection, and the filters on it.

An advert's text lives in the collection's document store like any document (so it is embedded,
indexed and written through the same keyed write path); what only adverts have lives here, in a
small SQLite book in the collection's store folder, keyed by the same id:

- `active`: a paused advert (false) is never matched; pausing and resuming touch only the book,
  not the index, so they are instant and cost no re-embedding;
- `category`, `advertiser`: what a request may filter on;
- `budget`: the advertiser still has budget; a request may ask for adverts with budget only.

On first open the book is seeded from the extra fields of the collection's corpus JSONL (an advert
line may carry `category`, `advertiser`, `active`, `budget`); ids the book already knows keep what
the API wrote. An advert written through the plain document routes gets the defaults (active, with
budget, no category or advertiser). The book is read from memory (a dict), written through to disk.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from service.collection import Collection
from service.settings import Settings
from service.store import DocumentStore, write_transaction

BOOK_FILE = "adverts.sqlite"
SCHEMA = "CREATE TABLE IF NOT EXISTS adverts (id TEXT PRIMARY KEY, meta TEXT NOT NULL)"


@dataclass(frozen=True, slots=True)
class AdvertMeta:
    active: bool = True
    category: str | None = None
    advertiser: str | None = None
    budget: bool = True

    def to_json(self) -> str:
        return json.dumps(
            {"active": self.active, "category": self.category, "advertiser": self.advertiser, "budget": self.budget}
        )

    @classmethod
    def from_record(cls, record: dict) -> AdvertMeta:
        """The metadata fields of a corpus line or a stored row; anything else is ignored."""

        def text(name: str) -> str | None:
            value = record.get(name)
            return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None

        return cls(
            active=record.get("active", True) is not False,
            category=text("category"),
            advertiser=text("advertiser"),
            budget=record.get("budget", True) is not False,
        )


class AdFilter(BaseModel):
    """Which adverts a match may return. A paused advert is never returned, whatever the filter."""

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

    def admits(self, meta: AdvertMeta) -> bool:
        if not meta.active:
            return False
        if self.category is not None and meta.category not in self.category:
            return False
        if self.advertiser is not None and meta.advertiser not in self.advertiser:
            return False
        return self.budget is None or meta.budget == self.budget


class AdvertBook:
    """Advert metadata by id, in memory and in `<store folder>/adverts.sqlite`."""

    def __init__(self, path: Path, corpus: Path | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(SCHEMA)
        self._meta = {
            ad_id: AdvertMeta.from_record(json.loads(meta))
            for ad_id, meta in self._conn.execute("SELECT id, meta FROM adverts")
        }
        if corpus is not None:
            self._seed(corpus)

    @classmethod
    def for_collection(cls, store_dir: Path, name: str, corpus: Path | None) -> AdvertBook:
        return cls(DocumentStore.path_for(store_dir, name).parent / BOOK_FILE, corpus)

    def _seed(self, corpus: Path) -> None:
        """Metadata of the corpus lines the book does not know yet (it never overrides an API write)."""
        fresh: list[tuple[str, AdvertMeta]] = []
        with corpus.open("rb") as probe:
            gzipped = probe.read(2) == b"\x1f\x8b"
        with gzip.open(corpus, "rt", encoding="utf-8") if gzipped else corpus.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    record = json.loads(line) if line.strip() else None
                except json.JSONDecodeError:
                    continue  # the document store reports a malformed corpus itself
                if not isinstance(record, dict):
                    continue
                ad_id = str(record.get("id", record.get("_id", "")))
                if ad_id and ad_id not in self._meta:
                    fresh.append((ad_id, AdvertMeta.from_record(record)))
        self.put_many(fresh)

    def get(self, ad_id: str) -> AdvertMeta:
        return self._meta.get(ad_id, AdvertMeta())

    def get_many(self, ids: Iterable[str]) -> dict[str, AdvertMeta]:
        meta = self._meta
        return {ad_id: meta.get(ad_id, AdvertMeta()) for ad_id in ids}

    def eligible(self, ad_filter: AdFilter, ids: Iterable[str]) -> int:
        """How many of `ids` the filter admits (what a match can return at most)."""
        return sum(ad_filter.admits(self.get(ad_id)) for ad_id in ids)

    def put_many(self, items: list[tuple[str, AdvertMeta]]) -> None:
        if not items:
            return
        with self._lock:
            with write_transaction(self._conn, self.path) as conn:
                conn.executemany(
                    "INSERT OR REPLACE INTO adverts(id, meta) VALUES (?, ?)", [(i, m.to_json()) for i, m in items]
                )
            self._meta.update(items)

    def update(self, ad_id: str, **changes: object) -> AdvertMeta:
        meta = replace(self.get(ad_id), **changes)  # type: ignore[arg-type]
        self.put_many([(ad_id, meta)])
        return meta

    def delete(self, ad_id: str) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM adverts WHERE id=?", (ad_id,))
            self._meta.pop(ad_id, None)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class AdvertBooks:
    """The books of a service's adverts collections, opened when the collection has loaded (`prepare`) or else on
    first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._books: dict[str, AdvertBook] = {}
        self._lock = threading.Lock()

    def get(self, collection: Collection) -> AdvertBook:
        collection.ready_state()  # its store folder exists and is this process's
        with self._lock:
            book = self._books.get(collection.name)
            if book is None:
                book = AdvertBook.for_collection(self.settings.store_dir, collection.name, collection.spec.corpus)
                self._books[collection.name] = book
            return book

    def prepare(self, collection: Collection) -> None:
        """Open an adverts collection's book and warm its page featurizer as it loads (Catalog.after_load), not on
        the first /match: opening reads every advert's metadata and seeds from the corpus (1.4 s for 100k adverts on
        the 2-core machine), and each worker's first /match waited that long with every page queued behind it
        (docs/performance/search.md, "A worker's first page")."""
        if collection.type != "adverts":
            return
        self.get(collection)
        collection.ready_state().embedder.warm_page_featurizer()

    def close(self) -> None:
        with self._lock:
            for book in self._books.values():
                book.close()
            self._books.clear()
