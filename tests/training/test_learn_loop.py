"""`ssi learn` as a loop: the round history in the bundles folder (written, read back, what it says is served and
who judges), the skip on too few new sessions, one learner at a time, `--every`, `--history` and `--rollback`
against a real server. The tiny world of test_learn_round: 8 topics × 4 documents, 240 logged impressions."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.service.service_testing import ThreadServer
from tests.training.test_learn_round import write_store, write_world
from training.cli import register
from training.feedback.history import (
    HISTORY_FILE,
    RoundRecord,
    append_record,
    history_path,
    loop_state,
    read_history,
)
from training.feedback.learner import from_history, log_sessions
from training.feedback.lock import LOOP_LOCK, ROUND_LOCK, LearnerLock
from training.feedback.online import Admin
from training.feedback.promote import read_log
from training.feedback.round import RoundSettings
from training.feedback.schedule import describe_duration, parse_duration, run_every
from training.feedback.start import write_bm25_start

ADMIN_KEY = "learn-loop-admin-key"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("loop")
    corpus, relevant = write_world(root)
    write_bm25_start(corpus, root / "start", dims=8)
    store = root / "events.sqlite"
    write_store(store, relevant)
    return {"root": root, "corpus": corpus, "start": root / "start", "store": store}


@pytest.fixture
def bundles(world: dict[str, Path], tmp_path: Path) -> Path:
    """A bundles folder of its own for each test, holding a copy of the start bundle, served."""
    folder = tmp_path / "bundles"
    shutil.copytree(world["start"], folder / "start")
    return folder


def learn(*args: str) -> tuple[int, str]:
    """`ssi learn ARGS`: its exit code (never a traceback) and its output on one line, out of typer's error box."""
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["learn", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())


def round_args(world: dict[str, Path], bundles: Path, *more: str) -> list[str]:
    return [
        "--log", str(world["store"]), "--served", str(bundles / "start"), "--corpus", str(world["corpus"]),
        "--bundles", str(bundles), "--eta", "0.5", "--threads", "1", *more,
    ]  # fmt: skip


def promotion(bundles: Path, names: list[str], serving: str, before: Path, log_end: float | None = None) -> None:
    """A promoted round in the history whose candidates and refit are copies of the start bundle."""
    for name in [*names, serving]:
        shutil.copytree(bundles / "start", bundles / name)
    record = RoundRecord(
        "promoted", served_before=str(before), candidates=[str(bundles / n) for n in names],
        serving=str(bundles / serving), log_end=log_end, reloaded=True,
    )  # fmt: skip
    append_record(history_path(bundles), record)


def test_history_is_appended_and_read_back(tmp_path: Path) -> None:
    """Each record is one line; a crash's cut last line and a newer learner's fields are passed over; what is
    served follows the promotions and rollbacks; the next round counts new sessions from the last learned one."""
    path = tmp_path / HISTORY_FILE
    assert read_history(path) == [] and loop_state([]).served is None
    first = RoundRecord("promoted", served_before="/b/start", candidates=["/b/r1-fold1", "/b/r1-fold2"])
    first.serving, first.log_end, first.estimate = "/b/r1-refit", 100.0, {"mean": 0.01, "stderr": 0.002}
    append_record(path, first)
    append_record(path, RoundRecord("skipped", served_before="/b/r1-refit", log_end=150.0, reason="few"))
    append_record(path, RoundRecord("kept", served_before="/b/r1-refit", candidates=["/b/r2-f1"], log_end=200.0))
    append_record(path, RoundRecord("error", served_before="/b/r1-refit", log_end=300.0, reason="boom"))
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({**json.loads(first.to_json()), "decision": "kept", "added_later": 1}) + "\n")
        handle.write('{"decision": "promoted", "serv')  # cut short by a crash
    records = read_history(path)
    assert [r.decision for r in records] == ["promoted", "skipped", "kept", "error", "kept"]
    assert records[0] == first and records[0].interleaving is None
    state = loop_state(records)
    assert state.served == Path("/b/r1-refit") and [p.served_before for p in state.promotions] == ["/b/start"]
    assert state.log_end == 100.0  # the last learned round (the skip and the error do not count)
    append_record(path, RoundRecord("rollback", served_before="/b/r1-refit", serving="/b/start"))
    undone = loop_state(read_history(path))
    assert undone.served == Path("/b/start") and undone.promotions == ()


