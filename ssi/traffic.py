"""The traffic log's contract: what the service records of its answers and clicks, and how it is read back.

The service (service/events) writes one SQLite file per collection, `events.sqlite` beside the document store;
the trainer reads it, or a JSONL file exported from it, as training pairs with positions. Both halves use the
tables and the record defined here, so a log written by one version of the service is read the same way by
the trainer.

An *impression* is one ranked list the service answered with: the query (or page) text, the ids it showed
in order, where the list starts (`first_position`: 1 + the request's offset), the model that ranked it
(the bundle's content hash), and whether its top was shuffled on purpose (`randomized`: a small share of
answers have their first results in uniformly random order, so that how much users look at each position
can be measured apart from what is shown there). A *click* names an impression and one of its shown ids.
An impression that interleaved the served model with a candidate (ssi.interleaving) has a row in
`interleaved`: the candidate's content hash and who placed each shown id (`teams`, one letter per id); its
`model` is the served one. The table came after the others: a store written before it has none until the
service opens it again, and readers here treat a missing table as no interleaving.

An impression whose list was restricted by a filter (service.fields: the request's `filter`, a `/match`'s
`filters` translated, or the mandatory filter of the filtered read key that made it) has a row in `filtered`:
the request's filter, a hash naming the read key (`read_key`, never the key itself: service.fields.visibility)
and that key's filter, each as canonical JSON or NULL. The list was the top of the ranking among the documents
matching both (`shown_filter`), which is what `ssi learn` ranks a candidate among when it replays it
(training.feedback). Like `interleaved` it came later: a store or an exported log without it has no filter.

Exported, the log is the click-log JSONL that `ssi train --clicks` reads (training/clicks.py): one line per
shown result, `{"impression", "time", "model", "randomized", "position", "query" | "page_text", "doc" | "ad",
"clicked", "dwell_ms"}`; the query's text is absent (and `query_hash` present) where the service kept no text,
an interleaved impression's results add `placed_by` (the content hash of the model that placed each), and a
filtered impression's results add `filter`, `read_key` and `key_filter` where it has them (the filters as JSON
objects). A reader takes a line without them as unfiltered, as every line written before them is.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ssi.interleaving import CANDIDATE

EVENTS_FILE = "events.sqlite"
EVENTS_SCHEMA_VERSION = "1"
SQLITE_MAGIC = b"SQLite format 3\x00"

# Texts are stored once by their hash (a query asked a thousand times is one row); with the text setting
# "hash" or "none" the `text` column is NULL (and with "none" no hash is kept either).
EVENTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS texts (hash TEXT PRIMARY KEY, text TEXT);
CREATE TABLE IF NOT EXISTS impressions (
    id TEXT PRIMARY KEY,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    text_hash TEXT,
    model TEXT NOT NULL,
    randomized INTEGER NOT NULL,
    first_position INTEGER NOT NULL,
    shown TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS impressions_by_time ON impressions(at);
CREATE INDEX IF NOT EXISTS impressions_by_text ON impressions(text_hash);
CREATE TABLE IF NOT EXISTS clicks (
    impression TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    at REAL NOT NULL,
    dwell_ms REAL,
    PRIMARY KEY (impression, doc_id)
);
CREATE TABLE IF NOT EXISTS interleaved (
    impression TEXT PRIMARY KEY,
    challenger TEXT NOT NULL,
    teams TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS filtered (
    impression TEXT PRIMARY KEY,
    filter TEXT,
    read_key TEXT,
    key_filter TEXT
);
"""

ImpressionKind = str  # "search" (a documents collection) or "match" (an adverts collection: the text is a page)


def canonical_filter(node: Any) -> str:
    """A filter as the log keeps it: JSON with sorted keys and no spaces, so equal filters are equal strings."""
    return json.dumps(node, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def shown_filter(filter: str | None, key_filter: str | None) -> str | None:
    """The filter an impression's list was ranked under (canonical JSON, None: none): the request's and its read
    key's, ANDed as the service ANDs them (service.fields.visibility)."""
    if filter is None or key_filter is None:
        return filter if key_filter is None else key_filter
    return canonical_filter({"and": [json.loads(key_filter), json.loads(filter)]})


@dataclass(frozen=True, slots=True)
class ShownResult:
    """One result of one impression, as exported: where it was shown and whether it was clicked."""

    impression: str
    time: float
    kind: ImpressionKind
    model: str
    randomized: bool
    position: int
    doc: str
    clicked: bool
    dwell_ms: float | None
    text: str | None
    text_hash: str | None
    placed_by: str | None = None  # an interleaved impression's: the model that placed this result (ssi.interleaving)
    # A filtered impression's (the `filtered` table): the request's filter and the filtered read key's hash and
    # filter, the filters as canonical JSON (`canonical_filter`); None where it had none.
    filter: str | None = None
    read_key: str | None = None
    key_filter: str | None = None

    def shown_filter(self) -> str | None:
        """The filter the impression's list was ranked under (`shown_filter`), None for an unfiltered one."""
        return shown_filter(self.filter, self.key_filter)

    def to_json(self) -> str:
        """The exported line: search impressions name `query`/`doc`, page matches `page_text`/`ad`."""
        record = asdict(self)
        text, text_hash, kind = record.pop("text"), record.pop("text_hash"), record.pop("kind")
        for name in ("placed_by", "filter", "read_key", "key_filter"):
            if record[name] is None:
                del record[name]
        for name in ("filter", "key_filter"):
            if name in record:
                record[name] = json.loads(record[name])
        doc = record.pop("doc")
        if kind == "match":
            record["ad"] = doc
            text_key, hash_key = "page_text", "page_hash"
        else:
            record["doc"] = doc
            text_key, hash_key = "query", "query_hash"
        if text is not None:
            record[text_key] = text
        elif text_hash is not None:
            record[hash_key] = text_hash
        return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def is_event_store(path: Path) -> bool:
    """Whether `path` is a SQLite file (the service's event store) rather than an exported JSONL log."""
    try:
        with Path(path).open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def open_read_only(path: Path) -> sqlite3.Connection:
    """The event store opened read-only (a running service may be writing it: WAL readers never block it)."""
    conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=30)
    version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if version is None or version[0] != EVENTS_SCHEMA_VERSION:
        conn.close()
        raise ValueError(f"{path}: not an event store of schema version {EVENTS_SCHEMA_VERSION}")
    return conn


