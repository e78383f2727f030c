"""`ssi clicks synthetic|wikispeedia`: write a click log folder to train and test advert matching on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

clicks_app = typer.Typer(
    help="Generate a click log (adverts, pages, clicks by split, qrels) for `ssi train --clicks`.",
    no_args_is_help=True,
)


@clicks_app.command("synthetic")
def synthetic_command(
    out: Annotated[Path, typer.Option(help="Folder to write the log to.")],
    pages: Annotated[int, typer.Option(help="Pages (queries).")] = 5000,
    ads: Annotated[int, typer.Option(help="Adverts (documents).")] = 1000,
    topics: Annotated[int, typer.Option(help="Latent topics shared by pages and adverts.")] = 50,
    slates: Annotated[int, typer.Option(help="Slates shown per page.")] = 2,
    slate_size: Annotated[int, typer.Option(help="Adverts per slate (positions 1..n).")] = 4,
    click_noise: Annotated[float, typer.Option(help="Click probability of an examined off-topic advert.")] = 0.03,
    seed: Annotated[int, typer.Option(help="Seed of everything drawn.")] = 0,
) -> None:
    """Pages and adverts from shared latent topics, adverts with their own words; clicks with position bias."""
    from training.click_logs.synthetic import SyntheticSpec, generate

    spec = SyntheticSpec(
        pages=pages, ads=ads, topics=topics, slates=slates, slate_size=slate_size, click_noise=click_noise, seed=seed
    )
    try:
        summary = generate(spec, out)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(json.dumps(summary["splits"], indent=2))


@clicks_app.command("wikispeedia")
def wikispeedia_command(
    out: Annotated[Path, typer.Option(help="Folder to write the log to.")],
    data: Annotated[Path, typer.Option(help="The Wikispeedia folder (read in place).")] = Path(
        "../shared/data/wikispeedia"
    ),
) -> None:
    """Articles as pages, title + first sentence (≤ 25 words) as adverts, links as clicks (train/valid)."""
    from ssi.corpus import DataFileError
    from training.click_logs.wikispeedia import generate

    try:
        summary = generate(data, out)
    except DataFileError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(summary["splits"], indent=2))


@clicks_app.command("links")
def links_command(
    corpus: Annotated[Path, typer.Option(help="Corpus JSONL (id, title, text): each document a page and an advert.")],
    train_links: Annotated[Path, typer.Option(help="Links 'source<TAB>target': the training clicks.")],
    out: Annotated[Path, typer.Option(help="Folder to write the log to.")],
    valid_links: Annotated[Path | None, typer.Option(help="Links held out: the validation clicks.")] = None,
) -> None:
    """Any corpus with links, as the Wikispeedia log: title + first sentence as adverts, links as clicks."""
    from ssi.corpus import DataFileError
    from training.click_logs.wikispeedia import generate_from_links

    links = {"train": train_links, **({"valid": valid_links} if valid_links is not None else {})}
    try:
        summary = generate_from_links(corpus, links, out)
    except DataFileError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(summary["splits"], indent=2))
