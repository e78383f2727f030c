"""`ssi train`: read a corpus and pairs, train a model of the SSI family, export a bundle.

Flags left out fall back to `SSI_TRAIN_*` environment variables, then to the defaults of
`TrainSettings`, the one configuration object of the trainer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from ssi.bundle import BundleError
from ssi.corpus import DataFileError
from training.click_recipe import CLICK_RECIPE
from training.kinds import kinds_help
from training.settings import TrainSettings

DATA = "Data"
MODEL = "Model"
OPTIM = "Optimisation"
BUDGET = "Budget and selection"


def _opt(field: str, help: str, panel: str, *names: str) -> Any:
    """A typer option whose shown default is the settings' default (the value used when omitted)."""
    default = TrainSettings.model_fields[field].default
    shown = f" (default: {default})" if default is not None else ""
    return typer.Option(*names, help=help + shown, rich_help_panel=panel, show_default=False)


def train_command(
    corpus: Annotated[
        Path, typer.Option(help="Corpus JSONL (gzip or not): id (or _id), title, text.", rich_help_panel=DATA)
    ],
    out: Annotated[
        Path, typer.Option(help="Folder to write the model bundle to (replaced atomically).", rich_help_panel=DATA)
    ],
    pairs: Annotated[
        Path | None, _opt("pairs", "Training pairs 'query_id<TAB>doc_id', both corpus documents.", DATA)
    ] = None,
    valid_pairs: Annotated[
        Path | None, _opt("valid_pairs", "Validation pairs (same format): model selection and early stopping.", DATA)
    ] = None,
    queries: Annotated[Path | None, _opt("queries", "BEIR queries JSONL (_id, text); use with --qrels.", DATA)] = None,
    qrels: Annotated[
        Path | None, _opt("qrels", "BEIR qrels TSV (query-id, corpus-id, score) to train on.", DATA)
    ] = None,
    valid_qrels: Annotated[
        Path | None,
        _opt("valid_qrels", "BEIR qrels for validation; without it a share of the training queries is held out.", DATA),
    ] = None,
    valid_share: Annotated[
        float | None,
        _opt("valid_share", "Share of training queries held out for validation (BEIR without --valid-qrels).", DATA),
    ] = None,
    query_words: Annotated[
        int | None,
        _opt(
            "query_words",
            "Train for keyword queries: each query document is cut to this many of its distinct words, "
            "drawn afresh every step; validation uses the same cut.",
            DATA,
        ),
    ] = None,
    unseen_docs: Annotated[
        float | None,
        _opt(
            "unseen_docs",
            "Unseen-documents setting: leave this seeded share of the documents (--seed) and every pair touching "
            "them out of training entirely; `ssi eval --unseen-docs` then ranks for queries among them.",
            DATA,
        ),
    ] = None,
    clicks: Annotated[
        Path | None,
        _opt(
            "clicks",
            "Click log (JSONL or TSV: page, ad, position, clicked; the service's exported traffic log, query/doc; "
            "or the service's event store, <data-dir>/stores/<collection>/events.sqlite; see training/clicks.py): "
            "documents (adverts) are the --corpus, pages (queries) the queries; each clicked pair is a training "
            "pair, weighted by --debias, every other document a negative. May go with --queries/--qrels: both train.",
            DATA,
        ),
    ] = None,
    valid_clicks: Annotated[
        Path | None,
        _opt("valid_clicks", "Click log for validation (every click counts); without it --valid-share of pages.", DATA),
    ] = None,
    pages: Annotated[
        Path | None, _opt("pages", "Pages JSONL (id, optional title, text) the click logs name by id.", DATA)
    ] = None,
    clicked_position: Annotated[
        int | None,
        _opt(
            "clicked_position",
            "Train only on clicks at this slate position (1: the paper's guard against position bias; "
            "a lower slot is seen less often, so its clicks say less about the match); the same as --debias top.",
            DATA,
        ),
    ] = None,
    debias: Annotated[
        str | None,
        _opt(
            "debias",
            "Position bias of --clicks (training/debias.py): 'pbm' (the position-based click model) weighs a pair "
            "by its clicks per expected examination beyond --relevance-floor, p(r) = r^-eta estimated on the log's "
            "randomized impressions (eta 1 with fewer than 50 randomized clicks); 'ips' weighs each click "
            "1/p(position); 'naive' weighs a pair by its clicks; 'top' keeps only clicks at --clicked-position (1). "
            "Default: pbm (top with --clicked-position).",
            DATA,
        ),
    ] = None,
    propensity_clip: Annotated[
        float | None,
        _opt(
            "propensity_clip",
            "--debias ips: each click's 1/p(position) is cut at this value, so a few deep clicks cannot dominate "
            "(bounded variance for a little bias).",
            DATA,
        ),
    ] = None,
    relevance_floor: Annotated[
        float | None,
        _opt(
            "relevance_floor",
            "--debias pbm: a clicked pair counts by how far its estimated click rate when looked at exceeds this "
            "(0.5: clicked more often than not); pairs at or below it are left out, as users click some results "
            "they find useless.",
            DATA,
        ),
    ] = None,
    self_pairs: Annotated[
        str | None,
        _opt(
            "self_pairs",
            "No labels: make the pairs from the corpus itself. 'title': a document's title against its body; "
            "'split': a span of --self-pair-words words against the rest of its document (training/self_pairs.py). "
            "On the BM25 base, --lr 0.01 --margin 4 --dims 64 unless given (the no-label recipe measured best).",
            DATA,
        ),
    ] = None,
    self_pair_words: Annotated[
        int | None, _opt("self_pair_words", "Words in the query span of --self-pairs split.", DATA)
    ] = None,
    self_pair_unshared: Annotated[
        bool | None,
        _opt(
            "self_pair_unshared",
            "--self-pairs: the query keeps only the words its document lacks, so every pair is one the semantic "
            "part must solve alone (the lexical part already finds the shared words).",
            DATA,
            "--self-pair-unshared/--self-pair-all-words",
        ),
    ] = None,
    self_pair_valid_among: Annotated[
        str | None,
        _opt(
            "self_pair_valid_among",
            "--self-pairs: validation asks a held-out document's pseudo-query among the 'held-out' documents "
            "(default) or among 'all' of them, the training documents too (stricter: a model pulls up the "
            "documents it trained on).",
            DATA,
        ),
    ] = None,
    stream_pairs: Annotated[
        bool | None,
        _opt(
            "stream_pairs",
            "Read --pairs as a stream through a shuffle buffer, never the whole file in memory (training/pair_stream.py"
            "; the corpus stays in memory). Best with the file sorted by query id.",
            DATA,
            "--stream-pairs/--no-stream-pairs",
        ),
    ] = None,
    shuffle_buffer: Annotated[
        int | None, _opt("shuffle_buffer", "Streamed pairs: pairs the shuffle buffer holds at most.", DATA)
    ] = None,
    ray: Annotated[
        str | None,
        _opt(
            "ray",
            "Data-parallel training on Ray Train: 'local' (a Ray instance in this process), 'auto' or a cluster "
            "address. --workers CPU workers (--threads each) stream their share of --pairs; gradients are averaged "
            "every step; rank 0 validates and writes --out (needs the cluster extra).",
            BUDGET,
        ),
    ] = None,
    workers: Annotated[int | None, _opt("workers", "With --ray: data-parallel training workers.", BUDGET)] = None,
    kind: Annotated[
        str | None,
        _opt(
            "kind",
            kinds_help(),
            MODEL,
        ),
    ] = None,
    lexical: Annotated[
        str | None,
        _opt(
            "lexical",
            "Weighting of the lexical part: bm25 (q·d ranks as BM25; a model learned on top starts at BM25) or "
            "tfidf (the papers' unit tf-idf, q·d = cosine). Recorded in the bundle; --init-from keeps the warm "
            "start's.",
            MODEL,
        ),
    ] = None,
    bm25_k1: Annotated[float | None, _opt("bm25_k1", "--lexical bm25: term-frequency saturation k1.", MODEL)] = None,
    bm25_b: Annotated[float | None, _opt("bm25_b", "--lexical bm25: length normalisation b.", MODEL)] = None,
    stemmer: Annotated[
        str | None,
        _opt(
            "stemmer",
            "Snowball stemmer the words go through (english, porter, french, … or none). Default english, "
            "none for --kind cfh and two languages. Recorded in the bundle; --init-from keeps the warm start's.",
            MODEL,
        ),
    ] = None,
    encoder: Annotated[
        Path | None,
        _opt(
            "encoder",
            "A pre-trained sentence encoder (a sentence-transformers model folder, an encoder folder such as "
            "`python -m training.static_distil` writes, or a hybrid bundle: its encoder): "
            "a hybrid bundle, whose score adds λ e(q)·e(d). Without pairs, BM25 + the encoder at λ = 1; with pairs, "
            "λ is learned with U and V (training/hybrid.py). Needs the `encoder` and `encoder-export` extras.",
            MODEL,
        ),
    ] = None,
    finetune_encoder: Annotated[
        int | None,
        _opt(
            "finetune_encoder",
            "Epochs of training the --encoder's own weights on the pairs first (in-batch negatives; PyTorch, on "
            "the GPU where there is one). Default 0: the encoder as it is.",
            MODEL,
        ),
    ] = None,
    encoder_precision: Annotated[
        str | None,
        _opt(
            "encoder_precision",
            "fp32 or int8: which of the --encoder's graphs the bundle serves (both are written; int8, quantized per "
            "channel and checked against fp32, encodes a query about twice as fast). Default: int8 where its check "
            "passed, else fp32 (an --encoder bundle: its own); `ssi serve --encoder-precision` can ask for the other.",
            MODEL,
        ),
    ] = None,
    query_model: Annotated[
        Path | None,
        _opt(
            "query_model",
            "A model folder distilled towards the --encoder (`python -m training.shallow_encoder`: its first layers): "
            "its graph encodes each query while documents keep the --encoder's vectors, so a query costs what the "
            "smaller model costs. Checked against the --encoder on sample queries; same tokenizer.",
            MODEL,
        ),
    ] = None,
    sentence_dims: Annotated[
        int | None,
        _opt(
            "sentence_dims",
            "Cut the --encoder's vectors to this many dimensions: the corpus's mean taken away and its leading "
            "principal axes kept, queries and documents alike (fitted on up to 2,048 documents). A flat index then "
            "reads that many floats of each document's sentence part a search instead of all (384 for "
            "all-MiniLM-L6-v2); on SciFact, 128 ranked better than the whole vectors.",
            MODEL,
        ),
    ] = None,
    init_from: Annotated[
        Path | None,
        _opt(
            "init_from",
            "Warm start from a trained lowrank bundle (its vocabulary, U and V): PSI-3 from its degree-2 "
            "model, as the PSI papers do, or more training of a lowrank model.",
            MODEL,
        ),
    ] = None,
    warm_lr_scale: Annotated[
        float | None,
        _opt(
            "warm_lr_scale",
            "With --init-from: learning rate of the warm-started U and V as a share of --lr (their Adagrad "
            "history is not in the bundle, so full-rate first steps would undo the trained model); 0 freezes them.",
            MODEL,
        ),
    ] = None,
    hash_size: Annotated[
        int | None,
        _opt(
            "hash_size",
            "Hash kernels (--kind hashkernel): buckets H that the (query word, document word) pairs share.",
            MODEL,
        ),
    ] = None,
    gamma: Annotated[
        float | None,
        _opt(
            "gamma",
            "Half-transductive ranking (--kind halftrans): weight γ of the functional regularizer (paper 004, "
            "eq. 6); larger is more like a purely functional (inductive) model.",
            MODEL,
        ),
    ] = None,
    cfh_top_k: Annotated[
        int | None,
        _opt("cfh_top_k", "Correlated hashing (--kind cfh): frequent words k per rare word or 2-gram.", MODEL),
    ] = None,
    cfh_ngrams: Annotated[
        str | None, _opt("cfh_ngrams", "Correlated hashing: what is hashed, 1 (rare words), 2 (2-grams) or 1,2.", MODEL)
    ] = None,
    cfh_min_df: Annotated[
        int | None, _opt("cfh_min_df", "Correlated hashing: documents a 2-gram must appear in to be hashed.", MODEL)
    ] = None,
    combine_tfidf: Annotated[
        bool | None,
        _opt(
            "combine_tfidf",
            "Projections (--kind lsa, cl-lsa, opca, s2net): rank by β·cos(Aq, Bd) + (1−β)·tf-idf cosine, β tuned "
            "on the validation pairs (--no-combine-tfidf: the projection's cosine alone).",
            MODEL,
            "--combine-tfidf/--no-combine-tfidf",
        ),
    ] = None,
    s2net_gamma: Annotated[
        float | None,
        _opt("s2net_gamma", "S2Net (--kind s2net): scale γ of the cosine differences in its logistic loss.", MODEL),
    ] = None,
    em_iterations: Annotated[
        int | None,
        _opt(
            "em_iterations",
            "EM kinds (--kind plsa, bltm, bltm-pr, bltm-1v, translation): EM iterations (K topics is --dims).",
            MODEL,
        ),
    ] = None,
    pair_words: Annotated[
        int | None,
        _opt(
            "pair_words",
            "EM kinds: cut each side of a training pair to its words of highest tf-idf weight (EM's cost grows "
            "with the words per pair; paper 003 trains on short query-title pairs). Default: every word.",
            MODEL,
        ),
    ] = None,
    lm_lambda: Annotated[
        float | None,
        _opt(
            "lm_lambda",
            "EM kinds: weight λ of the document's own words against the latent model (0: the model alone). "
            "Default: tuned on the validation pairs.",
            MODEL,
        ),
    ] = None,
    translations: Annotated[
        int | None,
        _opt("translations", "--kind translation: translations kept per word (top k of IBM model 1's table).", MODEL),
    ] = None,
    dims: Annotated[int | None, _opt("n_dims", "Embedding size N (rows of U and V).", MODEL, "--dims", "-N")] = None,
    vocab_size: Annotated[
        int | None,
        _opt(
            "vocab_size",
            "Vocabulary size D: the most frequent words by document frequency.",
            MODEL,
            "--vocab-size",
            "-D",
        ),
    ] = None,
    query_vocab_size: Annotated[
        int | None,
        _opt(
            "query_vocab_size",
            "Two languages: the queries' own most frequent words join the vocabulary, this many "
            "(0: one vocabulary built on the corpus). Needs --queries.",
            MODEL,
        ),
    ] = None,
    min_df: Annotated[
        int | None, _opt("min_df", "Words in fewer documents are left out of the vocabulary.", MODEL)
    ] = None,
    frequent_words: Annotated[
        int | None,
        _opt(
            "frequent_words",
            "Frequent-word restriction: U and V only have rows for the top-n words "
            "(rare words still count on the diagonal).",
            MODEL,
        ),
    ] = None,
    init_scale: Annotated[
        float | None,
        _opt(
            "init_scale",
            "Standard deviation of U's random start (V starts at 0, so training starts from the lexical part). "
            f"{CLICK_RECIPE.init_scale:g} with --clicks on the BM25 base unless given (the click recipe, with "
            f"--ensemble {CLICK_RECIPE.ensemble}).",
            MODEL,
        ),
    ] = None,
    ensemble: Annotated[
        int | None,
        _opt(
            "ensemble",
            "--kind lowrank: train K models from seeds --seed, --seed + 1, ... and export the best rank-N model of "
            "their average U^T V (training/ensemble.py): the same size and speed, less of one seed's luck on few "
            f"pairs; K times the training time. {CLICK_RECIPE.ensemble} with --clicks on the BM25 base unless given.",
            MODEL,
        ),
    ] = None,
    lr: Annotated[
        float | None, _opt("lr", "Adagrad learning rate (--kind s2net: Adam's, 0.3 when not given).", OPTIM)
    ] = None,
    margin: Annotated[
        float | None, _opt("margin", "Margin of the ranking loss max(0, margin - f(q,d+) + f(q,d-)).", OPTIM)
    ] = None,
    batch_queries: Annotated[int | None, _opt("batch_queries", "Queries per step.", OPTIM)] = None,
    positives_per_query: Annotated[
        int | None, _opt("positives_per_query", "Relevant documents sampled per query and step.", OPTIM)
    ] = None,
    negatives_per_positive: Annotated[
        int | None,
        _opt(
            "negatives_per_positive",
            "Negatives per (query, positive); triples per step = queries x positives x negatives.",
            OPTIM,
        ),
    ] = None,
    hard_fraction: Annotated[
        float | None,
        _opt(
            "hard_fraction",
            "Share of negatives drawn from the current model's best-scoring non-relevant documents.",
            OPTIM,
        ),
    ] = None,
    hard_pool: Annotated[
        int | None, _opt("hard_pool", "How many best-scoring documents the hard negatives are drawn from.", OPTIM)
    ] = None,
    pool_size: Annotated[
        int | None,
        _opt(
            "pool_size",
            "Documents scored per step: the whole corpus up to this size, else the positives plus a uniform sample.",
            OPTIM,
        ),
    ] = None,
    epochs: Annotated[
        float | None, _opt("epochs", "Epochs (each training query visited once per epoch).", BUDGET)
    ] = None,
    max_minutes: Annotated[
        float | None,
        _opt(
            "max_minutes",
            "Time budget of the training loop (10 minutes when neither this nor --epochs is given; --clicks on the "
            f"BM25 base: {CLICK_RECIPE.epochs:g} epochs instead, the click recipe of training/click_recipe.py).",
            BUDGET,
        ),
    ] = None,
    eval_every: Annotated[
        int | None, _opt("eval_every", "Validate every this many steps; the best validation MAP is kept.", BUDGET)
    ] = None,
    patience: Annotated[
        int | None, _opt("patience", "Stop after this many validations without improvement (0: never).", BUDGET)
    ] = None,
    base_patience: Annotated[
        int | None,
        _opt(
            "base_patience",
            "--self-pairs: stop when validation has not beaten step 0 after this many validations (and "
            "--base-patience-minutes), exporting the step-0 model (0: never).",
            BUDGET,
        ),
    ] = None,
    base_patience_minutes: Annotated[
        float | None,
        _opt("base_patience_minutes", "--self-pairs: the least training time before that stop.", BUDGET),
    ] = None,
    seed: Annotated[
        int | None, _opt("seed", "Random seed (initialisation, sampling, validation split).", BUDGET)
    ] = None,
    threads: Annotated[int | None, _opt("threads", "CPU threads for the sparse and dense products.", BUDGET)] = None,
    device: Annotated[
        str | None,
        _opt(
            "device",
            "auto, cpu, cuda or cuda:N. auto: the GPU when PyTorch sees one. On a GPU the whole step runs there "
            "(sampling, scores, loss, Adagrad) for the kinds lowrank, symmetric, noidentity, psi3 and fullw; the "
            "other kinds, the EM kinds and the fitted projections, --stream-pairs, --ray and --query-words train "
            "on the CPU (auto picks it; cuda refuses). The corpus, its queries and their q·d table must fit in the "
            "GPU's memory.",
            BUDGET,
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.", rich_help_panel=BUDGET)] = True,
) -> None:
    """Train a model of the SSI family from pairs and export it as a bundle."""
    given = {
        "corpus": corpus, "out": out, "pairs": pairs, "valid_pairs": valid_pairs, "queries": queries,
        "qrels": qrels, "valid_qrels": valid_qrels, "valid_share": valid_share,
        "query_words": query_words, "unseen_docs": unseen_docs, "clicks": clicks, "valid_clicks": valid_clicks,
        "pages": pages, "clicked_position": clicked_position, "debias": debias, "propensity_clip": propensity_clip,
        "relevance_floor": relevance_floor,
        "base_patience": base_patience, "base_patience_minutes": base_patience_minutes, "self_pairs": self_pairs,
        "self_pair_words": self_pair_words, "self_pair_unshared": self_pair_unshared,
        "self_pair_valid_among": self_pair_valid_among, "kind": kind,
        "init_from": init_from, "encoder": encoder, "finetune_encoder": finetune_encoder,
        "encoder_precision": encoder_precision,
        "query_model": query_model, "sentence_dims": sentence_dims,
        "lexical": lexical, "bm25_k1": bm25_k1, "bm25_b": bm25_b, "stemmer": stemmer,
        "warm_lr_scale": warm_lr_scale, "hash_size": hash_size, "gamma": gamma, "n_dims": dims,
        "vocab_size": vocab_size, "query_vocab_size": query_vocab_size, "min_df": min_df,
        "frequent_words": frequent_words, "init_scale": init_scale, "ensemble": ensemble,
        "lr": lr, "margin": margin, "batch_queries": batch_queries, "positives_per_query": positives_per_query,
        "negatives_per_positive": negatives_per_positive, "hard_fraction": hard_fraction, "hard_pool": hard_pool,
        "pool_size": pool_size, "epochs": epochs, "max_minutes": max_minutes, "eval_every": eval_every,
        "patience": patience, "seed": seed, "threads": threads, "device": device,
        "em_iterations": em_iterations, "pair_words": pair_words, "lm_lambda": lm_lambda,
        "translations": translations, "cfh_top_k": cfh_top_k, "cfh_ngrams": cfh_ngrams, "cfh_min_df": cfh_min_df,
        "combine_tfidf": combine_tfidf, "s2net_gamma": s2net_gamma,
        "stream_pairs": stream_pairs, "shuffle_buffer": shuffle_buffer, "ray": ray, "workers": workers,
    }  # fmt: skip
    try:
        settings = TrainSettings(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "options"
        raise typer.BadParameter(f"{where}: {first['msg']}") from None
    try:
        from training.run import run_training

        summary = run_training(settings, show_progress=progress, echo=lambda line: typer.echo(line, err=True))
    except (DataFileError, BundleError, ValueError) as exc:  # SentenceError is a ValueError
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(summary, indent=2))