def test_judges_are_the_last_promotions_fold_candidates(world: dict[str, Path], bundles: Path) -> None:
    """The served refit trained on every query: the judges are the fold candidates of the promotion in force
    (same fold count, still on the disk), --judge wins, and the history's served bundle replaces --served."""
    settings = RoundSettings(log=world["store"], served=bundles / "start", corpus=world["corpus"], bundles=bundles)
    unchanged, notes = from_history(settings, loop_state([]), 2)
    assert unchanged.served == (bundles / "start").resolve() and unchanged.judges is None and notes == []
    promotion(bundles, ["r1-fold1", "r1-fold2"], "r1-refit", bundles / "start")
    state = loop_state(read_history(history_path(bundles)))
    planned, notes = from_history(settings, state, 2)
    assert planned.served == bundles / "r1-refit"
    assert planned.judges == [bundles / "r1-fold1", bundles / "r1-fold2"] and len(notes) == 2
    assert from_history(settings, state, 3)[0].judges is None  # another fold count: the served bundle judges
    told, _ = from_history(replace(settings, judges=[bundles / "start"]), state, 2)
    assert told.judges == [bundles / "start"]
    shutil.rmtree(bundles / "r1-fold2")
    assert state.judges(2) is None  # a candidate deleted since: the served bundle judges


def test_a_round_is_judged_by_the_history_and_recorded(world: dict[str, Path], bundles: Path) -> None:
    """A real round after a promotion: served and judged by what the history names, and recorded with its
    sessions, candidates, estimate and decision.

    It trains one candidate with `ssi train` in a subprocess."""
    promotion(bundles, ["r1"], "r1-refit", bundles / "start")
    more = ["--folds", "1", "--holdout", "0.5", "--no-refit", "--epochs", "100", "--lr", "0.1", "--name", "r2"]
    code, output = learn(*round_args(world, bundles, *more, "--train-args", "--ensemble 1"))
    assert code == 0, output
    assert "(the history's; --served" in output and "the last promotion's fold candidates" in output
    records = read_history(history_path(bundles))
    assert len(records) == 2
    last = records[-1]
    assert last.decision in ("promoted", "kept") and last.served_before == str(bundles / "r1-refit")
    assert last.judges == [str(bundles / "r1")] and last.candidates == [str(bundles / "r2")]
    assert (last.sessions, last.new_sessions, last.log_end) == (240, 240, 1239.0)
    assert last.estimate is not None and last.estimate["folds"] == 1 and last.seconds > 0
    assert last.interleaving is None and (last.serving is not None) == (last.decision == "promoted")


def test_too_few_new_sessions_skip_the_round(world: dict[str, Path], bundles: Path) -> None:
    """New sessions count from where the last learned round stopped reading; below --min-new-sessions nothing
    trains and the skip is recorded with why."""
    assert log_sessions(read_log(world["store"]), 1200.0, "search").new == 39  # impressions at 1000 + i
    promotion(bundles, ["r1-fold1", "r1-fold2"], "r1-refit", bundles / "start", log_end=1200.0)
    code, output = learn(*round_args(world, bundles, "--min-new-sessions", "40"))
    assert code == 0 and "skipped: 39 new sessions since the last round, fewer than --min-new-sessions 40" in output
    skipped = read_history(history_path(bundles))[-1]
    assert skipped.decision == "skipped" and skipped.candidates == [] and skipped.sessions == 240
    assert loop_state(read_history(history_path(bundles))).log_end == 1200.0  # a skip does not move it
    assert sorted(p.name for p in bundles.iterdir() if p.is_dir()) == ["r1-fold1", "r1-fold2", "r1-refit", "start"]


def test_one_learner_at_a_time(world: dict[str, Path], bundles: Path) -> None:
    """A round, a rollback or a second loop on a folder another learner holds is refused at once (exit 2), and
    nothing is recorded."""
    with LearnerLock(bundles / ROUND_LOCK, "a round under test"):
        code, output = learn(*round_args(world, bundles))
        assert code == 2 and "another `ssi learn` is running" in output and "a round under test" in output
        code, output = learn("--rollback", "--bundles", str(bundles), "--server", "http://127.0.0.1:9")
        assert code == 2 and "a round is running" in output
    with LearnerLock(bundles / LOOP_LOCK, "a loop under test"):
        code, output = learn(*round_args(world, bundles, "--every", "1h"))
        assert code == 2 and "another `ssi learn --every` loop" in output
    assert read_history(history_path(bundles)) == []


