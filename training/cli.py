"""`ssi train`, `ssi eval`, `ssi rank`, `ssi clicks`, `ssi crosslang`, `ssi learn`: the offline commands."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from training.click_logs.cli import clicks_app
    from training.crosslang_cli import crosslang_command
    from training.evaluate.cli import eval_command, rank_command
    from training.feedback.cli import learn_command
    from training.train_cli import train_command

    app.command("train", help="Train a model from pairs and export a bundle.")(train_command)
    app.command("eval", help="Score a bundle and the classic baselines on one split, in one run.")(eval_command)
    app.command("rank", help="Rank a TSV of queries against a corpus and write a TREC run file.")(rank_command)
    app.add_typer(clicks_app, name="clicks")
    app.command("crosslang", help="Write a cross-language task: pseudo-language queries for a linked corpus.")(
        crosslang_command
    )
    app.command(
        "learn",
        help="Learn from the service's traffic: a round trains on its log and promotes if held-out clicks agree; "
        "--every runs rounds on a schedule, --history lists them, --rollback undoes the last promotion.",
    )(learn_command)
