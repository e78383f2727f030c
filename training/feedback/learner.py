"""What `ssi learn` does each time it runs: a round that carries on from the history, or a skip; a rollback.

A round takes the bundles folder's lock (training.feedback.lock), reads the history (training.feedback.history)
and starts from it: the served bundle is the last promotion's refit (the one given is where the history
starts), and the judges are that promotion's fold candidates, which never trained on their folds' queries
(unless --judge names them). When the log holds fewer new sessions than asked since the last round read it,
the round is skipped: the log has barely changed, and a round costs minutes of the machine's cores. Whatever
happens, the round is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from ssi.traffic import ShownResult
from training.feedback.history import (
    LoopState,
    RoundRecord,
    append_record,
    history_path,
    loop_state,
    read_history,
    started_comparison,
)
from training.feedback.lock import ROUND_LOCK, LearnerLock
from training.feedback.online import Admin, conclude
from training.feedback.promote import read_log
from training.feedback.round import (
    RoundOutcome,
    RoundSettings,
    bundles_folder,
    fold_count,
    fold_judges,
    run_round,
)

# Why 1,000 with --every: a round decides again on the whole log, and a log that grew by a handful of sessions
# gives nearly the same candidates and the same estimate again (the simulated loop's rounds came every 5,000
# sessions, docs/results/learning-loop.md; 1,000 is a tenth of a 10,000-session log). And a round is not free: on a
# 10,000-session SciFact log, 29 s of two cores when the candidates are kept and 43 s when promoted (the refit),
# about 0.4 s more for each 1,000 sessions more (2026-11-28). So a quiet service's loop waits instead of training
# on the same clicks every interval.
DEFAULT_MIN_NEW_SESSIONS = 1000


@dataclass(frozen=True, slots=True)
class LogSessions:
    """The log's sessions (impressions of the round's kind: one a search) as a round sees them."""

    total: int
    new: int  # after `since`, the last learned round's end
    log_end: float | None  # the newest one's time


def log_sessions(results: Sequence[ShownResult], since: float | None, kind: str) -> LogSessions:
    first_seen: dict[str, float] = {}
    for result in results:
        if result.kind == kind:
            first_seen.setdefault(result.impression, result.time)
    times = first_seen.values()
    new = len(first_seen) if since is None else sum(t > since for t in times)
    return LogSessions(len(first_seen), new, max(times, default=None))


@dataclass
class Learned:
    """What one `ssi learn` round did: its history record, the round's outcome (None when it was skipped or
    failed before training), and what the learner took from the history."""

    record: RoundRecord
    outcome: RoundOutcome | None
    settings: RoundSettings  # as the round ran: the served bundle and judges from the history
    notes: list[str] = field(default_factory=list)


def from_history(settings: RoundSettings, state: LoopState, folds: int) -> tuple[RoundSettings, list[str]]:
    """The round's settings with the history's served bundle and judges (--judge given wins), and what changed.
    Paths are made absolute: the history outlives the working folder of the command that wrote it."""
    notes = []
    served = settings.served.resolve()
    if state.served is not None and state.served.resolve() != served:
        served = state.served.resolve()
        notes.append(f"served: {served} (the history's; --served {settings.served} is where it started)")
    judges = [j.resolve() for j in settings.judges] if settings.judges else None
    if judges is None:
        judges = state.judges(folds)
        if judges is not None:
            notes.append(f"judges: {', '.join(p.name for p in judges)} (the last promotion's fold candidates)")
    bundles = bundles_folder(settings).resolve()
    return replace(settings, bundles=bundles, served=served, judges=judges), notes


def _record(outcome: RoundOutcome, record: RoundRecord) -> None:
    """Fill `record` from the round's report."""
    report = outcome.report
    record.candidates = list(report["candidates"])
    record.judges = list(report.get("judges", []))
    record.estimate = report.get("estimate")
    if "error" in report:
        record.decision, record.reason = "error", report["error"]
    elif "interleaving" in report:
        record.decision, record.serving = "interleaving", report["serving"]
        record.interleaving = {"started": report["interleaving"].get("comparison")}
        record.reason = "passed the offline estimate: interleaved with the served model until the test decides"
    elif outcome.promoted:
        record.decision, record.serving, record.reloaded = "promoted", report["serving"], "reload" in report
    else:
        record.decision = "kept"


