"""`ssi learn`: learning from the service's own traffic, a round at a time (training.feedback.round), on a
schedule (`--every`, training.feedback.schedule), with a history of the rounds in the bundles folder
(training.feedback.history) that `--history` shows and `--rollback` steps back through.

Errors in the user's inputs print one line and exit with status 2, never a traceback; a round that failed in
training exits with 1.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.table import Table

from ssi.interleaving import (
    DEFAULT_ALPHA,
    DEFAULT_BETA,
    DEFAULT_BUDGET,
    DEFAULT_DELTA,
    DEFAULT_MODE,
    DEFAULT_SHARE,
    SequentialTest,
)
from training.click_recipe import CLICK_RECIPE
from training.debias import DEBIAS_MODES, DEFAULT_CLIP
from training.feedback.history import RoundRecord, history_path, read_history
from training.feedback.learner import DEFAULT_MIN_NEW_SESSIONS, Learned, learn_once, rollback
from training.feedback.lock import LOOP_LOCK, LearnerBusy, LearnerLock
from training.feedback.online import ONLINE_Z, OnlineSettings
from training.feedback.promote import DEFAULT_FOLDS, DEFAULT_HOLDOUT, DEFAULT_TOLERANCE, DEFAULT_Z
from training.feedback.round import RoundSettings, bundles_folder, fold_count, fold_judges
from training.feedback.schedule import describe_duration, parse_duration, run_every

DATA = "Data"
DECISION = "Estimate and decision"
TRAIN = "Training the candidate"
SERVER = "Server"
LOOP = "Loop and history"
ONLINE = "Online confirmation (interleaving)"


def learn_command(
    log: Annotated[
        Path | None,
        typer.Option(
            "--log",
            help="The service's event store (events.sqlite) or a log exported from it (a round needs it).",
            rich_help_panel=DATA,
        ),
    ] = None,
    served: Annotated[
        Path | None,
        typer.Option(
            help="The bundle the service serves now (a round needs it): where the history starts; once a round "
            "promoted, the history's last promotion is served and judged against instead.",
            rich_help_panel=DATA,
        ),
    ] = None,
    corpus: Annotated[
        Path | None, typer.Option(help="The served corpus JSONL (a round needs it).", rich_help_panel=DATA)
    ] = None,
    bundles: Annotated[
        Path | None,
        typer.Option(
            help="Folder for the candidate bundles, the round history (learn-history.jsonl) and the learner's lock "
            "(default: beside the served bundle, where the server may reload from).",
            rich_help_panel=DATA,
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="The candidate's folder name (default: learn-<UTC time>).", rich_help_panel=DATA)
    ] = None,
    queries: Annotated[
        Path | None,
        typer.Option(help="Labelled queries (BEIR JSONL) to train on beside the clicks.", rich_help_panel=DATA),
    ] = None,
    qrels: Annotated[Path | None, typer.Option(help="Their qrels (BEIR TSV).", rich_help_panel=DATA)] = None,
    report: Annotated[
        Path | None, typer.Option(help="Write the round's JSON report here.", rich_help_panel=DATA)
    ] = None,
    debias: Annotated[
        str,
        typer.Option(help="How clicks train: pbm, ips, naive or top (ssi train --debias).", rich_help_panel=TRAIN),
    ] = "pbm",
    warm: Annotated[
        bool,
        typer.Option(
            "--warm/--cold",
            help="Warm-start from the served bundle (when it is lowrank with a non-zero U) or train from scratch "
            "(the default: in the simulated loop, candidates warm-started from a promoted model ranked worse).",
            rich_help_panel=TRAIN,
        ),
    ] = False,
    dims: Annotated[
        int | None, typer.Option(help="N of a cold start (default: the served N).", rich_help_panel=TRAIN)
    ] = None,
    epochs: Annotated[
        float | None,
        typer.Option(
            help=f"ssi train --epochs (default {CLICK_RECIPE.epochs:g}, the simulated loop's, unless --max-minutes "
            "is given; training/click_recipe.py).",
            rich_help_panel=TRAIN,
        ),
    ] = None,
    max_minutes: Annotated[
        float | None,
        typer.Option(help="ssi train --max-minutes: a time budget instead of the epochs.", rich_help_panel=TRAIN),
    ] = None,
    lr: Annotated[
        float | None, typer.Option(help=f"ssi train --lr (default {CLICK_RECIPE.lr:g}).", rich_help_panel=TRAIN)
    ] = None,
    warm_lr_scale: Annotated[
        float | None,
        typer.Option(help="ssi train --warm-lr-scale (a warm start's rate factor).", rich_help_panel=TRAIN),
    ] = None,
    seed: Annotated[int, typer.Option(help="ssi train --seed.", rich_help_panel=TRAIN)] = 0,
    threads: Annotated[int, typer.Option(help="ssi train --threads.", rich_help_panel=TRAIN)] = 2,
    train_args: Annotated[
        str,
        typer.Option(
            help="More `ssi train` flags, as one shell-quoted string; they come last and win over the recipe's "
            f"(--hard-fraction {CLICK_RECIPE.hard_fraction:g} --valid-share {CLICK_RECIPE.valid_share:g}).",
            rich_help_panel=TRAIN,
        ),
    ] = "",
    holdout: Annotated[
        float | None,
        typer.Option(
            help="Judge on one held-out share instead of folds: of the distinct queries (--split query; implies "
            f"--folds 1) or of the newest impressions (--split time). Default {DEFAULT_HOLDOUT}.",
            rich_help_panel=DECISION,
        ),
    ] = None,
    split: Annotated[
        str,
        typer.Option(
            help="query: a fixed share of the queries (by a hash of their text) never trains and is judged on; "
            "time: the newest impressions (the same queries a candidate trained on: it favours overfitting).",
            rich_help_panel=DECISION,
        ),
    ] = "query",
    judge: Annotated[
        list[Path] | None,
        typer.Option(
            help="The bundle to compare the candidate with. Default: the last promoted round's fold candidates in "
            "the history (bundles that never trained on their fold's queries, which the served refit did), else "
            "the served bundle. With --folds K: once, or K times in fold order.",
            rich_help_panel=DECISION,
        ),
    ] = None,
    folds: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=10,
            help="Cross-fitting: K candidates, each trained on K - 1 folds of the queries and judged on the last, so "
            f"every query judges; a promotion serves the refit on all. Default {DEFAULT_FOLDS} with --split query "
            "(1 with --split time or --holdout: one held-out share).",
            rich_help_panel=DECISION,
        ),
    ] = None,
    refit: Annotated[
        bool,
        typer.Option(
            "--refit/--no-refit",
            help="With --split query: a promoted candidate is trained again on the whole log and that is served.",
            rich_help_panel=DECISION,
        ),
    ] = True,
    labels: Annotated[
        str,
        typer.Option(
            help="What a judging click is worth, whatever --debias trains with: pbm, the click model's relevance "
            "(the default: in the simulated loop it followed the true labels' difference), or ips, each click "
            "1/p(r) (it favours the ranker that logged the traffic: it refused a candidate better by +0.013 as "
            "-0.015 ± 0.005).",
            rich_help_panel=DECISION,
        ),
    ] = "pbm",
    z: Annotated[
        float | None,
        typer.Option(
            help="Promote when mean >= 0 and mean - z·SE >= -tolerance × served (training/feedback/promote.py). "
            f"Default {DEFAULT_Z:g}; {ONLINE_Z:g} where interleaving confirms the candidate (--server, --interleave).",
            rich_help_panel=DECISION,
        ),
    ] = None,
    tolerance: Annotated[
        float,
        typer.Option(
            help="How far below the served model's value (a share of it) the lower end of the estimate may reach: "
            "0 (default), the candidate must be better by z standard errors; > 0, a non-inferiority margin.",
            rich_help_panel=DECISION,
        ),
    ] = DEFAULT_TOLERANCE,
    eta: Annotated[
        float | None,
        typer.Option(
            help="Examination p(r) = r^-eta; default: estimated from randomized impressions.", rich_help_panel=DECISION
        ),
    ] = None,
    clip: Annotated[
        float, typer.Option(help="Largest 1/p(r) weight of a click.", rich_help_panel=DECISION)
    ] = DEFAULT_CLIP,
    cutoff: Annotated[
        int | None, typer.Option(help="DCG counts ranks up to this (default: every rank).", rich_help_panel=DECISION)
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(help="A running `ssi serve` to reload when promoted (http://host:port).", rich_help_panel=SERVER),
    ] = None,
    admin_key: Annotated[
        str | None, typer.Option(envvar="SSI_ADMIN_KEY", help="Its admin key (SSI_ADMIN_KEY).", rich_help_panel=SERVER)
    ] = None,
    collection: Annotated[
        str | None, typer.Option(help="The collection to reload (default: the default one).", rich_help_panel=SERVER)
    ] = None,
    interleave: Annotated[
        bool,
        typer.Option(
            "--interleave/--no-interleave",
            help="With --server: a candidate that passes the offline estimate is interleaved with the served model "
            "(POST /admin/interleave, team-draft on --share of first pages) and promoted when the service's "
            "sequential test (--online-test) says so; the next round acts on the verdict. --no-interleave: "
            "reloaded at once.",
            rich_help_panel=ONLINE,
        ),
    ] = True,
    share: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Share of first pages interleaved.", rich_help_panel=ONLINE)
    ] = DEFAULT_SHARE,
    online_test: Annotated[
        str,
        typer.Option(
            help="guard: promote unless users prefer the served model (win rate 1/2 - delta against 1/2); "
            "better: promote only when they prefer the candidate (1/2 against 1/2 + delta). ssi/interleaving.py.",
            rich_help_panel=ONLINE,
        ),
    ] = DEFAULT_MODE,
    delta: Annotated[
        float,
        typer.Option(help="The gap in win rate between the test's two hypotheses.", rich_help_panel=ONLINE),
    ] = DEFAULT_DELTA,
    alpha: Annotated[
        float,
        typer.Option(help="Bound on promoting a candidate at the test's H0 win rate.", rich_help_panel=ONLINE),
    ] = DEFAULT_ALPHA,
    beta: Annotated[
        float, typer.Option(help="Bound on dropping a candidate at the test's H1 win rate.", rich_help_panel=ONLINE)
    ] = DEFAULT_BETA,
    budget: Annotated[
        int,
        typer.Option(
            min=1, help="Interleaved answers before an undecided comparison is dropped.", rich_help_panel=ONLINE
        ),
    ] = DEFAULT_BUDGET,
    every: Annotated[
        str | None,
        typer.Option(
            help="Run rounds at this interval until interrupted (90s, 30m, 2h, 1h30m), one at a time, while the "
            "service serves; a second loop on the same --bundles folder is refused.",
            rich_help_panel=LOOP,
        ),
    ] = None,
    min_new_sessions: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Skip a round (recorded as skipped) when the log has fewer new sessions (impressions) than this "
            f"since the last round read it. Default {DEFAULT_MIN_NEW_SESSIONS} with --every, 0 for one round.",
            rich_help_panel=LOOP,
        ),
    ] = None,
    history: Annotated[
        bool,
        typer.Option(
            "--history", help="Print the rounds of the bundles folder's history as a table.", rich_help_panel=LOOP
        ),
    ] = False,
    rollback_last: Annotated[
        bool,
        typer.Option(
            "--rollback",
            help="Reload --server with the bundle served before the last promotion, and record it.",
            rich_help_panel=LOOP,
        ),
    ] = False,
) -> None:
    """Cut the traffic log's queries into folds, train a candidate on each fold's complement, judge each on its
    own fold against the last promotion's candidates (or the served bundle, or --judge) by the click model's
    labels, and when the candidates are better, refit on the whole log and reload the server
    (training/feedback/round.py). Each round is recorded in the bundles folder's history."""
    given = (("--every", every is not None), ("--history", history), ("--rollback", rollback_last))
    modes = [flag for flag, on in given if on]
    if len(modes) > 1:
        raise typer.BadParameter(f"{' and '.join(modes)} do not go together: give one")
    if history:
        _print_history(_folder(bundles, served, "--history"))
        return
    if rollback_last:
        _rollback(_folder(bundles, served, "--rollback"), server, admin_key, collection)
        return
    if log is None or served is None or corpus is None:
        missing = [flag for flag, value in (("--log", log), ("--served", served), ("--corpus", corpus)) if not value]
        raise typer.BadParameter(f"a round needs {', '.join(missing)}")
    if not served.is_dir():
        raise typer.BadParameter(f"{served} is not a bundle folder", param_hint="--served")
    try:
        interval = parse_duration(every) if every is not None else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--every") from None
    if debias not in DEBIAS_MODES:
        raise typer.BadParameter(f"--debias is one of {', '.join(DEBIAS_MODES)}, not {debias!r}")
    if labels not in ("pbm", "ips"):
        raise typer.BadParameter(f"--labels is pbm or ips, not {labels!r}")
    if split not in ("query", "time"):
        raise typer.BadParameter(f"--split is query or time, not {split!r}")
    if (queries is None) != (qrels is None):
        raise typer.BadParameter("--queries and --qrels go together")
    try:
        more_args = shlex.split(train_args)
    except ValueError as exc:
        raise typer.BadParameter(f"{exc}: {train_args!r}", param_hint="--train-args") from None
    online = None
    if interleave and server is not None:
        try:
            SequentialTest(delta=delta, alpha=alpha, beta=beta, budget=budget, mode=online_test)  # type: ignore[arg-type]
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        if share <= 0:
            raise typer.BadParameter("--share is the share of first pages interleaved: above 0")
        online = OnlineSettings(
            share=share,
            mode=online_test,
            delta=delta,
            alpha=alpha,
            beta=beta,
            budget=budget,  # type: ignore[arg-type]
        )
    settings = RoundSettings(
        log=log, served=served, corpus=corpus, bundles=bundles, name=name, debias=debias, holdout=holdout,
        z=z if z is not None else (ONLINE_Z if online is not None else DEFAULT_Z), online=online,
        split=split, judges=judge or None, folds=folds, refit=refit, tolerance=tolerance, eta=eta,
        clip=clip, cutoff=cutoff, labels=labels,
        queries=queries, qrels=qrels, warm=warm, dims=dims,
        epochs=epochs, max_minutes=max_minutes, lr=lr, warm_lr_scale=warm_lr_scale, seed=seed, threads=threads,
        train_args=more_args, server=server, admin_key=admin_key, collection=collection,
    )  # fmt: skip
    try:
        fold_judges(settings, fold_count(settings))
    except ValueError as exc:
        _fail(str(exc))
    if min_new_sessions is None:
        min_new_sessions = DEFAULT_MIN_NEW_SESSIONS if interval is not None else 0
    if interval is None:
        _one_round(settings, min_new_sessions, report)
    else:
        _loop(settings, min_new_sessions, interval, report)


