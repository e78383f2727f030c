"""`ssi crosslang`: write a cross-language retrieval task (pseudo-language queries) for any corpus with links."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

W = Path("../shared/data/wikispeedia")


def crosslang_command(
    out: Annotated[Path, typer.Option(help="Folder to write the task to.")],
    corpus: Annotated[Path, typer.Option(help="Corpus JSONL (the documents' language).")] = W / "docs.jsonl.gz",
    pairs: Annotated[Path, typer.Option(help="Training links 'source<TAB>target'.")] = W / "links.train.tsv.gz",
    valid_pairs: Annotated[Path, typer.Option(help="Validation links.")] = W / "links.valid.tsv.gz",
    merged: Annotated[float, typer.Option(help="Share of words merged into another word's invented word.")] = 0.10,
    dropped: Annotated[float, typer.Option(help="Share of words left untranslated (dropped).")] = 0.03,
    synonyms: Annotated[float, typer.Option(help="Share of words with 2–3 invented synonyms.")] = 0.25,
    seed: Annotated[int, typer.Option(help="Seed of the dictionary and of the synonym drawn per occurrence.")] = 0,
) -> None:
    """Queries are the documents' mates in a seeded pseudo-language; relevant = the original's links."""
    from ssi.corpus import DataFileError
    from training.crosslang import generate
    from training.pseudo_language import PseudoLanguageSpec

    for path in (corpus, pairs, valid_pairs):
        if not path.is_file():
            raise typer.BadParameter(f"no such file: {path}")
    try:
        spec = PseudoLanguageSpec(merged=merged, dropped=dropped, synonyms=synonyms, seed=seed)
        summary = generate(corpus, {"train": pairs, "valid": valid_pairs}, out, spec)
    except (ValueError, DataFileError) as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(summary, indent=2))
