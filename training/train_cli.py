"""`ssi train`: read a corpus and pairs, train a model of the SSI family, export a bundle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from ssi.bundle import BundleError
from ssi.corpus import DataFileError

DATA = "Data"
MODEL = "Model"
OPTIM = "Optimisation"
BUDGET = "Budget and selection"


def train_command(
    corpus: Annotated[
        Path, typer.Option(help="Corpus JSONL (gzip or not): id (or _id), title, text.", rich_help_panel=DATA)
    ],
    out: Annotated[Path, typer.Option(help="Folder to write the model bundle to.", rich_help_panel=DATA)],
    pairs: Annotated[
        Path | None,
        typer.Option(help="Training pairs 'query_id<TAB>doc_id', both corpus documents.", rich_help_panel=DATA),
    ] = None,
    valid_pairs: Annotated[
        Path | None,
        typer.Option(
            help="Validation pairs (same format) for early stopping and model selection.", rich_help_panel=DATA
        ),
    ] = None,
    queries: Annotated[
        Path | None, typer.Option(help="BEIR queries JSONL (_id, text); use with --qrels.", rich_help_panel=DATA)
    ] = None,
    qrels: Annotated[
        Path | None,
        typer.Option(help="BEIR qrels TSV (query-id, corpus-id, score) for training.", rich_help_panel=DATA),
    ] = None,
    valid_qrels: Annotated[
        Path | None,
        typer.Option(
            help="BEIR qrels for validation; without it, a share of the training queries is held out.",
            rich_help_panel=DATA,
        ),
    ] = None,
    valid_share: Annotated[
        float,
        typer.Option(
            help="Share of training queries held out for validation when no validation file is given (BEIR only).",
            rich_help_panel=DATA,
        ),
    ] = 0.1,
    kind: Annotated[
        str, typer.Option(help="Model kind: lowrank, symmetric, noidentity, diagonal, fullw.", rich_help_panel=MODEL)
    ] = "lowrank",
    dims: Annotated[
        int, typer.Option("--dims", "-N", help="Embedding size N (rows of U and V).", rich_help_panel=MODEL)
    ] = 100,
    vocab_size: Annotated[
        int,
        typer.Option(
            "--vocab-size",
            "-D",
            help="Vocabulary size D: the most frequent words by document frequency.",
            rich_help_panel=MODEL,
        ),
    ] = 30000,
    min_df: Annotated[
        int, typer.Option(help="Words in fewer documents are left out of the vocabulary.", rich_help_panel=MODEL)
    ] = 2,
    frequent_words: Annotated[
        int | None,
        typer.Option(
            help="Frequent-word restriction: U and V only have rows for the top-n words "
            "(rare words still count on the diagonal).",
            rich_help_panel=MODEL,
        ),
    ] = None,
    init_scale: Annotated[
        float,
        typer.Option(
            help="Standard deviation of U's random start (V starts at 0, so training starts from tf-idf).",
            rich_help_panel=MODEL,
        ),
    ] = 0.1,
    lr: Annotated[float, typer.Option(help="Adagrad learning rate.", rich_help_panel=OPTIM)] = 0.05,
    margin: Annotated[
        float,
        typer.Option(help="Margin of the ranking loss max(0, margin - f(q,d+) + f(q,d-)).", rich_help_panel=OPTIM),
    ] = 1.0,
    batch_queries: Annotated[int, typer.Option(help="Queries per step (the batch).", rich_help_panel=OPTIM)] = 512,
    positives_per_query: Annotated[
        int, typer.Option(help="Relevant documents sampled per query and step.", rich_help_panel=OPTIM)
    ] = 16,
    negatives_per_positive: Annotated[
        int,
        typer.Option(
            help="Negatives per (query, positive): triples per step = batch x positives x negatives.",
            rich_help_panel=OPTIM,
        ),
    ] = 2,
    hard_fraction: Annotated[
        float,
        typer.Option(
            help="Share of negatives drawn from the current model's best-scoring non-relevant documents.",
            rich_help_panel=OPTIM,
        ),
    ] = 0.0,
    hard_pool: Annotated[
        int, typer.Option(help="How many top-scoring documents hard negatives are drawn from.", rich_help_panel=OPTIM)
    ] = 50,
    pool_size: Annotated[
        int,
        typer.Option(
            help="Documents scored per step: the whole corpus up to this size, else positives plus a uniform sample.",
            rich_help_panel=OPTIM,
        ),
    ] = 20000,
    epochs: Annotated[
        float | None, typer.Option(help="Epochs (each training query visited once per epoch).", rich_help_panel=BUDGET)
    ] = None,
    max_minutes: Annotated[
        float | None,
        typer.Option(help="Time budget for the training loop (default 10 when no --epochs).", rich_help_panel=BUDGET),
    ] = None,
    eval_every: Annotated[
        int,
        typer.Option(help="Validate every this many steps; the best validation MAP is kept.", rich_help_panel=BUDGET),
    ] = 50,
    patience: Annotated[
        int,
        typer.Option(help="Stop after this many validations without improvement (0: never).", rich_help_panel=BUDGET),
    ] = 0,
    seed: Annotated[
        int, typer.Option(help="Random seed (initialisation, sampling, validation split).", rich_help_panel=BUDGET)
    ] = 0,
    threads: Annotated[
        int, typer.Option(help="CPU threads for the sparse and dense products.", rich_help_panel=BUDGET)
    ] = 2,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.", rich_help_panel=BUDGET)] = True,
) -> None:
    """Train a model of the SSI family from pairs and export it as a bundle."""
    try:
        from training.settings import TrainSettings

        settings = TrainSettings(
            corpus=corpus,
            out=out,
            pairs=pairs,
            valid_pairs=valid_pairs,
            queries=queries,
            qrels=qrels,
            valid_qrels=valid_qrels,
            valid_share=valid_share,
            kind=kind,
            n_dims=dims,
            vocab_size=vocab_size,
            min_df=min_df,
            frequent_words=frequent_words,
            init_scale=init_scale,
            lr=lr,
            margin=margin,
            batch_queries=batch_queries,
            positives_per_query=positives_per_query,
            negatives_per_positive=negatives_per_positive,
            hard_fraction=hard_fraction,
            hard_pool=hard_pool,
            pool_size=pool_size,
            epochs=epochs,
            max_minutes=max_minutes,
            eval_every=eval_every,
            patience=patience,
            seed=seed,
            threads=threads,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "options"
        raise typer.BadParameter(f"{where}: {first['msg']}") from None
    try:
        from training.run import run_training

        summary = run_training(settings, show_progress=progress)
    except (DataFileError, BundleError, ValueError) as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(summary, indent=2))