def _fail(message: str) -> NoReturn:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(2)


def _folder(bundles: Path | None, served: Path | None, flag: str) -> Path:
    """The bundles folder that --history and --rollback read: --bundles, else the served bundle's."""
    if bundles is not None:
        return bundles
    if served is not None:
        return served.resolve().parent
    raise typer.BadParameter(f"{flag} reads the history in the bundles folder: give --bundles (or --served)")


def _write_report(report: Path | None, learned: Learned) -> None:
    if report is not None and learned.outcome is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(learned.outcome.report, indent=2))


def _one_round(settings: RoundSettings, min_new_sessions: int, report: Path | None) -> None:
    """One round: exit 2 when it could not run (busy folder, unreadable log), 1 when its training failed."""
    folder = bundles_folder(settings)
    try:
        learned = learn_once(settings, min_new_sessions)
    except LearnerBusy as exc:
        _fail(f"another `ssi learn` is running on {folder} ({exc}): one round at a time, try again when it ends")
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    for note in learned.notes:
        typer.echo(note)
    _write_report(report, learned)
    record, where = learned.record, history_path(folder)
    if learned.outcome is None:
        if record.decision == "skipped":
            typer.echo(f"skipped: {record.reason} (recorded in {where})")
            return
        _fail(str(record.reason))
    result = learned.outcome.report
    if "error" in result:
        typer.secho(f"error: {result['error']}", err=True, fg=typer.colors.RED)
        raise typer.Exit(1)
    typer.echo(
        f"held out {result['impressions']['held_out']} of "
        f"{result['impressions']['train'] + result['impressions']['held_out']} impressions; "
        f"candidate{'s' if result['folds'] > 1 else ''} {', '.join(result['candidates'])} ({result['start']}, "
        f"{result['train_seconds']} s)"
    )
    typer.echo(result["propensities"])
    typer.echo(result["estimate_text"])
    if "interleaving" in result:
        comparison = result["interleaving"].get("comparison") or {}
        typer.echo(
            f"interleaving {result['serving']} with the served model on {comparison.get('share')} of first pages "
            f"(comparison {comparison.get('id')}): the next `ssi learn` serves it if it wins, drops it if it loses"
        )
    elif result["promoted"] and "reload" in result:
        typer.echo(f"reloaded {settings.server}: {json.dumps(result['reload'])}")
    elif result["promoted"]:
        typer.echo("no --server given: nothing reloaded")
    typer.echo(f"recorded in {where}")


