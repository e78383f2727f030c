"""`ssi words WORD`: the nearest words of a trained model (ssi.words), from its bundle alone.

It needs neither half: only the bundle and the contract package, so it is registered by the entry
package itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer


def words_command(
    words: Annotated[list[str], typer.Argument(help="One or more words.")],
    bundle: Annotated[Path, typer.Option(help="Model bundle folder.")],
    k: Annotated[int, typer.Option("--k", min=1, max=100, help="Neighbours per word.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """The words closest to each WORD in the model's embedding space (Euclidean, as the PSI paper's Table 5)."""
    from ssi.bundle import BundleError, load_bundle
    from ssi.words import WordsError, nearest_words

    try:
        loaded = load_bundle(bundle)
    except BundleError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    found: dict[str, list[dict[str, float | str]]] = {}
    failed = False
    for word in words:
        try:
            neighbours = nearest_words(loaded.form, loaded.vocab, word, k)
        except WordsError as exc:
            typer.secho(f"{word}: {exc}", err=True, fg=typer.colors.RED)
            failed = True
            continue
        found[word] = [{"word": n.word, "distance": round(n.distance, 4)} for n in neighbours]
        if not as_json:
            typer.echo(f"{word}: " + ", ".join(n.word for n in neighbours))
    if as_json:
        typer.echo(json.dumps(found, indent=2, ensure_ascii=False))
    if failed:
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("words", help="Nearest words of a trained model (its word embeddings).")(words_command)