def confirm(settings: RoundSettings, path: Path) -> tuple[RoundRecord | None, dict[str, Any] | None]:
    """Act on the service's comparison (training.feedback.online.conclude) and record how it ended: (the record
    of a comparison that ended now, or None; the status of one still undecided, or None)."""
    if settings.server is None or settings.online is None:
        return None, None
    conclusion = conclude(Admin(settings.server, settings.admin_key, settings.collection))
    if conclusion is None:
        return None, None
    if conclusion.outcome == "running":
        return None, conclusion.status
    started = started_comparison(read_history(path), conclusion.bundle)
    tally = dict(conclusion.status.get("tally") or {})
    promoted = conclusion.outcome == "promoted"
    record = RoundRecord(
        "promoted" if promoted else "dropped",
        served_before=started.served_before if started is not None else None,
        candidates=list(started.candidates) if started is not None else [],
        judges=list(started.judges) if started is not None else [],
        serving=conclusion.bundle if promoted else None,
        reloaded=promoted,
        interleaving={"decision": conclusion.status.get("decision"), **tally},
        reason=f"interleaving: {describe_tally(tally)} → {conclusion.status.get('decision')}",
    )
    append_record(path, record)
    return record, None


def describe_tally(tally: dict[str, Any]) -> str:
    return (
        f"{tally.get('wins', 0)} won, {tally.get('losses', 0)} lost, {tally.get('ties', 0)} tied of "
        f"{tally.get('impressions', 0)} interleaved answers"
    )


def learn_once(settings: RoundSettings, min_new_sessions: int = 0) -> Learned:
    """One round with the history: skipped below `min_new_sessions` new sessions; recorded either way.

    Raises LearnerBusy when another learner holds the folder, ValueError on settings no round can run with
    (neither is recorded); a failure of the round itself is recorded as an error and returned.
    """
    folds = fold_count(settings)
    fold_judges(settings, folds)  # a wrong number of --judge is the user's, not the round's
    bundles = bundles_folder(settings)
    with LearnerLock(bundles / ROUND_LOCK, "an `ssi learn` round"):
        path = history_path(bundles)
        try:
            concluded, running = confirm(settings, path)
        except (RuntimeError, httpx.HTTPError) as exc:  # the server is down or refused: try again next time
            record = RoundRecord("error", served_before=str(settings.served), reason=f"the comparison: {exc}")
            append_record(path, record)
            return Learned(record, None, settings, [])
        if running is not None:  # the last round's candidate is being interleaved: nothing to train yet
            tally = running.get("tally") or {}
            record = RoundRecord(
                "skipped",
                served_before=str(settings.served),
                interleaving={"decision": running.get("decision"), **tally},
                reason=f"the comparison of {Path(running['comparison']['bundle']).name} runs: {describe_tally(tally)}",
            )
            append_record(path, record)
            return Learned(record, None, settings, [])
        state = loop_state(read_history(path))
        settings, notes = from_history(settings, state, folds)
        if concluded is not None:
            notes.insert(0, f"{concluded.decision} {Path(concluded.serving or '').name}: {concluded.reason}")
        started = time.perf_counter()
        record = RoundRecord("skipped", served_before=str(settings.served))
        outcome = None
        try:
            results = read_log(settings.log)
            sessions = log_sessions(results, state.log_end, settings.kind)
            record.sessions, record.new_sessions, record.log_end = sessions.total, sessions.new, sessions.log_end
            if sessions.new < min_new_sessions:
                since = "in the log" if state.log_end is None else "since the last round"
                record.reason = f"{sessions.new} new sessions {since}, fewer than --min-new-sessions {min_new_sessions}"
            else:
                outcome = run_round(settings, results=results)
                _record(outcome, record)
        except (ValueError, OSError, RuntimeError, httpx.HTTPError) as exc:
            record.decision, record.reason = "error", str(exc)
        record.seconds = round(time.perf_counter() - started, 1)
        append_record(path, record)
    return Learned(record, outcome, settings, notes)


def rollback(bundles: Path, server: str, admin_key: str | None, collection: str | None) -> RoundRecord:
    """Serve again what was served before the last promotion in force (POST /admin/reload), and record it.

    Raises LearnerBusy while a round runs, ValueError when no promotion is in force, RuntimeError or an
    httpx error when the server refuses (nothing is recorded then: nothing changed).
    """
    with LearnerLock(bundles / ROUND_LOCK, "an `ssi learn --rollback`"):
        path = history_path(bundles)
        state = loop_state(read_history(path))
        if not state.promotions:
            raise ValueError(f"nothing to roll back: {path} has no promotion in force")
        undone = state.promotions[-1]
        if undone.served_before is None:
            raise ValueError(f"the promotion of {undone.time} does not say what was served before it")
        started = time.perf_counter()
        Admin(server, admin_key, collection).reload(Path(undone.served_before))
        record = RoundRecord(
            "rollback",
            served_before=undone.serving,
            serving=undone.served_before,
            reloaded=True,
            reason=f"rolled back the promotion of {undone.time} ({Path(undone.serving or '').name})",
            seconds=round(time.perf_counter() - started, 1),
        )
        append_record(path, record)
    return record
