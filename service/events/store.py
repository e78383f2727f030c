"""One collection's traffic log: the impressions it answered with and the clicks reported on them.

Why two speeds. A search must not wait for a disk: an impression is put on an in-memory queue and a writer
thread commits the queue every `FLUSH_SECONDS` (or every `FLUSH_BATCH` impressions) in one transaction, with
`synchronous=NORMAL`; a crash loses at most the last fraction of a second of impressions, never a search. A
click is the label the trainer learns from and is acknowledged only once committed with `synchronous=FULL`
(like a document write), so an acknowledged click survives `kill -9`.

A click on an impression this process has not yet committed commits the queue first; one on an impression of
another worker process of the group that is younger than the flush interval waits for that worker's commit
(the id carries its time, so a stale or forged id is answered at once).

Bounds: impressions older than `max_age` are deleted with their clicks, and when the file's live pages pass
`max_bytes` the oldest impressions go until it is below 90 % of that; pages freed are returned to the file
system (incremental vacuum), so the file itself stays within the bound. Texts (queries, pages) are kept once
per hash and only as the text setting allows: `plain` (the text), `hash` (a salted hash: equal queries stay
grouped, the text is gone), `none` (neither).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from service.errors import NotFound
from service.store import write_transaction
from ssi.traffic import EVENTS_FILE, EVENTS_SCHEMA, EVENTS_SCHEMA_VERSION

log = logging.getLogger(__name__)

TextMode = Literal["plain", "hash", "none"]

FLUSH_SECONDS = 0.1
UNKNOWN_IMPRESSION = "unknown or expired impression: report a click with the impression id of a recent answer"
FLUSH_BATCH = 512  # queued impressions that wake the writer before its interval
FLUSH_CHUNK = 2048  # impressions committed in one transaction at most
MAX_PENDING = 100_000  # impressions queued for the writer; beyond, new ones are dropped (and counted)
PRUNE_EVERY = 30.0  # seconds between two checks of the bounds...
PRUNE_SHARE = 0.05  # ...or sooner, once about this share of max_bytes was written since the last check
WAIT_FOR_PEER = 0.5  # seconds a click waits for another worker's commit of a young impression
_ID_TIME_BYTES = 6
# What an impression records of the filter its list was ranked under (service.events.traffic.filter_shown): the
# request's filter and the filtered read key's filter as canonical JSON (ssi.traffic.canonical_filter), the key's
# hash; None where there is none.
ShownFilter = tuple[str | None, str | None, str | None]


@dataclass(slots=True)
class Impression:
    """What one answer showed: kept as given until the writer commits it. Not frozen: a frozen dataclass sets each
    field through object.__setattr__, on the search's path."""

    id: str
    at: float
    kind: str
    text: str | None
    model: str
    randomized: bool
    first_position: int
    shown: list[str]  # the caller's own list, not copied
    # An interleaved answer's (candidate's content hash, who placed each shown id: ssi.interleaving.team_draft)
    interleaved: tuple[str, str] | None = None
    # A filtered answer's (its request's filter, its read key's hash, that key's filter: ssi.traffic's `filtered`)
    filtered: ShownFilter | None = None


@dataclass(frozen=True, slots=True)
class ClickOutcome:
    recorded: bool  # False: this (impression, id) was reported before; the click counts once
    position: int


class _RandomBytes:
    """The operating system's random bytes (os.urandom), read 4 kB at a time: one system call per 341 ids rather
    than one per search (each took 4–24 µs here, a call that also hands the GIL to the log's writer thread).
    Emptied in a forked child, so two workers of a group never hand out the same bytes."""

    def __init__(self, chunk: int = 4096) -> None:
        self._chunk = chunk
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()  # new in a child: another thread may have held the parent's at the fork
        self._buffer = b""
        self._at = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            if self._at + n > len(self._buffer):
                self._buffer, self._at = os.urandom(max(n, self._chunk)), 0
            out = self._buffer[self._at : self._at + n]
            self._at += n
            return out


_RANDOM = _RandomBytes()


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def new_impression_id(now: float) -> str:
    """An unguessable id (96 random bits) that also tells when it was issued (its first 6 bytes: milliseconds).
    URL-safe base64 made by two C calls (base64.urlsafe_b64encode is two Python frames more, on a search's path)."""
    stamp = int(now * 1000).to_bytes(_ID_TIME_BYTES, "big")
    return binascii.b2a_base64(stamp + _RANDOM.take(12), newline=False).translate(_URLSAFE).decode("ascii")