def _loop(settings: RoundSettings, min_new_sessions: int, interval: float, report: Path | None) -> None:
    """Rounds every `interval` seconds until interrupted; the loop's own lock keeps a second loop out."""
    folder = bundles_folder(settings)
    every = describe_duration(interval)

    def tick() -> None:
        try:
            learned = learn_once(settings, min_new_sessions)
        except (LearnerBusy, ValueError, OSError) as exc:  # a round by hand, or a rollback: try at the next tick
            typer.echo(f"round not run: {exc}")
            return
        for note in learned.notes:
            typer.echo(note)
        _write_report(report, learned)
        typer.echo(summary_line(learned.record))

    try:
        with LearnerLock(folder / LOOP_LOCK, f"an `ssi learn --every {every}` loop"):
            typer.echo(
                f"learning every {every} from {settings.log} (at least {min_new_sessions} new sessions a round); "
                f"history in {history_path(folder)}; Ctrl-C stops"
            )
            done = run_every(interval, tick)
    except LearnerBusy as exc:
        _fail(f"another `ssi learn --every` loop runs on {folder} ({exc}): stop it first")
    typer.echo(f"stopped after {done} round{'s' if done != 1 else ''}")


def _rollback(folder: Path, server: str | None, admin_key: str | None, collection: str | None) -> None:
    if server is None:
        raise typer.BadParameter("--rollback reloads a server: give --server")
    try:
        record = rollback(folder, server, admin_key, collection)
    except LearnerBusy as exc:
        _fail(f"a round is running on {folder} ({exc}): roll back when it ends")
    except (ValueError, OSError, RuntimeError, httpx.HTTPError) as exc:
        _fail(str(exc))
    typer.echo(f"{server} serves {record.serving} again: {record.reason} (recorded in {history_path(folder)})")


