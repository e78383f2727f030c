"""The document store: SQLite in WAL mode, the source of truth for a collection's documents.

Every write gets the next number of a monotonically increasing write sequence and is logged with
it in the same transaction; `synchronous=FULL` makes a write durable before it is acknowledged. The
in-memory index is derived state: it is saved in snapshots that record the sequence they reflect,
and on start the writes logged after that sequence are replayed (`changed_since`), so a crash at any
moment loses nothing that was acknowledged.

A collection has one store (`<store_dir>/<collection>/documents.sqlite`), seeded once from its
corpus file; from then on the store is the truth. When the corpus file changes, `merge_corpus`
brings in what the corpus alone owns and never what was written through the API (see its
docstring), logged as a warning with counts; with `on_change="refuse"` the collection refuses to
start instead. Nothing switches to a fresh store behind the operator's back. Every corpus document
is remembered in `seeded` (id and a digest of its title and text) so a later merge can tell a
document the API changed from one only the corpus changed.

The write log is trimmed (`trim_log`) up to the oldest index snapshot still kept: older entries
can no longer be replayed onto anything, and `log_floor` records where it now starts, so a
snapshot older than that is refused instead of replayed with a gap. The tf-idf vectors are not
kept here but in the index snapshots, because they depend on the bundle's vocabulary, not on the
document alone.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from service.errors import StorageFull
from service.fields.checks import FieldTypeError, admit
from ssi.corpus import DataFileError, iter_corpus
from ssi.fields import schema as field_schema
from ssi.fields.errors import FieldError
from ssi.records import Document

log = logging.getLogger(__name__)

SCHEMA_VERSION = "3"  # 3: documents' fields (a JSON column) and the collection's field types
STORE_FILE = "documents.sqlite"
# Version 1 kept one store per corpus file, named by the file's sha256 (or "empty").
_LEGACY_NAME = re.compile(r"^([0-9a-f]{16}|empty)\.sqlite$")
# The WAL file is cut back to this size after a checkpoint (it never shrinks otherwise).
WAL_SIZE_LIMIT = 64 << 20
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    fields TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS documents_by_seq ON documents(seq);
CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, op TEXT NOT NULL, doc_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS seeded (id TEXT PRIMARY KEY, digest TEXT);
CREATE TABLE IF NOT EXISTS terms (first_seq INTEGER PRIMARY KEY, term INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS field_types (name TEXT PRIMARY KEY, type TEXT NOT NULL);
"""
# A document's columns as `StoredDocument` takes them.
_COLUMNS = "id, title, text, seq, fields"

CorpusChange = Literal["merge", "refuse"]
# A corpus line's fields besides its `fields` object, read from the whole line (ssi.corpus.iter_corpus).
LineFields = Callable[[Mapping[str, Any]], Mapping[str, Any] | None]


def disk_full(exc: BaseException) -> bool:
    """SQLite's "database or disk is full" (SQLITE_FULL), or the OS's no space / over quota."""
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


@contextmanager
def write_transaction(conn: sqlite3.Connection, path: Path, begin: str = "BEGIN") -> Iterator[sqlite3.Connection]:
    """One SQLite write transaction, committed or rolled back whole; a full disk is a StorageFull (507) naming
    `path`'s folder, never a traceback (the caller holds whatever lock orders its writers)."""
    conn.execute(begin)
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:  # a COMMIT that failed (a full disk) leaves the transaction open
            conn.execute("ROLLBACK")
        if disk_full(exc):
            raise StorageFull(
                f"the disk under {path.parent} is full: the write was not applied; retry when there is room"
            ) from exc
        raise


class StoreError(RuntimeError):
    """The store file cannot be used (wrong schema, unreadable)."""


@dataclass(frozen=True, slots=True)
class StoredDocument:
    id: str
    title: str
    text: str
    seq: int
    fields: dict[str, Any] | None = None  # service.fields: None when the document has none

    def as_document(self) -> Document:
        return Document(id=self.id, title=self.title, text=self.text, fields=self.fields)

    @classmethod
    def of_row(cls, row: Sequence[Any]) -> StoredDocument:
        """A document from its `_COLUMNS` (the fields as stored: JSON text or NULL)."""
        doc_id, title, text, seq, fields = row
        return cls(doc_id, title, text, seq, json.loads(fields) if fields else None)