def issued_at(impression_id: str) -> float | None:
    """When an id of `new_impression_id` was issued; None for anything that is not one."""
    if len(impression_id) != 24:
        return None
    try:
        raw = base64.urlsafe_b64decode(impression_id.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        return None
    return int.from_bytes(raw[:_ID_TIME_BYTES], "big") / 1000.0


def _connect(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


class EventStore:
    """The impressions and clicks of one collection in `<folder>/events.sqlite`, shared by a worker group."""

    def __init__(
        self,
        folder: Path,
        *,
        text_mode: TextMode,
        max_age: float,
        max_bytes: int,
        start_writer: bool = True,
        committed: Callable[[int], None] | None = None,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / EVENTS_FILE
        self.text_mode: TextMode = text_mode
        self.max_age = max_age
        self.max_bytes = max_bytes
        self._committed = committed  # told how many impressions each commit wrote (the metrics: off the search path)
        self._create()
        self._writer = _connect(self.path, "NORMAL")  # impressions and pruning: the writer thread's
        # The WAL counts against the bound too: checkpointed every tenth of it (SQLite's default is 4 MB of
        # pages) and cut back to that size after each checkpoint.
        wal_pages = max(16, min(1000, max_bytes // 10 // 4096))
        self._writer.execute(f"PRAGMA wal_autocheckpoint={wal_pages}")
        self._writer.execute(f"PRAGMA journal_size_limit={wal_pages * 4096}")
        self._clicks = _connect(self.path, "FULL")  # clicks: durable before acknowledged
        self._click_lock = threading.Lock()
        self._salt = self._meta("salt")
        self._pending: deque[Impression] = deque()
        self._wake = threading.Event()
        self._flush_lock = threading.Lock()  # one commit of the queue at a time (the writer's, a click's)
        self.dropped = 0
        self._closing = False
        self._last_prune = 0.0
        self._written = 0  # bytes of rows committed since the last check of the bounds (an estimate)
        self._thread: threading.Thread | None = None
        if start_writer:
            self._thread = threading.Thread(target=self._run, name=f"events-{folder.name}", daemon=True)
            self._thread.start()

    # --- schema -------------------------------------------------------------------------------------------

    def _create(self) -> None:
        # auto_vacuum must be chosen before the file's first page is written (before WAL mode too): pages
        # freed by pruning then go back to the file system.
        first = sqlite3.connect(self.path, isolation_level=None)
        first.execute("PRAGMA auto_vacuum=INCREMENTAL")
        first.close()
        conn = _connect(self.path, "FULL")
        try:
            with write_transaction(conn, self.path, "BEGIN IMMEDIATE"):
                for statement in EVENTS_SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (EVENTS_SCHEMA_VERSION,))
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('salt', ?)", (secrets.token_hex(16),))
            version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
            if version != EVENTS_SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path}: event store schema {version}, this service writes {EVENTS_SCHEMA_VERSION}"
                )
        finally:
            conn.close()

    def _meta(self, key: str) -> str:
        return str(self._writer.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()[0])

    def text_key(self, text: str) -> tuple[str | None, str | None]:
        """(hash, stored text) of a query or page under the text setting."""
        if self.text_mode == "none":
            return None, None
        data = text.encode("utf-8", "surrogatepass")
        if self.text_mode == "hash":
            return hmac.new(self._salt.encode(), data, hashlib.sha256).hexdigest()[:32], None
        return hashlib.sha256(data).hexdigest()[:32], text

    # --- impressions: queued, committed by the writer thread ----------------------------------------------

    def record(
        self,
        kind: str,
        text: str,
        model: str,
        shown: list[str],
        first_position: int,
        randomized: bool,
        interleaved: tuple[str, str] | None = None,
        filtered: ShownFilter | None = None,
    ) -> str | None:
        """Queue an impression (`shown` is kept, not copied); returns its id (None when the queue is full and it was
        dropped). On every search's path: after the server idled between two requests, each Python call here costs
        10-20 times what it does in a tight loop, so it is kept to an id and an append."""
        pending = len(self._pending)
        if pending >= MAX_PENDING:
            self.dropped += 1
            return None
        now = time.time()
        impression_id = new_impression_id(now)
        self._pending.append(
            Impression(impression_id, now, kind, text, model, randomized, first_position, shown, interleaved, filtered)
        )
        if pending + 1 >= FLUSH_BATCH:
            self._wake.set()
        return impression_id

    def _run(self) -> None:
        while not self._closing:
            self._wake.wait(FLUSH_SECONDS)
            self._wake.clear()
            try:
                self.flush()
                if self.prune_due():
                    self.prune()
            except Exception:  # a full disk, a locked file: keep the queue, try again next round
                log.exception("could not write the traffic log %s", self.path)
                time.sleep(1.0)

    def flush(self) -> int:
        """Commit every queued impression, FLUSH_CHUNK to a transaction (a backlog after a stall must not become
        one transaction the size of the bound: the WAL holds a transaction whole), checking the bounds between
        chunks as they fall due; returns how many were committed."""
        committed = 0
        with self._flush_lock:
            while self._pending:
                batch: list[Impression] = []
                while self._pending and len(batch) < FLUSH_CHUNK:
                    batch.append(self._pending.popleft())
                try:
                    self._write(batch)
                except BaseException:
                    self._pending.extendleft(reversed(batch))
                    raise
                committed += len(batch)
                if self._committed is not None:
                    self._committed(len(batch))
                if self._pending and self.prune_due():
                    self._prune()
        return committed

    def prune_due(self) -> bool:
        """Whether to check the bounds now: every PRUNE_EVERY seconds, and under heavy traffic as often as a
        twentieth of the size bound has been written, so the file overshoots its bound by that much at most."""
        return time.monotonic() - self._last_prune >= PRUNE_EVERY or self._written >= PRUNE_SHARE * self.max_bytes

    def _write(self, batch: list[Impression]) -> None:
        texts: dict[str, str | None] = {}
        rows = []
        pairs = [(imp.id, *imp.interleaved) for imp in batch if imp.interleaved is not None]
        filters = [(imp.id, *imp.filtered) for imp in batch if imp.filtered is not None]
        for imp in batch:
            key, stored = self.text_key(imp.text or "")
            if key is not None:
                texts[key] = stored
            rows.append(
                (
                    imp.id,
                    imp.at,
                    imp.kind,
                    key,
                    imp.model,
                    int(imp.randomized),
                    imp.first_position,
                    json.dumps(imp.shown),
                )
            )
        with write_transaction(self._writer, self.path, "BEGIN IMMEDIATE"):
            self._writer.executemany("INSERT OR IGNORE INTO texts VALUES (?, ?)", list(texts.items()))
            self._writer.executemany("INSERT OR IGNORE INTO impressions VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            if pairs:
                self._writer.executemany("INSERT OR IGNORE INTO interleaved VALUES (?, ?, ?)", pairs)
            if filters:
                self._writer.executemany("INSERT OR IGNORE INTO filtered VALUES (?, ?, ?, ?)", filters)
        # Row bytes as written, and an index entry or two each: what the bounds' check is paced by.
        self._written += sum(len(r[7]) + len(r[4]) + 96 for r in rows) + sum(len(t or "") for t in texts.values())
        self._written += sum(sum(len(part or "") for part in f[1:]) + 64 for f in filters)

    # --- clicks: durable before acknowledged ---------------------------------------------------------------

    def _shown(self, impression_id: str) -> tuple[float, int, list[str]] | None:
        with self._click_lock:  # the clicks' connection serves one thread at a time
            row = self._clicks.execute(
                "SELECT at, first_position, shown FROM impressions WHERE id = ?", (impression_id,)
            ).fetchone()
        return None if row is None else (float(row[0]), int(row[1]), json.loads(row[2]))

    def _find(self, impression_id: str) -> tuple[float, int, list[str]]:
        found = self._shown(impression_id)
        if found is None and any(imp.id == impression_id for imp in list(self._pending)):
            self.flush()
            found = self._shown(impression_id)
        issued = issued_at(impression_id)
        if found is None and issued is not None and time.time() - issued < FLUSH_SECONDS + WAIT_FOR_PEER:
            deadline = time.monotonic() + FLUSH_SECONDS + WAIT_FOR_PEER
            while found is None and time.monotonic() < deadline:  # another worker's queue: its next commit
                time.sleep(0.02)
                found = self._shown(impression_id)
        if found is None:
            raise NotFound(UNKNOWN_IMPRESSION)
        at, first, shown = found
        if time.time() - at > self.max_age:
            raise NotFound("expired impression: it is older than SSI_EVENTS_MAX_AGE_DAYS")
        return found

    def click(self, impression_id: str, doc_id: str, dwell_ms: float | None) -> ClickOutcome:
        """Record a click on `doc_id` of the impression; a repeat counts once (a later dwell fills a missing one)."""
        _, first, shown = self._find(impression_id)
        try:
            position = first + shown.index(doc_id)
        except ValueError:
            # 404, not 422: the body is well formed; what it names (this result of this answer) does not exist.
            raise NotFound(f"id {doc_id[:80]!r} was not shown in this impression") from None
        with self._click_lock, write_transaction(self._clicks, self.path, "BEGIN IMMEDIATE"):
            before = self._clicks.total_changes
            self._clicks.execute(
                "INSERT OR IGNORE INTO clicks VALUES (?, ?, ?, ?, ?)",
                (impression_id, doc_id, position, time.time(), dwell_ms),
            )
            recorded = self._clicks.total_changes > before
            if not recorded and dwell_ms is not None:
                self._clicks.execute(
                    "UPDATE clicks SET dwell_ms = ? WHERE impression = ? AND doc_id = ? AND dwell_ms IS NULL",
                    (dwell_ms, impression_id, doc_id),
                )
        return ClickOutcome(recorded=recorded, position=position)

    # --- bounds --------------------------------------------------------------------------------------------

    def used_bytes(self) -> int:
        page_size, pages, free = (
            self._writer.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("page_size", "page_count", "freelist_count")
        )
        return int(page_size) * (int(pages) - int(free))

    def file_bytes(self) -> int:
        return sum(os.path.getsize(p) for p in (self.path, self.path.with_name(self.path.name + "-wal")) if p.exists())

    def prune(self, now: float | None = None) -> int:
        """Delete what is past the age or size bound (with its clicks and unused texts); returns impressions deleted."""
        with self._flush_lock:  # the writer connection is used by one thread at a time
            return self._prune(now)

    def _prune(self, now: float | None = None) -> int:
        self._last_prune = time.monotonic()
        self._written = 0
        now = time.time() if now is None else now
        deleted = self._delete("SELECT id FROM impressions WHERE at < ?", (now - self.max_age,))
        used = self.used_bytes()
        while used > self.max_bytes:
            # The oldest impressions go, about as many as bring the file to 90 % of its bound (rows are alike).
            total = int(self._writer.execute("SELECT COUNT(*) FROM impressions").fetchone()[0])
            share = 1.0 - 0.9 * self.max_bytes / used
            gone = self._delete("SELECT id FROM impressions ORDER BY at LIMIT ?", (max(1, int(total * share)),))
            deleted += gone
            if gone == 0:
                break
            used = self.used_bytes()
        if deleted:
            # executescript steps the pragma to its end (execute stops after its first freed page).
            self._writer.executescript("PRAGMA incremental_vacuum;")
        # Every check, not only after a delete: the write-ahead log keeps its size until truncated (up to SQLite's
        # 1,000-page autocheckpoint, 4 MB), which on a small bound is several times the bound itself.
        self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return deleted

    def _delete(self, select: str, args: tuple[object, ...]) -> int:
        with write_transaction(self._writer, self.path, "BEGIN IMMEDIATE"):
            self._writer.execute("CREATE TEMP TABLE IF NOT EXISTS doomed (id TEXT PRIMARY KEY)")
            self._writer.execute("DELETE FROM doomed")
            self._writer.execute(f"INSERT INTO doomed {select}", args)
            count = int(self._writer.execute("SELECT COUNT(*) FROM doomed").fetchone()[0])
            if count:
                self._writer.execute("DELETE FROM clicks WHERE impression IN (SELECT id FROM doomed)")
                self._writer.execute("DELETE FROM interleaved WHERE impression IN (SELECT id FROM doomed)")
                self._writer.execute("DELETE FROM filtered WHERE impression IN (SELECT id FROM doomed)")
                self._writer.execute("DELETE FROM impressions WHERE id IN (SELECT id FROM doomed)")
                self._writer.execute(
                    "DELETE FROM texts WHERE NOT EXISTS (SELECT 1 FROM impressions i WHERE i.text_hash = texts.hash)"
                )
        return count

    def close(self) -> None:
        """Commit what is queued and stop the writer."""
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            self.flush()
        except Exception:
            log.exception("could not write the last impressions to %s", self.path)
        self._writer.close()
        self._clicks.close()
