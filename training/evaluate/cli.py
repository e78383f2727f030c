"""Placeholder until the evaluation commands land (being written now)."""

import typer


def eval_command() -> None:
    raise typer.Exit("ssi eval is not written yet")


def rank_command() -> None:
    raise typer.Exit("ssi rank is not written yet")
