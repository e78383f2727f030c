"""The `ssi` command: one entry point whose subcommands live with the half they belong to.

Each half registers its own commands (service/cli.py, training/cli.py). Only the half that owns the
requested subcommand is imported, so `ssi serve` in the service image, which has no PyTorch, never
imports torch or any training module; `ssi --help` (or no subcommand, or an unknown one) registers
both so the help and the "no such command" error list every command.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from ssi_cli.words import register as register_words

# Which half owns each subcommand; tests/test_entry.py checks these against what each `register` adds.
SERVICE_COMMANDS: frozenset[str] = frozenset({"serve", "bench", "backup", "restore"})
TRAINING_COMMANDS: frozenset[str] = frozenset({"train", "eval", "rank", "clicks", "crosslang", "learn"})
# The optional cluster layer (cluster/, extra `cluster`): Ray is imported only when one of these runs.
CLUSTER_COMMANDS: frozenset[str] = frozenset({"index", "cluster"})
# Commands that need only a bundle and the contract package; always registered (they import nothing heavy).
CONTRACT_COMMANDS: frozenset[str] = frozenset({"words"})

HELP = "Supervised Semantic Indexing: train a learned ranking from pairs, evaluate it, serve it."


def halves_for(command: str | None) -> tuple[str, ...]:
    """The halves to import for `command`: its own one, or both when it is absent or unknown (help, errors)."""
    if command in SERVICE_COMMANDS:
        return ("service",)
    if command in TRAINING_COMMANDS:
        return ("training",)
    if command in CLUSTER_COMMANDS:
        return ("cluster",)
    if command in CONTRACT_COMMANDS:
        return ()
    return ("training", "service", "cluster")


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand named by `argv` (without the program name); None when it starts with an option."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def build_app(command: str | None = None) -> typer.Typer:
    """The `ssi` app with the commands of the half owning `command` (both halves when None)."""
    app = typer.Typer(
        name="ssi",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback(help=HELP)
    def root() -> None:
        """Keeps `ssi` a group even when only one half (possibly one command) is registered."""

    register_words(app)
    for half in halves_for(command):
        if half == "training":
            from training.cli import register as register_training

            register_training(app)
        elif half == "cluster":
            from cluster.cli import register as register_cluster

            register_cluster(app)
        else:
            from service.cli import register as register_service

            register_service(app)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry: build the app for the requested subcommand and run it."""
    args = list(sys.argv[1:] if argv is None else argv)
    build_app(command_of(args))(args=args, prog_name="ssi")
