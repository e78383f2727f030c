"""The document store: SQLite in WAL mode, the source of truth for a collection's documents.

Every write gets the next number of a monotonically increasing write sequence and is logged with
it in the same transaction; `synchronous=FULL` makes a write durable before it is acknowledged. The
in-memory index is derived state: it is saved in snapshots that record the sequence they reflect,
and on start the writes logged after that sequence are replayed (`changed_since`), so a crash at any
moment loses nothing that was acknowledged.

A store is seeded once from a corpus file and is keyed by that file's fingerprint: pointing the
service at a different corpus file starts a different store (the old one, with any writes made
through the API, stays on disk). The tf-idf vectors are not kept here but in the index snapshots,
because they depend on the bundle's vocabulary, not on the document alone.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ssi.corpus import DataFileError, iter_corpus
from ssi.records import Document

log = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS documents_by_seq ON documents(seq);
CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, op TEXT NOT NULL, doc_id TEXT NOT NULL);
"""


class StoreError(RuntimeError):
    """The store file cannot be used (wrong schema, unreadable)."""


@dataclass(frozen=True, slots=True)
class StoredDocument:
    id: str
    title: str
    text: str
    seq: int

    def as_document(self) -> Document:
        return Document(id=self.id, title=self.title, text=self.text)


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


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


class StoreView:
    """A consistent read of the store at one sequence number (one SQLite read transaction)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.last_seq = int(conn.execute("SELECT value FROM meta WHERE key='last_seq'").fetchone()[0])
        self.count = int(conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def iter_batches(self, size: int) -> Iterator[list[StoredDocument]]:
        cursor = self._conn.execute("SELECT id, title, text, seq FROM documents ORDER BY seq")
        while rows := cursor.fetchmany(size):
            yield [StoredDocument(*row) for row in rows]

    def changed_since(self, seq: int) -> list[str]:
        """Ids written (put or deleted) after `seq`, each once."""
        rows = self._conn.execute("SELECT DISTINCT doc_id FROM log WHERE seq > ?", (seq,)).fetchall()
        return [row[0] for row in rows]

    def get_many(self, ids: Sequence[str]) -> dict[str, StoredDocument]:
        return _get_many(self._conn, ids)


def _get_many(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, StoredDocument]:
    found: dict[str, StoredDocument] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(f"SELECT id, title, text, seq FROM documents WHERE id IN ({marks})", chunk):
            found[row[0]] = StoredDocument(*row)
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

    def _init_meta(self) -> None:
        conn = self._writer
        conn.execute("BEGIN IMMEDIATE")
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                defaults = {"schema_version": SCHEMA_VERSION, "uuid": uuid.uuid4().hex, "last_seq": "0"}
                conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", list(defaults.items()))
                meta = defaults
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {meta.get('schema_version')!r}, expected {SCHEMA_VERSION}")
        self.uuid: str = meta["uuid"]

    @staticmethod
    def path_for(store_dir: Path, collection: str, fingerprint: str) -> Path:
        name = "empty" if fingerprint == "none" else fingerprint[:16]
        return store_dir / collection / f"{name}.sqlite"

    @classmethod
    def open_for_corpus(
        cls,
        store_dir: Path,
        collection: str,
        corpus: Path | None,
        on_progress: Callable[[int], None] | None = None,
    ) -> DocumentStore:
        """Open the store seeded from `corpus`, importing the corpus on first use (in one transaction)."""
        fingerprint = corpus_fingerprint(corpus)
        store = cls(cls.path_for(store_dir, collection, fingerprint))
        if corpus is not None and store.meta("imported") != "1":
            log.info("seeding document store %s from %s", store.path, corpus)
            store.import_corpus(corpus, fingerprint, on_progress)
        return store

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

    def get(self, doc_id: str) -> StoredDocument | None:
        with self._reader() as conn:
            row = conn.execute("SELECT id, title, text, seq FROM documents WHERE id=?", (doc_id,)).fetchone()
        return StoredDocument(*row) if row else None

    def get_many(self, ids: Sequence[str]) -> dict[str, StoredDocument]:
        with self._reader() as conn:
            return _get_many(conn, ids)

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
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @staticmethod
    def _next_seq(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT value FROM meta WHERE key='last_seq'").fetchone()[0]) + 1

    @staticmethod
    def _set_seq(conn: sqlite3.Connection, seq: int) -> None:
        conn.execute("UPDATE meta SET value=? WHERE key='last_seq'", (str(seq),))

    def put(self, docs: Sequence[Document]) -> list[int]:
        """Add or replace documents in one durable transaction; returns each one's write sequence number."""
        with self._transaction() as conn:
            first = self._next_seq(conn)
            seqs = list(range(first, first + len(docs)))
            conn.executemany(
                "INSERT INTO documents(id, seq, title, text) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET seq=excluded.seq, title=excluded.title, text=excluded.text",
                [(d.id, s, d.title, d.text) for d, s in zip(docs, seqs, strict=True)],
            )
            conn.executemany(
                "INSERT INTO log(seq, op, doc_id) VALUES (?, 'put', ?)",
                [(s, d.id) for d, s in zip(docs, seqs, strict=True)],
            )
            if seqs:
                self._set_seq(conn, seqs[-1])
        return seqs

    def delete(self, doc_id: str) -> int | None:
        """Delete one document durably; None (and nothing written) when there is no such document."""
        with self._transaction() as conn:
            if conn.execute("SELECT 1 FROM documents WHERE id=?", (doc_id,)).fetchone() is None:
                return None
            seq = self._next_seq(conn)
            conn.execute("DELETE FROM documents WHERE id=?", (doc_id,))
            conn.execute("INSERT INTO log(seq, op, doc_id) VALUES (?, 'delete', ?)", (seq, doc_id))
            self._set_seq(conn, seq)
        return seq

    def import_corpus(self, corpus: Path, fingerprint: str, on_progress: Callable[[int], None] | None = None) -> int:
        """Load every document of a JSONL corpus, all or nothing; a repeated id is a `DataFileError`."""
        count = 0

        def rows(docs: Iterable[Document]) -> Iterator[tuple[str, int, str, str]]:
            nonlocal count
            for doc in docs:
                count += 1
                yield doc.id, count, doc.title, doc.text
                if on_progress is not None and count % 10_000 == 0:
                    on_progress(count)

        with self._transaction() as conn:
            conn.execute("DELETE FROM documents")
            conn.execute("DELETE FROM log")
            try:
                conn.executemany(
                    "INSERT INTO documents(id, seq, title, text) VALUES (?, ?, ?, ?)", rows(iter_corpus(corpus))
                )
            except sqlite3.IntegrityError:
                raise DataFileError(
                    corpus, None, f"duplicate document id (document #{count} repeats an earlier id)"
                ) from None
            if count == 0:
                raise DataFileError(corpus, None, "the corpus holds no documents")
            self._set_seq(conn, count)
            conn.executemany(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                [
                    ("imported", "1"),
                    ("import_seq", str(count)),
                    ("corpus", str(corpus)),
                    ("corpus_sha256", fingerprint),
                ],
            )
        if on_progress is not None:
            on_progress(count)
        log.info("imported %d documents from %s", count, corpus)
        return count

    def close(self) -> None:
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()
        with self._write_lock:
            self._writer.close()
