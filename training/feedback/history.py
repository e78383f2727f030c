"""The learner's round history: one JSON line a round in `<bundles>/learn-history.jsonl`.

Why a history: a round's judges must be bundles that never trained on the queries they judge. The served
bundle is a refit on every query, so judged by it, a candidate is compared with a model that has seen the
held-out fold (and after a few rounds every candidate is refused). The last promoted round's fold candidates
never saw their fold's queries: the history remembers them, and what is served, and up to where in the log the
last round read, so that `ssi learn` run again (by hand, or `--every`) carries on where the last round stopped.

Each line is appended in one `write` on a file opened for appending (O_APPEND: the kernel places it at the end,
whole), then flushed to the disk; a line cut short by a crash is ended by the next append, and reading skips it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

HISTORY_FILE = "learn-history.jsonl"

# "interleaving": the offline gate passed and the service interleaves the candidate with the served model; its
# conclusion comes as a later record, "promoted" (the candidate won: served) or "dropped" (it lost, or its session
# budget ran out).
Decision = Literal["promoted", "kept", "skipped", "error", "rollback", "interleaving", "dropped"]
# The rounds that read the log to its end and trained on it: the next round's new sessions are counted after them
# (a skipped round trained on nothing, and an error is tried again on the same log).
LEARNED: frozenset[str] = frozenset({"promoted", "kept", "interleaving"})


@dataclass
class RoundRecord:
    """One round of `ssi learn`, or one rollback, as the history keeps it."""

    decision: Decision
    time: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))  # UTC start
    served_before: str | None = None  # what the service served when the round started
    candidates: list[str] = field(default_factory=list)  # the fold candidates, in fold order
    judges: list[str] = field(default_factory=list)  # what each fold's candidate was compared with
    serving: str | None = None  # what is served after it: the refit of a promotion, or a rollback's bundle
    estimate: dict[str, Any] | None = None  # the pooled estimate (training.feedback.promote.PromotionEstimate)
    seconds: float = 0.0
    sessions: int | None = None  # impressions (one a search) in the log when the round read it
    new_sessions: int | None = None  # of them, those after the last learned round's `log_end`
    log_end: float | None = None  # the time of the newest impression read: where the next round counts from
    reloaded: bool = False  # the server was told to serve `serving`
    reason: str | None = None  # why skipped, the error, or what a rollback undid
    # online confirmation (training.feedback.online): the comparison started, or how it ended (its tally)
    interleaving: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundRecord:
        """A record from its JSON object; keys this version does not know (a newer learner's) are left out."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


def history_path(bundles: Path) -> Path:
    return bundles / HISTORY_FILE


def append_record(path: Path, record: RoundRecord) -> None:
    """Append one line whole (one write on an O_APPEND descriptor) and flush it to the disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (record.to_json() + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a line cut by a crash: end it, so this one stands alone
            data = b"\n" + data
        written = os.write(fd, data)
        if written != len(data):  # a full disk: the line is cut, and the next reader skips it
            raise OSError(f"{path}: wrote {written} of {len(data)} bytes of a history line")
        os.fsync(fd)
    finally:
        os.close(fd)


def read_history(path: Path) -> list[RoundRecord]:
    """The records in order; none where there is no history yet. A line that does not parse is skipped: only a
    line cut by a crash can be one."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(RoundRecord.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return records


@dataclass(frozen=True, slots=True)
class LoopState:
    """What the history says now: the promotions in force (a rollback undoes the newest), what is served, and
    where the last learned round stopped reading the log."""

    promotions: tuple[RoundRecord, ...] = ()  # in force, oldest first
    served: Path | None = None  # None: nothing promoted or rolled back yet (the starting bundle serves)
    log_end: float | None = None

    def judges(self, folds: int) -> list[Path] | None:
        """The fold candidates of the last promotion in force, when it had `folds` folds and they are all still
        on the disk; None otherwise (the served bundle judges)."""
        if not self.promotions:
            return None
        paths = [Path(c) for c in self.promotions[-1].candidates]
        if len(paths) != folds or not all(p.is_dir() for p in paths):
            return None
        return paths


def started_comparison(records: Sequence[RoundRecord], bundle: str) -> RoundRecord | None:
    """The round that started interleaving `bundle` (the newest one, if several did)."""
    return next((r for r in reversed(records) if r.decision == "interleaving" and r.serving == bundle), None)


def loop_state(records: Sequence[RoundRecord]) -> LoopState:
    promotions: list[RoundRecord] = []
    served: str | None = None
    log_end: float | None = None
    for record in records:
        if record.decision == "promoted":
            promotions.append(record)
            served = record.serving
        elif record.decision == "rollback":
            if promotions:
                promotions.pop()
            served = record.serving
        if record.decision in LEARNED and record.log_end is not None:
            log_end = record.log_end
    return LoopState(tuple(promotions), Path(served) if served else None, log_end)
