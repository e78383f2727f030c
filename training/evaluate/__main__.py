"""`python -m training.evaluate eval|rank ...`: the evaluation commands without the `ssi` entry point."""

import typer

from training.evaluate.cli import eval_command, rank_command

app = typer.Typer(name="ssi-evaluate", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
app.command("eval", help="Score a bundle and the classic baselines on one split, in one run.")(eval_command)
app.command("rank", help="Rank a TSV of queries against a corpus and write a TREC run file.")(rank_command)

if __name__ == "__main__":
    app()