def fields_json(fields: Mapping[str, Any] | None) -> str | None:
    """A document's fields as the store keeps them (NULL for none)."""
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")) if fields else None


def _field_types(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT name, type FROM field_types").fetchall())


def _declare(conn: sqlite3.Connection, types: Mapping[str, str] | None) -> None:
    """Fix the types `types` gives (a cluster's field types, which a shard's write or catch-up carries: the shards
    type a name alike, whichever sees it first) in the open transaction; a name typed otherwise here is a
    `FieldTypeError` naming it, and the transaction writes nothing."""
    if not types:
        return
    known = _field_types(conn)
    for name, field_type in types.items():
        if known.get(name, field_type) != field_type:
            raise FieldTypeError(
                f"field '{name}' has type {known[name]}, was declared {field_type}; nothing was written"
            )
    conn.executemany("INSERT OR IGNORE INTO field_types(name, type) VALUES (?, ?)", list(types.items()))


def _admit(
    conn: sqlite3.Connection, docs: Sequence[Document], types: Mapping[str, str] | None = None
) -> list[str | None]:
    """Check the documents' fields against the collection's types (with `types` declared first: `_declare`), fixing
    the types of names new to it in the same transaction (service.fields.checks.admit: a mismatch raises and the
    transaction writes nothing); returns each document's fields as stored."""
    _declare(conn, types)
    added, stored = admit(_field_types(conn), ((d.id, d.fields) for d in docs))
    conn.executemany("INSERT INTO field_types(name, type) VALUES (?, ?)", list(added.items()))
    return [fields_json(fields) for fields in stored]


@dataclass(frozen=True, slots=True)
class Changes:
    """The writes after `since` as the store holds them now (a replica's catch-up, cluster.replication): each
    changed document's current version with its sequence number, each deleted id with its delete's, the sequence
    the store had reached (`last_seq`) and the term of every write after `since` (`terms`: (first seq, term)
    ranges, service.store's `terms` table). Applied to a store at `since` whose history matches, it gives the
    same documents with the same sequence numbers."""

    since: int
    last_seq: int
    puts: list[StoredDocument]
    deletes: list[tuple[str, int]]
    terms: list[tuple[int, int]]
    # The field types of the store read from (service.fields): declared first where applied, so that a name is
    # typed as there even when a copy sees its first value here (a date-like string of a keyword field).
    types: dict[str, str] = field(default_factory=dict)


def corpus_fingerprint(path: Path | None) -> str:
    """sha256 of the corpus file's bytes: the identity of the documents a store was seeded from."""
    if path is None:
        return "none"
    if not path.is_file():
        raise DataFileError(path, None, "no such file")
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def digest(title: str, text: str) -> str:
    """Identity of a document's contents, to tell which side (corpus or API) changed it."""
    return hashlib.sha256(f"{title}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    conn.create_function("ssi_digest", 2, digest, deterministic=True)
    return conn


@dataclass(frozen=True, slots=True)
class MergeReport:
    """What merging a changed corpus did (see `DocumentStore.merge_corpus`)."""

    added: int  # ids new to the corpus and to the store
    updated: int  # changed in the corpus, never written through the API: the corpus version now
    kept: int  # changed in the corpus, but written through the API: the API version stays
    left_deleted: int  # listed by the corpus, deleted through the API: stays deleted
    dropped_from_corpus: int  # seeded earlier, no longer in the corpus: kept in the store

    def describe(self) -> str:
        return (
            f"{self.added} added, {self.updated} updated, {self.kept} kept as written through the API, "
            f"{self.left_deleted} left deleted (deleted through the API), "
            f"{self.dropped_from_corpus} no longer in the corpus (kept; delete them through the API)"
        )


class StoreView:
    """A consistent read of the store at one sequence number (one SQLite read transaction)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.last_seq = int(conn.execute("SELECT value FROM meta WHERE key='last_seq'").fetchone()[0])
        self.count = int(conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0])
        floor = conn.execute("SELECT value FROM meta WHERE key='log_floor'").fetchone()
        # Log entries up to log_floor were trimmed: a state older than that cannot be replayed.
        self.log_floor = int(floor[0]) if floor else 0

    def iter_batches(self, size: int) -> Iterator[list[StoredDocument]]:
        cursor = self._conn.execute(f"SELECT {_COLUMNS} FROM documents ORDER BY seq")
        while rows := cursor.fetchmany(size):
            yield [StoredDocument.of_row(row) for row in rows]

    def field_types(self) -> dict[str, str]:
        """The collection's field types (ssi.fields.schema) at this read."""
        return _field_types(self._conn)

    def iter_fields(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(id, fields) of every document that has fields: what a state's field index is built from."""
        for doc_id, fields in self._conn.execute("SELECT id, fields FROM documents WHERE fields IS NOT NULL"):
            yield doc_id, json.loads(fields)

    def changed_since(self, seq: int) -> list[str]:
        """Ids written (put or deleted) after `seq`, each once; an error if the log no longer reaches back."""
        if seq < self.log_floor:
            raise StoreError(f"the write log starts after write {self.log_floor}: cannot replay from write {seq}")
        rows = self._conn.execute("SELECT DISTINCT doc_id FROM log WHERE seq > ?", (seq,)).fetchall()
        return [row[0] for row in rows]

    def get_many(self, ids: Sequence[str]) -> dict[str, StoredDocument]:
        return _get_many(self._conn, ids)

    def term_at(self, seq: int) -> int:
        """The term write `seq` was made in (0: before any replicated write, or for seq 0)."""
        return _term_at(self._conn, seq)

    def changes_since(self, seq: int) -> Changes:
        """What a store at `seq` with the same history lacks (`Changes`); an error if the log no longer reaches."""
        changed = self.changed_since(seq)
        current = self.get_many(changed)
        deletes: list[tuple[str, int]] = []
        gone = [doc_id for doc_id in changed if doc_id not in current]
        for start in range(0, len(gone), 500):
            chunk = gone[start : start + 500]
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT doc_id, MAX(seq) FROM log WHERE op='delete' AND doc_id IN ({marks}) GROUP BY doc_id"
            deletes.extend((doc_id, int(at)) for doc_id, at in self._conn.execute(sql, chunk))
        terms = [(seq + 1, self.term_at(seq + 1))] if self.last_seq > seq else []
        later = "SELECT first_seq, term FROM terms WHERE first_seq > ? ORDER BY first_seq"
        rows = self._conn.execute(later, (seq + 1,))
        terms.extend((int(first), int(term)) for first, term in rows)
        puts = sorted(current.values(), key=lambda doc: doc.seq)
        return Changes(seq, self.last_seq, puts, sorted(deletes, key=lambda d: d[1]), terms, self.field_types())


def _term_at(conn: sqlite3.Connection, seq: int) -> int:
    row = conn.execute("SELECT term FROM terms WHERE first_seq <= ? ORDER BY first_seq DESC LIMIT 1", (seq,)).fetchone()
    return int(row[0]) if row and seq > 0 else 0


def _get_many(conn: sqlite3.Connection, ids: Sequence[str], text_chars: int | None = None) -> dict[str, StoredDocument]:
    """The documents of `ids` that exist; with `text_chars`, only the first that many characters of each text
    (a snippet needs no more, and a batch of hits over long documents would otherwise read them whole)."""
    found: dict[str, StoredDocument] = {}
    text = "text" if text_chars is None else f"substr(text, 1, {int(text_chars)})"
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(f"SELECT id, title, {text}, seq, fields FROM documents WHERE id IN ({marks})", chunk):
            found[row[0]] = StoredDocument.of_row(row)
    return found


class DocumentStore:
    """One collection's documents and write log in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._writer = _connect(path)
            self._writer.executescript(_SCHEMA)
            self._init_meta()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path}: not a usable document store ({exc})") from None
        self._write_lock = threading.Lock()
        self._pool: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._closed = False
        self.line_fields: LineFields | None = None  # open_for_corpus: what a corpus line holds as fields

    def _init_meta(self) -> None:
        conn = self._writer
        conn.execute("BEGIN IMMEDIATE")
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                defaults = {"schema_version": SCHEMA_VERSION, "uuid": uuid.uuid4().hex, "last_seq": "0"}
                conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", list(defaults.items()))
                meta = defaults
            elif meta.get("schema_version") in ("1", "2"):
                if meta["schema_version"] == "1":
                    self._migrate_from_1(conn, meta)
                self._migrate_from_2(conn)
                meta["schema_version"] = SCHEMA_VERSION
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {meta.get('schema_version')!r}, expected {SCHEMA_VERSION}")
        self.uuid: str = meta["uuid"]

    @staticmethod
    def _migrate_from_1(conn: sqlite3.Connection, meta: dict[str, str]) -> None:
        """Version 1 had no `seeded` table: rebuild it from what version 1 knew.

        Documents still at their import sequence are the corpus's; ids deleted through the API are
        recorded with no digest, so a merge never brings a deleted document back.
        """
        import_seq = int(meta.get("import_seq", "0"))
        conn.execute(
            "INSERT OR IGNORE INTO seeded(id, digest) SELECT id, ssi_digest(title, text) FROM documents WHERE seq <= ?",
            (import_seq,),
        )
        conn.execute(
            "INSERT OR IGNORE INTO seeded(id, digest) SELECT DISTINCT doc_id, NULL FROM log "
            "WHERE op = 'delete' AND doc_id NOT IN (SELECT id FROM documents)"
        )

    @staticmethod
    def _migrate_from_2(conn: sqlite3.Connection) -> None:
        """Version 2 had no fields: a NULL `fields` column for every document (field_types comes from _SCHEMA)."""
        columns = {row[1] for row in conn.execute("PRAGMA table_info(documents)")}
        if "fields" not in columns:
            conn.execute("ALTER TABLE documents ADD COLUMN fields TEXT")
        conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (SCHEMA_VERSION,))

    @staticmethod
    def path_for(store_dir: Path, collection: str) -> Path:
        return store_dir / collection / STORE_FILE

    @classmethod
    def open_for_corpus(
        cls,
        store_dir: Path,
        collection: str,
        corpus: Path | None,
        on_progress: Callable[[int], None] | None = None,
        *,
        on_change: CorpusChange = "merge",
        fields: Mapping[str, str] | None = None,
        line_fields: LineFields | None = None,
    ) -> DocumentStore:
        """The collection's store: seeded from `corpus` on first use, afterwards the truth.

        A corpus file that changed since it seeded the store is merged (`merge_corpus`) or, with
        `on_change="refuse"`, refused with a `StoreError` that says what to do. `fields`: the field types the
        collection's spec declares (service.fields); `line_fields`: what a corpus line holds as fields besides its
        `fields` object (an adverts collection's old top-level metadata: service.adverts.corpus_fields).
        """
        path = cls.path_for(store_dir, collection)
        if not path.exists():
            _adopt_legacy_store(path, corpus_fingerprint(corpus) if corpus is not None else "none")
        store = cls(path)
        store.line_fields = line_fields
        try:
            if fields:  # declared types come first: the corpus's values are checked against them
                store.declare_fields(fields)
            if corpus is not None:
                store._seed_or_merge(corpus, on_progress, on_change)
        except BaseException:
            store.close()
            raise
        return store

    def _seed_or_merge(self, corpus: Path, on_progress: Callable[[int], None] | None, on_change: CorpusChange) -> None:
        fingerprint = corpus_fingerprint(corpus)
        seeded_from = self.meta("corpus_sha256")
        if seeded_from == fingerprint:
            return
        if self.last_seq == 0:
            log.info("seeding document store %s from %s", self.path, corpus)
            self.import_corpus(corpus, fingerprint, on_progress)
            return
        what = "changed since it seeded" if seeded_from else "was not what seeded"
        if on_change == "refuse":
            raise StoreError(
                f"corpus {corpus} {what} the document store {self.path} ({self.count()} documents, "
                f"written through the API included): the store is the truth. Serve the store without "
                f"--corpus, restore the earlier corpus file, or set SSI_CORPUS_CHANGE=merge to bring "
                f"in what only the corpus changed"
            )
        report = self.merge_corpus(corpus, fingerprint)
        log.warning("corpus %s %s the document store %s: merged: %s", corpus, what, self.path, report.describe())

    # -- reads ---------------------------------------------------------------------------------

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        with self._pool_lock:
            conn = self._pool.pop() if self._pool else None
        if conn is None:
            conn = _connect(self.path)
        try:
            yield conn
        finally:
            with self._pool_lock:
                if self._closed or len(self._pool) >= 8:
                    conn.close()
                else:
                    self._pool.append(conn)

    def meta(self, key: str) -> str | None:
        with self._reader() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    @property
    def last_seq(self) -> int:
        return int(self.meta("last_seq") or 0)

    def count(self) -> int:
        with self._reader() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def log_entries(self) -> int:
        with self._reader() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM log").fetchone()[0])

    def disk_bytes(self) -> int:
        """Bytes on disk: the database, its WAL and shared-memory files."""
        total = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                total += os.stat(f"{self.path}{suffix}").st_size
            except FileNotFoundError:
                pass
        return total

    def get(self, doc_id: str) -> StoredDocument | None:
        with self._reader() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM documents WHERE id=?", (doc_id,)).fetchone()
        return StoredDocument.of_row(row) if row else None

    def field_types(self) -> dict[str, str]:
        """The collection's field types (ssi.fields.schema), as fixed by first use or declared."""
        with self._reader() as conn:
            return _field_types(conn)

    def set_fields(self, changes: Mapping[str, Callable[[dict[str, Any] | None], dict[str, Any] | None]]) -> int:
        """Change stored documents' fields in place, each to `changes[id](its fields)`, in one transaction, checked
        against the collection's types (a mismatch writes nothing), without a write sequence number: for a migration
        before any state is opened (service.adverts.adopt_book), whose field index is then built from the store.
        Ids the store does not hold are skipped; returns how many documents were changed."""
        ids = list(changes)
        with self._transaction() as conn:
            held: dict[str, dict[str, Any] | None] = {}
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for doc_id, fields in conn.execute(f"SELECT id, fields FROM documents WHERE id IN ({marks})", chunk):
                    held[doc_id] = json.loads(fields) if fields else None
            docs = [Document(id=i, title="", text="", fields=changes[i](held[i])) for i in held]
            stored = _admit(conn, docs)
            conn.executemany(
                "UPDATE documents SET fields=? WHERE id=?", [(f, d.id) for d, f in zip(docs, stored, strict=True)]
            )
        return len(docs)

    def declare_fields(self, types: Mapping[str, str]) -> None:
        """Fix the types of fields named in the collection's spec (SSI_COLLECTIONS); a name already typed
        otherwise is a `StoreError`."""
        with self._transaction() as conn:
            try:
                _declare(conn, types)
            except FieldTypeError as exc:
                raise StoreError(f"{self.path}: {exc.message}") from None

    def get_many(self, ids: Sequence[str], text_chars: int | None = None) -> dict[str, StoredDocument]:
        with self._reader() as conn:
            return _get_many(conn, ids, text_chars)

    @contextmanager
    def view(self) -> Iterator[StoreView]:
        """A consistent read of every document at one sequence number, however long it is iterated."""
        conn = _connect(self.path)
        try:
            conn.execute("BEGIN")
            yield StoreView(conn)
        finally:
            try:
                conn.execute("ROLLBACK")
            finally:
                conn.close()

    # -- writes --------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock:
            conn = self._writer
            with write_transaction(conn, self.path, "BEGIN IMMEDIATE"):
                yield conn

    @staticmethod
    def _next_seq(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT value FROM meta WHERE key='last_seq'").fetchone()[0]) + 1

    @staticmethod
    def _set_seq(conn: sqlite3.Connection, seq: int) -> None:
        conn.execute("UPDATE meta SET value=? WHERE key='last_seq'", (str(seq),))

    @staticmethod
    def _record_term(conn: sqlite3.Connection, first_seq: int, term: int | None) -> None:
        """Writes from `first_seq` on are of `term` (a replicated shard's primary term; None: not replicated)."""
        if term is not None and _term_at(conn, first_seq - 1) != term:
            conn.execute("INSERT OR REPLACE INTO terms(first_seq, term) VALUES (?, ?)", (first_seq, term))

    def put(
        self, docs: Sequence[Document], term: int | None = None, types: Mapping[str, str] | None = None
    ) -> list[int]:
        """Add or replace documents in one durable transaction; returns each one's write sequence number. `types`:
        field types to fix first (a shard's write: the cluster's types of the names it uses, cluster.fanout)."""
        with self._transaction() as conn:
            self._record_term(conn, self._next_seq(conn), term)
            return self._put_in(conn, docs, types)

    def _put_in(
        self, conn: sqlite3.Connection, docs: Sequence[Document], types: Mapping[str, str] | None = None
    ) -> list[int]:
        first = self._next_seq(conn)
        seqs = list(range(first, first + len(docs)))
        fields = _admit(conn, docs, types)  # before anything is written: a type mismatch writes nothing
        conn.executemany(
            "INSERT INTO documents(id, seq, title, text, fields) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET seq=excluded.seq, title=excluded.title, text=excluded.text, "
            "fields=excluded.fields",
            [(d.id, s, d.title, d.text, f) for d, s, f in zip(docs, seqs, fields, strict=True)],
        )
        conn.executemany(
            "INSERT INTO log(seq, op, doc_id) VALUES (?, 'put', ?)",
            [(s, d.id) for d, s in zip(docs, seqs, strict=True)],
        )
        if seqs:
            self._set_seq(conn, seqs[-1])
        return seqs

    def delete(self, doc_id: str, term: int | None = None) -> int | None:
        """Delete one document durably; None (and nothing written) when there is no such document."""
        with self._transaction() as conn:
            if conn.execute("SELECT 1 FROM documents WHERE id=?", (doc_id,)).fetchone() is None:
                return None
            seq = self._next_seq(conn)
            self._record_term(conn, seq, term)
            conn.execute("DELETE FROM documents WHERE id=?", (doc_id,))
            conn.execute("INSERT INTO log(seq, op, doc_id) VALUES (?, 'delete', ?)", (seq, doc_id))
            self._set_seq(conn, seq)
        return seq

    def apply_changes(self, changes: Changes) -> None:
        """Bring this store, at `changes.since` with the same history, to the store `changes` was read from, in one
        durable transaction: the same documents under the same sequence numbers, and the same terms."""
        with self._transaction() as conn:
            if self._next_seq(conn) - 1 != changes.since:
                raise StoreError(f"{self.path}: at write {self._next_seq(conn) - 1}, not at write {changes.since}")
            conn.execute("DELETE FROM terms WHERE first_seq > ?", (changes.since,))
            conn.executemany("INSERT OR REPLACE INTO terms(first_seq, term) VALUES (?, ?)", changes.terms)
            conn.executemany("DELETE FROM documents WHERE id=?", [(doc_id,) for doc_id, _ in changes.deletes])
            fields = _admit(conn, [d.as_document() for d in changes.puts], changes.types)
            conn.executemany(
                "INSERT INTO documents(id, seq, title, text, fields) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET seq=excluded.seq, title=excluded.title, text=excluded.text, "
                "fields=excluded.fields",
                [(d.id, d.seq, d.title, d.text, f) for d, f in zip(changes.puts, fields, strict=True)],
            )
            log_rows = [(d.seq, "put", d.id) for d in changes.puts] + [(s, "delete", i) for i, s in changes.deletes]
            conn.executemany("INSERT INTO log(seq, op, doc_id) VALUES (?, ?, ?)", log_rows)
            self._set_seq(conn, changes.last_seq)

    def import_corpus(self, corpus: Path, fingerprint: str, on_progress: Callable[[int], None] | None = None) -> int:
        """Load every document of a JSONL corpus, all or nothing; a repeated id is a `DataFileError`."""
        count = 0
        types: dict[str, str] = {}

        def rows(docs: Iterable[Document]) -> Iterator[tuple[str, int, str, str, str | None]]:
            nonlocal count
            for doc in docs:
                count += 1
                yield doc.id, count, doc.title, doc.text, _corpus_fields(corpus, count, doc, types)
                if on_progress is not None and count % 10_000 == 0:
                    on_progress(count)

        with self._transaction() as conn:
            conn.execute("DELETE FROM documents")
            conn.execute("DELETE FROM log")
            conn.execute("DELETE FROM seeded")
            types.update(_field_types(conn))  # declared in the collection's spec (declare_fields)
            try:
                conn.executemany(
                    "INSERT INTO documents(id, seq, title, text, fields) VALUES (?, ?, ?, ?, ?)",
                    rows(iter_corpus(corpus, self.line_fields)),
                )
            except sqlite3.IntegrityError:
                raise DataFileError(
                    corpus, None, f"duplicate document id (document #{count} repeats an earlier id)"
                ) from None
            if count == 0:
                raise DataFileError(corpus, None, "the corpus holds no documents")
            self._set_seq(conn, count)
            conn.executemany("INSERT OR IGNORE INTO field_types(name, type) VALUES (?, ?)", list(types.items()))
            conn.execute("INSERT INTO seeded(id, digest) SELECT id, ssi_digest(title, text) FROM documents")
            self._set_meta(conn, {"imported": "1", "import_seq": str(count), "corpus": str(corpus)})
            self._set_meta(conn, {"corpus_sha256": fingerprint})
        if on_progress is not None:
            on_progress(count)
        log.info("imported %d documents from %s", count, corpus)
        return count

    @staticmethod
    def _set_meta(conn: sqlite3.Connection, values: dict[str, str]) -> None:
        conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", list(values.items()))

    def merge_corpus(self, corpus: Path, fingerprint: str) -> MergeReport:
        """Bring a changed corpus into the store, in one transaction, as writes the index replays.

        The store is the truth; the corpus only decides what it alone owns. For each corpus document:
        a new id (never seeded, not in the store) is added; a document the corpus changed is updated
        only if the store still holds what the corpus had seeded (the API never touched it);
        otherwise the API's version, or its delete, stands. Documents the corpus no longer lists stay.
        """

        types: dict[str, str] = {}

        def rows() -> Iterator[tuple[str, str, str, str | None, str]]:
            for number, doc in enumerate(iter_corpus(corpus, self.line_fields), 1):
                fields = _corpus_fields(corpus, number, doc, types)
                yield doc.id, doc.title, doc.text, fields, digest(doc.title, doc.text)

        with self._transaction() as conn:
            types.update(_field_types(conn))
            conn.execute(
                "CREATE TEMP TABLE incoming (id TEXT PRIMARY KEY, title TEXT, text TEXT, fields TEXT, digest TEXT)"
            )
            try:
                try:
                    conn.executemany(
                        "INSERT INTO incoming(id, title, text, fields, digest) VALUES (?, ?, ?, ?, ?)", rows()
                    )
                except sqlite3.IntegrityError:
                    raise DataFileError(corpus, None, "duplicate document id") from None

                def count(sql: str) -> int:
                    return int(conn.execute(sql).fetchone()[0])

                joined = "FROM incoming i LEFT JOIN seeded s ON s.id = i.id LEFT JOIN documents d ON d.id = i.id WHERE "
                stored = "ssi_digest(d.title, d.text)"
                new = "s.id IS NULL AND d.id IS NULL"
                changed = "s.id IS NOT NULL AND s.digest IS NOT i.digest"
                owned = f"d.id IS NOT NULL AND {stored} IS s.digest"
                # Held in a version the API wrote, which differs from the corpus's new version.
                api_owned = (
                    f"d.id IS NOT NULL AND {stored} IS NOT i.digest "
                    f"AND (s.id IS NULL OR (s.digest IS NOT i.digest AND {stored} IS NOT s.digest))"
                )
                # Applied as ordinary puts (the next sequence numbers, logged), in SQL so nothing is held in memory.
                base = self._next_seq(conn) - 1
                conn.execute(
                    f"CREATE TEMP TABLE applied AS SELECT i.id AS id, i.title AS title, i.text AS text, "
                    f"i.fields AS fields, "
                    f"{base} + row_number() OVER (ORDER BY i.rowid) AS seq {joined} ({new}) OR ({changed} AND {owned})"
                )
                applied = count("SELECT COUNT(*) FROM temp.applied")
                added = count(f"SELECT COUNT(*) {joined} {new}")
                report = MergeReport(
                    added=added,
                    updated=applied - added,
                    kept=count(f"SELECT COUNT(*) {joined} {api_owned}"),
                    left_deleted=count(f"SELECT COUNT(*) {joined} s.id IS NOT NULL AND d.id IS NULL"),
                    dropped_from_corpus=count(
                        "SELECT COUNT(*) FROM seeded s JOIN documents d ON d.id = s.id "
                        "WHERE s.id NOT IN (SELECT id FROM incoming)"
                    ),
                )
                conn.executemany("INSERT OR IGNORE INTO field_types(name, type) VALUES (?, ?)", list(types.items()))
                conn.execute(
                    "INSERT INTO documents(id, seq, title, text, fields) "
                    "SELECT id, seq, title, text, fields FROM temp.applied WHERE true "
                    "ON CONFLICT(id) DO UPDATE SET seq=excluded.seq, title=excluded.title, text=excluded.text, "
                    "fields=excluded.fields"
                )
                conn.execute("INSERT INTO log(seq, op, doc_id) SELECT seq, 'put', id FROM temp.applied")
                if applied:
                    self._set_seq(conn, base + applied)
                conn.execute(
                    "INSERT INTO seeded(id, digest) SELECT id, digest FROM incoming WHERE true "
                    "ON CONFLICT(id) DO UPDATE SET digest = excluded.digest"
                )
                self._set_meta(conn, {"imported": "1", "corpus": str(corpus), "corpus_sha256": fingerprint})
            finally:
                conn.execute("DROP TABLE IF EXISTS temp.applied")
                conn.execute("DROP TABLE temp.incoming")
        return report

    def checkpoint(self) -> bool:
        """Copy the WAL into the database and truncate it, unless a reader still needs it; True if done.

        SQLite checkpoints on its own but never shrinks the WAL; after a trim this keeps the files
        at the size of what they hold. Writes wait for it (a few ms per MB), readers do not: a busy
        reader makes it give up after 200 ms rather than hold the writes up.
        """
        with self._write_lock:
            self._writer.execute("PRAGMA busy_timeout=200")
            try:
                busy, _, _ = self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                self._writer.execute("PRAGMA busy_timeout=60000")
        return busy == 0

    def trim_log(self, upto_seq: int) -> int:
        """Drop log entries up to `upto_seq` (the oldest snapshot kept reflects them); returns how many."""
        with self._transaction() as conn:
            floor = int((conn.execute("SELECT value FROM meta WHERE key='log_floor'").fetchone() or ("0",))[0])
            if upto_seq <= floor:
                return 0
            removed = conn.execute("DELETE FROM log WHERE seq <= ?", (upto_seq,)).rowcount
            self._set_meta(conn, {"log_floor": str(upto_seq)})
        return int(removed)

    def close(self) -> None:
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()
        with self._write_lock:
            self._writer.close()


def _corpus_fields(corpus: Path, number: int, doc: Document, types: dict[str, str]) -> str | None:
    """A corpus document's fields as stored, checked against the types so far (`types`, extended with the names
    it is the first to use); a bad value is a `DataFileError` naming the line, and nothing is imported."""
    if not doc.fields:
        return None
    try:
        added, (stored,) = field_schema.admit(types, [(doc.id, field_schema.check_shape(doc.fields))])
    except FieldError as exc:
        raise DataFileError(corpus, number, str(exc)) from None
    types.update(added)
    return fields_json(stored)


def _adopt_legacy_store(path: Path, fingerprint: str) -> None:
    """Copy a version-1 store (one per corpus file, named by its hash) into the one store of its collection.

    The store seeded from the current corpus file is the one that was being served; failing that,
    the most recently written one. It is copied with SQLite's online backup (WAL included) and then
    removed; stores of other corpus versions are left where they are, named in a warning.
    """
    legacy = [p for p in path.parent.glob("*.sqlite") if _LEGACY_NAME.match(p.name)]
    if not legacy:
        return
    wanted = "empty" if fingerprint == "none" else fingerprint[:16]

    def written(p: Path) -> float:
        return max(Path(f"{p}{suffix}").stat().st_mtime for suffix in ("", "-wal") if Path(f"{p}{suffix}").exists())

    chosen = next((p for p in legacy if p.stem == wanted), None) or max(legacy, key=written)
    old = DocumentStore(chosen)  # opening recovers its WAL and upgrades its schema
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        copy = sqlite3.connect(partial)
        try:
            with old._write_lock:
                old._writer.backup(copy)
        finally:
            copy.close()
    finally:
        old.close()
    with partial.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, path)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{chosen}{suffix}").unlink(missing_ok=True)
    others = ", ".join(str(p) for p in legacy if p != chosen)
    log.warning(
        "moved the document store %s to %s (one store per collection now)%s",
        chosen,
        path,
        f"; stores of other corpus versions are left as they were: {others}" if others else "",
    )