def has_interleaving(conn: sqlite3.Connection) -> bool:
    """Whether the store has the `interleaved` table (one written before it had none)."""
    return _has_table(conn, "interleaved")


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    return found is not None


def read_events(path: Path, since: float | None = None, until: float | None = None) -> Iterator[ShownResult]:
    """Every shown result of the impressions recorded in [since, until), in time order, with its click."""
    conn = open_read_only(path)
    try:
        lo = float("-inf") if since is None else since
        hi = float("inf") if until is None else until
        pairs, join = (
            ("x.challenger, x.teams", "LEFT JOIN interleaved x ON x.impression = i.id")
            if has_interleaving(conn)
            else ("NULL, NULL", "")
        )
        filters, filtered = (
            ("f.filter, f.read_key, f.key_filter", "LEFT JOIN filtered f ON f.impression = i.id")
            if _has_table(conn, "filtered")
            else ("NULL, NULL, NULL", "")
        )
        rows = conn.execute(
            "SELECT i.id, i.at, i.kind, i.text_hash, t.text, i.model, i.randomized, i.first_position, i.shown, "
            f"{pairs}, {filters} FROM impressions i LEFT JOIN texts t ON t.hash = i.text_hash {join} {filtered} "
            "WHERE i.at >= ? AND i.at < ? ORDER BY i.at, i.id",
            (lo, hi),
        )
        for row in rows:
            imp_id, at, kind, text_hash, text, model, randomized, first, shown, challenger, teams = row[:11]
            node, read_key, key_filter = row[11:]
            clicks = {
                doc: dwell
                for doc, dwell in conn.execute("SELECT doc_id, dwell_ms FROM clicks WHERE impression = ?", (imp_id,))
            }
            for offset, doc in enumerate(json.loads(shown)):
                placed_by = None
                if teams is not None:
                    placed_by = challenger if teams[offset : offset + 1] == CANDIDATE else model
                yield ShownResult(
                    impression=imp_id,
                    time=at,
                    kind=kind,
                    model=model,
                    randomized=bool(randomized),
                    position=first + offset,
                    doc=doc,
                    clicked=doc in clicks,
                    dwell_ms=clicks.get(doc),
                    text=text,
                    text_hash=None if text is not None else text_hash,
                    placed_by=placed_by,
                    filter=node,
                    read_key=read_key,
                    key_filter=key_filter,
                )
    finally:
        conn.close()


def read_interleaved(
    conn: sqlite3.Connection, served: str, challenger: str, since: float
) -> Iterator[tuple[str, list[int]]]:
    """(teams, clicked offsets) of each impression since `since` that interleaved `served` with `challenger`:
    what ssi.interleaving.tally counts."""
    if not has_interleaving(conn):
        return
    rows = conn.execute(
        "SELECT x.teams, i.id, i.first_position FROM interleaved x JOIN impressions i ON i.id = x.impression "
        "WHERE x.challenger = ? AND i.model = ? AND i.at >= ? ORDER BY i.at",
        (challenger, served, since),
    ).fetchall()
    clicked: dict[str, list[int]] = {}
    for start in range(0, len(rows), 500):
        chunk = [row[1] for row in rows[start : start + 500]]
        marks = ",".join("?" * len(chunk))
        for impression, position in conn.execute(
            f"SELECT impression, position FROM clicks WHERE impression IN ({marks})", chunk
        ):
            clicked.setdefault(impression, []).append(position)
    for teams, impression, first in rows:
        yield teams, [position - first for position in clicked.get(impression, [])]


def export_events(path: Path, out: Path, since: float | None = None, until: float | None = None) -> int:
    """Write the store's shown results as a JSONL click log (training/clicks.py reads it); returns the lines."""
    lines = 0
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for result in read_events(path, since, until):
            handle.write(result.to_json() + "\n")
            lines += 1
    tmp.replace(out)
    return lines