def _estimate(record: RoundRecord) -> str:
    est: dict[str, Any] | None = record.estimate
    if not est:
        return ""
    return f"{est['mean']:+.4f} ± {est['stderr']:.4f} ({est['queries']} queries)"


def _sessions(record: RoundRecord) -> str:
    return "" if record.sessions is None else f"{record.sessions} ({record.new_sessions} new)"


def _served_after(record: RoundRecord) -> str:
    if record.serving is None:
        return ""
    return Path(record.serving).name + ("" if record.reloaded else " (not reloaded)")


def summary_line(record: RoundRecord) -> str:
    """One round as a line of the loop's output."""
    parts = [f"{record.time} {record.decision}"]
    if record.sessions is not None:
        parts.append(f"{_sessions(record)} sessions")
    if record.estimate:
        parts.append(f"estimate {_estimate(record)}")
    if record.serving is not None:
        parts.append(f"serving {_served_after(record)}")
    if record.reason:
        parts.append(record.reason)
    return "; ".join(parts) + f" ({record.seconds:g} s)"


def _print_history(folder: Path) -> None:
    path = history_path(folder)
    records = read_history(path)
    if not records:
        typer.echo(f"no rounds yet: {path} is empty or absent")
        return
    table = Table(title=f"ssi learn: {len(records)} rounds in {path}", title_justify="left")
    for column in ("#", "time (UTC)", "decision", "sessions", "estimate (candidate - judge)", "serving", "s", "note"):
        table.add_column(column, justify="right" if column in ("#", "s") else "left")
    for number, record in enumerate(records, start=1):
        table.add_row(
            str(number), record.time, record.decision, _sessions(record), _estimate(record), _served_after(record),
            f"{record.seconds:g}", record.reason or "",
        )  # fmt: skip
    console = Console()
    if not console.is_terminal:  # a log file: no terminal width to fit, keep each row on one line
        console = Console(width=200)
    console.print(table)
