"""`python -m training`: the offline commands (train, eval, rank)."""

import typer

from training.cli import register

app = typer.Typer(name="training", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
register(app)

if __name__ == "__main__":
    app()
