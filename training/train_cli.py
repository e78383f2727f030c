"""Placeholder until the train command lands (being written now)."""

import typer


def train_command() -> None:
    raise typer.Exit("ssi train is not written yet")
