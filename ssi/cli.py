"""The `ssi` command: one entry point whose subcommands live with the half they belong to.

Each half keeps its commands in its own module (training/cli.py, training/evaluate/cli.py,
service/cli.py); nothing heavy (torch, faiss) is imported until a command runs, so the service
image, which has no PyTorch, runs `ssi serve` from the same entry point.
"""

from __future__ import annotations

import typer


def build_app() -> typer.Typer:
    from service.cli import register as register_service
    from training.cli import register as register_training

    app = typer.Typer(
        name="ssi",
        help="Supervised Semantic Indexing: train a learned ranking from pairs, evaluate it, serve it.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    register_training(app)
    register_service(app)
    return app


def main() -> None:
    build_app()()
