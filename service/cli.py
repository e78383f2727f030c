"""Placeholder until the service commands land (being written now)."""

import typer


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve() -> None:
        raise typer.Exit("ssi serve is not written yet")
