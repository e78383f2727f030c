"""The router's traffic log kept on the labelled nodes' own disks: impressions and clicks survive a lost node.

The log is a grow-only set: an impression (by its id), a text (by its hash) and a click (by impression and id) are
written once and never changed, but for a click's dwell time filled in later. So it needs no primary and no
order: every record is sent to the event copy on every labelled node (`EventCopy`, one SQLite file in
`<node_dir>/n<i>/events/`, INSERT OR IGNORE), and the log is the union of the copies (`export`).

- A **click** is acknowledged once it is durable in the router's own log (service.events, as on one node: that is
  where it is checked against its impression) and in at least `min_copies` event copies, each sent the impression
  and its text with it, so that every copy holding the click can show what was clicked. Fewer: a 503, and a repeat
  of the click is recorded once.
- **Impressions** are shipped by a thread of the router from its own log to every copy about every second (an
  impression is never acknowledged; on one node too the last fraction of a second may be lost in a crash).
- A copy that starts (again, or on an emptied disk) first takes in what the other copies hold.

`ssi cluster events --out FILE` writes the union of every copy that answers into one event store, which `ssi train
--clicks` and `ssi learn` read as they read a single node's.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from service.backup import copy_sqlite
from service.errors import Unavailable
from service.events.store import ClickOutcome
from service.events.traffic import Traffic
from service.store import write_transaction
from ssi.traffic import EVENTS_FILE, EVENTS_SCHEMA, EVENTS_SCHEMA_VERSION, open_read_only

log = logging.getLogger(__name__)

Rows = dict[str, list[tuple[Any, ...]]]  # "texts", "impressions", "clicks": rows as the tables hold them
SHIP_EVERY = 1.0
SHIP_BATCH = 2000


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    with write_transaction(conn, path, "BEGIN IMMEDIATE"):
        for statement in EVENTS_SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (EVENTS_SCHEMA_VERSION,))
    return conn


def _insert(conn: sqlite3.Connection, rows: Rows) -> None:
    conn.executemany("INSERT OR IGNORE INTO texts VALUES (?, ?)", rows.get("texts", []))
    conn.executemany("INSERT OR IGNORE INTO impressions VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows.get("impressions", []))
    clicks = rows.get("clicks", [])
    conn.executemany("INSERT OR IGNORE INTO clicks VALUES (?, ?, ?, ?, ?)", clicks)
    conn.executemany(
        "UPDATE clicks SET dwell_ms = ? WHERE impression = ? AND doc_id = ? AND dwell_ms IS NULL",
        [(c[4], c[0], c[1]) for c in clicks if c[4] is not None],
    )


def read_rows(conn: sqlite3.Connection, where: str = "", args: Sequence[Any] = ()) -> Rows:
    """The impressions matching `where` (on `impressions i`), their texts and their clicks."""
    impressions = conn.execute(f"SELECT i.* FROM impressions i {where}", tuple(args)).fetchall()
    ids = [row[0] for row in impressions]
    hashes = sorted({row[3] for row in impressions if row[3] is not None})
    texts: list[tuple[Any, ...]] = []
    clicks: list[tuple[Any, ...]] = []
    for start in range(0, max(len(ids), len(hashes)), 500):
        if chunk := hashes[start : start + 500]:
            marks = ",".join("?" * len(chunk))
            texts += conn.execute(f"SELECT * FROM texts WHERE hash IN ({marks})", chunk).fetchall()
        if chunk := ids[start : start + 500]:
            marks = ",".join("?" * len(chunk))
            clicks += conn.execute(f"SELECT * FROM clicks WHERE impression IN ({marks})", chunk).fetchall()
    return {"texts": texts, "impressions": impressions, "clicks": clicks}


class EventCopy:
    """One copy of the router's log: the event store at `path` (a node's `<node_dir>/n<i>/events/events.sqlite`)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._conn = _open(path)
        self._lock = threading.Lock()

    def add(self, rows: Rows) -> int:
        """Record `rows` durably (what is there already is left as it is); the clicks sent."""
        with self._lock, write_transaction(self._conn, self.path, "BEGIN IMMEDIATE"):
            _insert(self._conn, rows)
        return len(rows.get("clicks", []))

    def dump(self) -> bytes:
        """A consistent copy of the whole file (SQLite's online backup)."""
        with tempfile.TemporaryDirectory(prefix="ssi-events-") as work:
            target = Path(work) / EVENTS_FILE
            copy_sqlite(self.path, target)
            return target.read_bytes()

    def merge(self, blob: bytes) -> int:
        """Take in every record of another copy's `dump`; the clicks now held."""
        with tempfile.TemporaryDirectory(prefix="ssi-events-") as work:
            source = Path(work) / EVENTS_FILE
            source.write_bytes(blob)
            other = open_read_only(source)
            try:
                rows = read_rows(other)
            finally:
                other.close()
        self.add(rows)
        return self.clicks()

    def clicks(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM clicks").fetchone()[0])

    def close(self) -> None:
        self._conn.close()


class Copies(Protocol):
    """The event copies, by name (cluster.replication.ray_replicas reaches them as actors)."""

    names: list[str]

    def call(self, name: str, method: str, *args: Any) -> Any: ...


class ShippedTraffic:
    """The router's Traffic (its own log, on its node), with every click and impression also sent to the copies."""

    def __init__(self, traffic: Traffic, collection: str, copies: Copies, min_copies: int) -> None:
        self.traffic = traffic
        self.collection = collection
        self.copies = copies
        self.min_copies = min_copies
        self._pool = ThreadPoolExecutor(max_workers=max(2, len(copies.names)), thread_name_prefix="events-ship")
        self._marks: dict[str, int] = dict.fromkeys(copies.names, 0)  # rowid of the last impression each copy took
        self._stop = threading.Event()
        self._shipper = threading.Thread(target=self._ship_loop, name="events-shipper", daemon=True)
        self._shipper.start()

    def show(self, *args: Any, **kwargs: Any) -> Any:
        return self.traffic.show(*args, **kwargs)

    def store(self, name: str) -> Any:
        return self.traffic.store(name)

    def records(self, name: str) -> bool:
        return self.traffic.records(name)

    def flush(self) -> None:
        self.traffic.flush()

    def _log(self) -> Path | None:
        store = self.traffic.store(self.collection)
        return None if store is None else store.path

    def click(self, name: str, impression: str, doc_id: str, dwell_ms: float | None) -> ClickOutcome:
        outcome = self.traffic.click(name, impression, doc_id, dwell_ms)
        path = self._log()
        if path is None:
            return outcome
        conn = open_read_only(path)
        try:
            rows = read_rows(conn, "WHERE i.id = ?", (impression,))
        finally:
            conn.close()
        calls = [self._pool.submit(self.copies.call, copy, "add", rows) for copy in self.copies.names]
        took = 0
        for call in calls:
            try:
                call.result()
                took += 1
            except Exception as exc:  # noqa: BLE001 — a copy down: counted below
                log.warning("an event copy did not take a click: %r", exc)
        if took < self.min_copies:
            raise Unavailable(
                f"the click is recorded on {took} of the {self.min_copies} nodes it must be on before it is "
                "acknowledged: send it again (a repeat is recorded once)",
                headers={"Retry-After": "2"},
            )
        return outcome

    def _ship_loop(self) -> None:
        while not self._stop.wait(SHIP_EVERY):
            try:
                self.ship()
            except Exception:  # noqa: BLE001 — next round
                log.exception("shipping impressions to the event copies failed")

    def ship(self) -> None:
        """Send each copy the impressions of the router's log it has not taken yet (SHIP_BATCH at a time)."""
        path = self._log()
        if path is None or not path.exists():
            return
        self.traffic.flush()
        conn = open_read_only(path)
        try:
            for copy, mark in list(self._marks.items()):
                rows = read_rows(conn, "WHERE i.rowid > ? ORDER BY i.rowid LIMIT ?", (mark, SHIP_BATCH))
                if not rows["impressions"]:
                    continue
                last = conn.execute(
                    "SELECT MAX(rowid) FROM (SELECT rowid FROM impressions WHERE rowid > ? ORDER BY rowid LIMIT ?)",
                    (mark, SHIP_BATCH),
                ).fetchone()[0]
                try:
                    self.copies.call(copy, "add", rows)
                except Exception as exc:  # noqa: BLE001 — this copy is down: it is sent the same rows next round
                    log.info("event copy %s did not take impressions: %s", copy, exc)
                    continue
                self._marks[copy] = int(last)
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        try:
            self.ship()
        finally:
            self._pool.shutdown(wait=False)
            self.traffic.close()


def export(copies: Copies, out: Path) -> dict[str, Any]:
    """The union of every copy that answers, written to the new event store `out`; which copies were read."""
    if out.exists():
        raise FileExistsError(f"{out} exists: the cluster's log is written to a new file")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    partial.unlink(missing_ok=True)
    merged = EventCopy(partial)
    read, missing = [], []
    try:
        for name in copies.names:
            try:
                blob = copies.call(name, "dump")
            except Exception as exc:  # noqa: BLE001 — a copy down: the others hold what it held
                missing.append(f"{name} ({type(exc).__name__})")
                continue
            merged.merge(blob)
            read.append(name)
        clicks = merged.clicks()
    finally:
        merged.close()
    if not read:
        partial.unlink(missing_ok=True)
        raise Unavailable("no event copy answered: the cluster's log cannot be read now")
    os.replace(partial, out)
    return {"copies_read": read, "copies_not_answering": missing, "clicks": clicks}