def test_every_takes_durations_with_units() -> None:
    assert [parse_duration(t) for t in ("90s", "30m", "2h", "1d", "1h30m", "1.5h", " 2H ")] == [
        90, 1800, 7200, 86400, 5400, 5400, 7200,
    ]  # fmt: skip
    assert describe_duration(5400) == "1h30m" and describe_duration(90) == "1m30s"
    for bad in ("30", "", "abc", "5x", "-5m", "m", "0s", "1h-30m"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_every_refuses_what_is_not_a_duration(world: dict[str, Path], bundles: Path) -> None:
    """A clear message and exit 2, never a traceback; and the loop's flags do not mix."""
    code, output = learn(*round_args(world, bundles, "--every", "30"))
    assert code == 2 and "'30' is not a duration" in output
    code, output = learn(*round_args(world, bundles, "--every", "0m"))
    assert code == 2 and "positive duration" in output
    code, output = learn("--history", "--rollback", "--bundles", str(bundles))
    assert code == 2 and "do not go together" in output
    code, output = learn("--every", "1h")
    assert code == 2 and "a round needs --log, --served, --corpus" in output
    code, output = learn(*round_args(world, bundles, "--served", str(bundles / "typo")))
    assert code == 2 and "is not a bundle folder" in output and not (bundles / HISTORY_FILE).exists()


def test_run_every_keeps_the_interval_and_stops_when_interrupted() -> None:
    """The interval runs from a round's start to the next one's; a round longer than it is followed at once; an
    interruption (Ctrl-C, SIGTERM) ends the loop quietly."""
    now, slept, lengths = [0.0], [], iter([10.0, 70.0, 5.0])

    def tick() -> None:
        now[0] += next(lengths)

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    assert run_every(60.0, tick, rounds=3, sleep=sleep, clock=lambda: now[0]) == 3
    assert slept == [50.0, 0.0]

    def interrupted() -> None:
        raise KeyboardInterrupt

    assert run_every(60.0, interrupted, sleep=sleep) == 0


def test_history_prints_a_table(bundles: Path) -> None:
    code, output = learn("--history", "--bundles", str(bundles))
    assert code == 0 and "no rounds yet" in output
    promoted = RoundRecord("promoted", served_before=str(bundles / "start"), serving=str(bundles / "r1-refit"))
    promoted.estimate, promoted.sessions, promoted.new_sessions, promoted.reloaded = (
        {"mean": 0.0044, "stderr": 0.0019, "queries": 647}, 5000, 5000, True,
    )  # fmt: skip
    append_record(history_path(bundles), promoted)
    append_record(history_path(bundles), RoundRecord("skipped", sessions=5400, new_sessions=400, reason="too few"))
    code, output = learn("--history", "--served", str(bundles / "start"))
    assert code == 0, output
    assert "2 rounds" in output and "+0.0044 ± 0.0019 (647 queries)" in output and "r1-refit" in output
    assert "5400 (400 new)" in output and "skipped" in output and "too few" in output
    code, output = learn("--history")
    assert code == 2 and "give --bundles" in output


def test_rollback_serves_again_what_was_served_before(world: dict[str, Path], bundles: Path, tmp_path: Path) -> None:
    """Against a real `ssi serve`: after a promotion is reloaded, --rollback reloads the bundle served before it
    and records that; the history then serves it; with no promotion left in force it refuses.

    The server runs in a thread of this process (tests.service.service_testing)."""
    promotion(bundles, ["r1-fold1", "r1-fold2"], "r1-refit", bundles / "start")
    rollback = ["--rollback", "--bundles", str(bundles), "--admin-key", ADMIN_KEY, "--server"]
    with ThreadServer(
        bundle=bundles / "start", corpus=world["corpus"], cache_dir=tmp_path / "cache", admin_key=ADMIN_KEY,
        bundle_root=bundles, events=False,
    ) as server:  # fmt: skip
        Admin(server.url, ADMIN_KEY, None).reload(bundles / "r1-refit")  # what the promotion did
        assert server.client.get("/model").json()["bundle"] == "r1-refit"
        code, output = learn(*rollback, server.url)
        assert code == 0, output
        assert server.client.get("/model").json()["bundle"] == "start"
        last = read_history(history_path(bundles))[-1]
        assert (last.decision, last.served_before, last.serving) == (
            "rollback", str(bundles / "r1-refit"), str(bundles / "start"),
        )  # fmt: skip
        assert last.reloaded and "rolled back the promotion of" in (last.reason or "")
        assert loop_state(read_history(history_path(bundles))).served == bundles / "start"
        code, output = learn(*rollback, server.url)
        assert code == 2 and "nothing to roll back" in output
    code, output = learn("--rollback", "--bundles", str(bundles))
    assert code == 2 and "give --server" in output
