"""`ssi learn`: one round of learning from the service's own traffic (training.feedback.round)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from training.debias import DEBIAS_MODES, DEFAULT_CLIP
from training.feedback.promote import DEFAULT_FOLDS, DEFAULT_HOLDOUT, DEFAULT_TOLERANCE, DEFAULT_Z
from training.feedback.round import RoundSettings, run_round

DATA = "Data"
DECISION = "Estimate and decision"
TRAIN = "Training the candidate"
SERVER = "Server"


def learn_command(
    log: Annotated[
        Path,
        typer.Option(
            "--log", help="The service's event store (events.sqlite) or a log exported from it.", rich_help_panel=DATA
        ),
    ],
    served: Annotated[Path, typer.Option(help="The bundle the service serves now.", rich_help_panel=DATA)],
    corpus: Annotated[Path, typer.Option(help="The served corpus JSONL.", rich_help_panel=DATA)],
    bundles: Annotated[
        Path | None,
        typer.Option(
            help="Folder for the candidate bundle (default: beside the served one, where the server may reload from).",
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
    epochs: Annotated[float | None, typer.Option(help="ssi train --epochs.", rich_help_panel=TRAIN)] = None,
    max_minutes: Annotated[float | None, typer.Option(help="ssi train --max-minutes.", rich_help_panel=TRAIN)] = None,
    lr: Annotated[float | None, typer.Option(help="ssi train --lr.", rich_help_panel=TRAIN)] = None,
    warm_lr_scale: Annotated[
        float | None,
        typer.Option(help="ssi train --warm-lr-scale (a warm start's rate factor).", rich_help_panel=TRAIN),
    ] = None,
    seed: Annotated[int, typer.Option(help="ssi train --seed.", rich_help_panel=TRAIN)] = 0,
    threads: Annotated[int, typer.Option(help="ssi train --threads.", rich_help_panel=TRAIN)] = 2,
    train_args: Annotated[
        str, typer.Option(help="More `ssi train` flags, as one shell-quoted string.", rich_help_panel=TRAIN)
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
            help="The bundle to compare the candidate with (default: --served): the bundle the served one was "
            "refit from, which never saw the held-out queries (the last round's report names it in 'candidates'). "
            "With --folds K: once, or K times in fold order.",
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
        float,
        typer.Option(
            help="Promote when mean >= 0 and mean - z·SE >= -tolerance × served (training/feedback/promote.py).",
            rich_help_panel=DECISION,
        ),
    ] = DEFAULT_Z,
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
) -> None:
    """Cut the traffic log's queries into folds, train a candidate on each fold's complement, judge each on its
    own fold against the served bundle (or --judge) by the click model's labels, and when the candidates are
    better, refit on the whole log and reload the server (training/feedback/round.py)."""
    if debias not in DEBIAS_MODES:
        raise typer.BadParameter(f"--debias is one of {', '.join(DEBIAS_MODES)}, not {debias!r}")
    if labels not in ("pbm", "ips"):
        raise typer.BadParameter(f"--labels is pbm or ips, not {labels!r}")
    if split not in ("query", "time"):
        raise typer.BadParameter(f"--split is query or time, not {split!r}")
    if (queries is None) != (qrels is None):
        raise typer.BadParameter("--queries and --qrels go together")
    settings = RoundSettings(
        log=log, served=served, corpus=corpus, bundles=bundles, name=name, debias=debias, holdout=holdout, z=z,
        split=split, judges=judge or None, folds=folds, refit=refit, tolerance=tolerance, eta=eta,
        clip=clip, cutoff=cutoff, labels=labels,
        queries=queries, qrels=qrels, warm=warm, dims=dims,
        epochs=epochs, max_minutes=max_minutes, lr=lr, warm_lr_scale=warm_lr_scale, seed=seed, threads=threads,
        train_args=shlex.split(train_args), server=server, admin_key=admin_key, collection=collection,
    )  # fmt: skip
    try:
        outcome = run_round(settings)
    except (ValueError, OSError, RuntimeError) as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    result = outcome.report
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(result, indent=2))
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
    if result["promoted"] and "reload" in result:
        typer.echo(f"reloaded {server}: {json.dumps(result['reload'])}")
    elif result["promoted"]:
        typer.echo("no --server given: nothing reloaded")
