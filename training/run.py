"""`ssi train` end to end: data → trainer (with validation) → bundle, and a summary of what happened."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from ssi.bundle import Bundle, load_bundle
from ssi.forms.lowrank import LowRank
from ssi.products import DocMatrix
from ssi.stemming import DEFAULT_STEMMER, NO_STEMMER
from ssi.weighting import Bm25
from training.click_recipe import CLICK_RECIPE
from training.data import TrainingData, load_training_data
from training.device import resolve_device
from training.dice import HashingPlan
from training.ensemble import fold_lowrank
from training.evaluate.metrics import quick_map
from training.evaluate.tasks import RetrievalTask, beir_task, doc_doc_task, keyword_task
from training.export import export_bundle
from training.fitted import FitContext, fitted_kind
from training.history_plot import write_history_plot
from training.hybrid import LEARNED_RULE, SENTENCE_WEIGHT, PreparedEncoder, SentenceTraining
from training.sentence_vectors import encode_corpus
from training.settings import TrainSettings
from training.trainer import Trainer, TrainResult
from training.validation import FormValidator

HISTORY_PLOT = "history.png"  # beside the bundle's files; not part of its content hash
# The lexical part of the kinds that take either weighting, when --lexical is not given (docs/guides/train.md's
# "which kind" table has the runs that chose it).
DEFAULT_LEXICAL = "bm25"


def _map_of(task: RetrievalTask) -> Callable[[np.ndarray], dict[str, float]]:
    return lambda scores: {"map": quick_map(task, scores)}


def build_validator(
    data: TrainingData, docs: DocMatrix, settings: TrainSettings, gram_cache: np.ndarray | None = None
) -> FormValidator | None:
    """The validation task of the data, measured on the form's reference scores; None without validation pairs.

    `gram_cache`: q·d of every query document against every document where the trainer holds it.
    """
    if not data.valid_pairs:
        return None
    if data.doc_doc and settings.query_words:
        task = keyword_task(data.docs, data.valid_pairs, data.train_pairs, n_words=settings.query_words)
        rows = data.vocab.featurize_queries(list(task.query_texts))
        return FormValidator(rows, docs, _map_of(task), texts=task.query_texts)
    if data.doc_doc:
        task = doc_doc_task(data.docs, data.valid_pairs, data.train_pairs, name="valid")
        rows = task.query_doc_rows
        assert rows is not None
        gram = gram_cache[rows] if gram_cache is not None else None
        return FormValidator(data.X_queries[rows], docs, _map_of(task), gram, texts=task.query_texts)
    # A query's training pairs (an adverts page's clicks, a cross-language query's links) are left out of its
    # validation ranking (filtered); BEIR splits by query, where this leaves nothing out.
    known = data.train_pairs
    if data.X_valid_docs is not None and data.valid_docs is not None:  # self-made pairs: held-out documents
        ranked, rows = data.valid_docs, data.X_valid_docs
        if settings.self_pair_valid_among == "all":  # among the training documents too: the stricter question
            ranked, rows = [*data.docs, *ranked], sp.vstack([data.X_docs, rows], format="csr")
        docs = data.vocab.doc_matrix(rows, ids=[d.id for d in ranked])
    else:
        ranked = data.docs
    task = beir_task(ranked, data.queries, data.valid_pairs, name="valid", known=known)
    row_of = {q.id: i for i, q in enumerate(data.queries)}
    rows = np.asarray([row_of[q] for q in task.query_ids], dtype=np.int64)
    return FormValidator(data.X_queries[rows], docs, _map_of(task), texts=task.query_texts)


def hashing_plan(settings: TrainSettings) -> HashingPlan | None:
    """The correlated-hashing map `--kind cfh` needs (F = --frequent-words), None for the other kinds."""
    if settings.kind != "cfh" or settings.frequent_words is None:
        return None
    ngrams = tuple(int(n) for n in settings.cfh_ngrams.split(","))
    return HashingPlan(settings.frequent_words, settings.cfh_top_k, ngrams, settings.cfh_min_df)


def load_data(settings: TrainSettings, init: Bundle | None) -> TrainingData:
    """The training data the settings name (pairs streamed with --stream-pairs), featurized once."""
    return load_training_data(
        settings.corpus,
        pairs=settings.pairs,
        valid_pairs=settings.valid_pairs,
        queries=settings.queries,
        qrels=settings.qrels,
        valid_qrels=settings.valid_qrels,
        valid_share=settings.valid_share,
        split_seed=settings.seed,
        vocab_size=settings.vocab_size,
        query_vocab_size=settings.query_vocab_size,
        min_df=settings.min_df,
        vocab=init.vocab if init is not None else None,
        unseen_share=settings.unseen_docs,
        clicks=settings.clicks,
        valid_clicks=settings.valid_clicks,
        pages=settings.pages,
        clicked_position=settings.clicked_position,
        debias=settings.debias,
        propensity_clip=settings.propensity_clip,
        relevance_floor=settings.relevance_floor,
        self_pairs=settings.self_pairs,
        self_pair_words=settings.self_pair_words,
        self_pair_unshared=settings.self_pair_unshared,
        hashing=hashing_plan(settings),
        stream_buffer=settings.shuffle_buffer if settings.stream_pairs else None,
        bm25=lexical_choice(settings),
        stemmer=settings.stemmer,
    )


# What a vocabulary keeps by default under each weighting: (most words, fewest documents a word is in, words the
# semantic part learns). tf-idf as the papers; BM25 every word, as BM25 itself counts them (dropping the words
# of one document cost 0.04 NDCG@10 on SciFact: they are BM25's strongest matches), the semantic part on the
# 30,000 most frequent, where tf-idf's whole vocabulary was.
VOCAB_DEFAULTS: dict[str, tuple[int, int, int | None]] = {"tfidf": (30_000, 2, None), "bm25": (10_000_000, 1, 30_000)}
TFIDF_ONLY_REASON = "its model is built on tf-idf rows"


def resolve_lexical(settings: TrainSettings, init: Bundle | None = None) -> TrainSettings:
    """The settings with the lexical part chosen (--lexical where given, a warm start's, else by kind) and its
    vocabulary defaults.

    The kinds whose lexical part is BM25 when not told: the SGD kinds, which read the rows as they are. The EM
    kinds recover term counts from tf-idf rows (ssi.forms.query_likelihood), the projections combine with the
    tf-idf cosine, correlated hashing and two-language vocabularies are built on tf-idf: they keep tf-idf.
    """
    tfidf_only = fitted_kind(settings.kind) is not None or settings.kind == "cfh" or settings.query_vocab_size > 0
    if init is not None and settings.lexical not in (None, init.vocab.lexical):
        raise ValueError(
            f"--init-from {init.path} weighs its lexical part by {init.vocab.lexical}: a warm start keeps its "
            f"vocabulary, so --lexical {settings.lexical} cannot apply"
        )
    lexical = init.vocab.lexical if init is not None else settings.lexical
    if lexical == "bm25" and tfidf_only:
        given = f"--init-from {init.path} (BM25)" if init is not None else "--lexical bm25"
        raise ValueError(f"{given} does not go with --kind {settings.kind}: {TFIDF_ONLY_REASON}")
    lexical = lexical or ("tfidf" if tfidf_only else DEFAULT_LEXICAL)
    vocab_size, min_df, frequent = VOCAB_DEFAULTS[lexical]
    if settings.kind == "cfh":
        frequent = None  # cfh's --frequent-words is its F, which it asks for itself
    return settings.model_copy(
        update={
            "lexical": lexical,
            "stemmer": resolve_stemmer(settings, init),
            "vocab_size": settings.vocab_size or vocab_size,
            "min_df": settings.min_df or min_df,
            "frequent_words": settings.frequent_words or frequent,
        }
    )


def resolve_stemmer(settings: TrainSettings, init: Bundle | None = None) -> str:
    """--stemmer where given, a warm start's (its vocabulary is kept), else English but where the words must
    stay as they are (correlated hashing, two languages)."""
    if init is not None:
        own = init.vocab.stemmer or NO_STEMMER
        if settings.kind == "cfh" and own != NO_STEMMER:
            raise ValueError(
                f"--init-from {init.path} stems its words with {own}, and --kind cfh hashes the words themselves: "
                "warm-start from a model trained with --stemmer none"
            )
        if settings.stemmer not in (None, own):
            raise ValueError(
                f"--init-from {init.path} stems its words with {own}: a warm start keeps its vocabulary, "
                f"so --stemmer {settings.stemmer} cannot apply"
            )
        return own
    if settings.stemmer is not None:
        return settings.stemmer
    return NO_STEMMER if settings.kind == "cfh" or settings.query_vocab_size > 0 else DEFAULT_STEMMER


# Pairs cut from the corpus (--self-pairs) on the BM25 base: what measured best on SciFact's 809 labelled train
# claims, none of them seen by training (docs/results/without-labels.md); --lr, --margin, --dims override.
SELF_PAIR_RECIPE: dict[str, float | int] = {"lr": 0.01, "margin": 4.0, "n_dims": 64}


def resolve_recipe(settings: TrainSettings) -> TrainSettings:
    """The settings with the no-label or the click recipe's values where the user gave none (after resolve_lexical).

    No labels: the margin was the lever (0.2, 1, 2, 4, 8, 16 tried): from 4 up every triple stays in the loss
    over the steps validation keeps, so 4, 8 and 16 gave the same model, the best of the sweep.
    Clicks on the BM25 base (training.click_recipe says why each value): U's smaller random start, three seeds
    folded, and, where neither --epochs nor --max-minutes was given, the loop's epochs instead of the 10-minute
    budget (which three members would spend three times over).
    """
    if settings.kind != "lowrank" or settings.lexical != "bm25":
        return settings
    budget: dict[str, float | None] = {}
    if settings.self_pairs is not None:
        recipe = SELF_PAIR_RECIPE
    elif settings.clicks is not None and settings.init_from is None:
        alone = settings.queries is None and settings.valid_clicks is None and settings.pages is None
        recipe = CLICK_RECIPE.model_defaults(search_clicks_alone=alone)
        if settings.encoder is not None:  # a hybrid model learns λ in one run (training.hybrid): no ensemble, and
            recipe["ensemble"] = 1  # its budget was never measured against the loop's: it keeps the default
        elif not {"epochs", "max_minutes"} & settings.model_fields_set:
            budget = {"epochs": CLICK_RECIPE.epochs, "max_minutes": None}
    else:
        return settings
    unset = {name: value for name, value in recipe.items() if name not in settings.model_fields_set} | budget
    return settings.model_copy(update=unset) if unset else settings


def lexical_choice(settings: TrainSettings) -> Bm25 | None:
    """The BM25 parameters of a new vocabulary (resolved settings), or None for tf-idf."""
    return Bm25(k1=settings.bm25_k1, b=settings.bm25_b) if settings.lexical == "bm25" else None


def no_gain_note(settings: TrainSettings, result: TrainResult) -> str:
    """What `ssi train --self-pairs` says when its pairs taught nothing over step 0 (training.trainer)."""
    base = (settings.lexical or DEFAULT_LEXICAL).upper() if settings.lexical != "tfidf" else "tf-idf"
    metric = result.best_metrics.get("map")
    at_start = f" (MAP {metric:.4f})" if metric is not None else ""
    return (
        f"no gain: validation never beat step 0{at_start} in {settings.base_patience} validations and "
        f"{settings.base_patience_minutes:g} minutes, so training stopped at step {result.steps} and exported the "
        f"step-0 model. Without labelled pairs the model equals its {base} base; the way up is the service's "
        "click log: ssi train --clicks <data-dir>/stores/<collection>/events.sqlite"
    )


def run_training(
    settings: TrainSettings, show_progress: bool = True, echo: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Train and export; `echo` hears what the run has to say on the way (click debiasing, an early stop).

    The same lines are in the summary's "notes".
    """
    if settings.ray is not None:  # data-parallel on Ray Train: the only path that imports Ray
        from training.ray_train import train_on_ray

        return train_on_ray(settings, show_progress)
    started = time.perf_counter()
    init = load_bundle(settings.init_from) if settings.init_from is not None else None
    settings = resolve_recipe(resolve_lexical(settings, init))
    if settings.encoder is not None:
        with PreparedEncoder(
            settings.encoder, settings.threads, settings.encoder_precision, settings.query_model
        ) as prepared:
            if not has_pairs(settings):
                from training.day_one import train_day_one

                return train_day_one(settings, prepared, started)
            return _run(settings, init, started, echo, show_progress, prepared)
    return _run(settings, init, started, echo, show_progress, None)


def has_pairs(settings: TrainSettings) -> bool:
    """Whether the settings name something to learn from: pairs, qrels, clicks or self-made pairs."""
    return any(x is not None for x in (settings.pairs, settings.qrels, settings.clicks, settings.self_pairs))


def _run(
    settings: TrainSettings,
    init: Bundle | None,
    started: float,
    echo: Callable[[str], None] | None,
    show_progress: bool,
    prepared: PreparedEncoder | None,
) -> dict[str, Any]:
    data = load_data(settings, init)
    notes = list(data.notes)
    for note in notes:
        if echo is not None:
            echo(note)
    if data.train.weights is not None and fitted_kind(settings.kind) is not None:
        notes.append(f"--kind {settings.kind} fits its pairs unweighted: the click weights are not used")
        if echo is not None:
            echo(notes[-1])
    loaded = time.perf_counter()
    docs = data.vocab.doc_matrix(data.X_docs, ids=data.doc_ids)
    fitted = fitted_kind(settings.kind)
    stream_info: dict[str, Any] = {}
    if fitted is not None:
        if data.stream is not None:
            raise ValueError(f"--kind {settings.kind} fits on pairs held in memory: stream pairs with an SGD kind")
        context = FitContext(
            data, settings, docs, build_validator(data, docs, settings), init.form if init is not None else None,
            show_progress,
        )  # fmt: skip
        ready = time.perf_counter()
        result = fitted().fit(context)
    elif settings.ensemble > 1:
        ready = time.perf_counter()
        result = train_ensemble(data, settings, docs, init, show_progress)
        notes.append(ensemble_note(settings, result))
        if echo is not None:
            echo(notes[-1])
    else:
        if prepared is not None and settings.finetune_encoder:
            device = str(resolve_device(settings.device))
            prepared.finetune(data, settings.finetune_encoder, settings.seed, device)
        if prepared is not None:
            prepared.cut([d.full_text for d in data.docs], settings.sentence_dims)
        sentence = SentenceTraining.of(prepared, data, settings.lr) if prepared is not None else None
        trainer = Trainer(data, settings, docs=docs, init=init.form if init is not None else None, sentence=sentence)
        trainer.validator = build_validator(
            data, docs, settings, trainer.lexical.cached if trainer.lexical is not None else None
        )
        if sentence is not None and trainer.validator is not None and prepared is not None:
            # The validation queries' e through the cache: the same texts come back run after run.
            queries = encode_corpus(prepared.for_queries, trainer.validator.texts)
            trainer.validator.sentence = (queries, sentence.doc_vectors)
        ready = time.perf_counter()
        result = trainer.run(show_progress=show_progress)
        stream_info = stream_summary(trainer)
        if sentence is not None and prepared is not None:
            weight = result.best_metrics.get(SENTENCE_WEIGHT, sentence.weight)
            prepared.weighted(weight, LEARNED_RULE)
    if result.stopped_without_gain:  # a lone run's, or every member's of an ensemble
        notes.append(no_gain_note(settings, result))
        if echo is not None:
            echo(notes[-1])
    summary = finish_training(
        settings,
        data,
        result,
        init,
        stream_info,
        seconds=(loaded - started, ready - loaded),
        started=started,
        sentence=prepared.folder if prepared is not None else None,
    )
    return {**summary, "notes": notes} if notes else summary


def train_ensemble(
    data: TrainingData, settings: TrainSettings, docs: DocMatrix, init: Bundle | None, show_progress: bool
) -> TrainResult:
    """--ensemble K: K members from seeds seed, seed + 1, ... on the same data (and validation split), each its best
    step, folded into one model of N rows (training.ensemble); validated like a member where there is validation."""
    members: list[TrainResult] = []
    validator = None
    for k in range(settings.ensemble):
        member = settings.model_copy(update={"seed": settings.seed + k})
        trainer = Trainer(data, member, docs=docs, init=init.form if init is not None else None)
        if validator is None:
            validator = build_validator(
                data, docs, settings, trainer.lexical.cached if trainer.lexical is not None else None
            )
        trainer.validator = validator
        members.append(trainer.run(show_progress=show_progress))
    forms = [m.best for m in members]
    if not all(isinstance(f, LowRank) for f in forms):
        raise ValueError("--ensemble folds low-rank models: --kind lowrank")
    folded = fold_lowrank(forms, settings.n_dims)  # type: ignore[arg-type]
    first = members[0]
    metrics = validator(folded) if validator is not None else {}
    return TrainResult(
        best=folded,
        best_metrics=metrics,
        best_step=first.best_step,
        steps=sum(m.steps for m in members),
        epochs=sum(m.epochs for m in members),
        triples=sum(m.triples for m in members),
        seconds=sum(m.seconds for m in members),
        history=first.history,  # the plot draws one run; every member's summary is in `members`
        stopped_without_gain=all(m.stopped_without_gain for m in members),
        device=first.device,
        members=[
            {"seed": settings.seed + i, "best_step": one.best_step, "valid": one.best_metrics}
            for i, one in enumerate(members)
        ],
    )


def ensemble_note(settings: TrainSettings, result: TrainResult) -> str:
    """What `ssi train --ensemble` says: each member's validation and the folded model's."""
    key = "map"
    parts = [f"seed {m['seed']}: {m['valid'][key]:.4f}" for m in result.members if key in m["valid"]]
    folded = f"; folded: {result.best_metrics[key]:.4f}" if key in result.best_metrics else ""
    shown = f" (validation MAP {', '.join(parts)}{folded})" if parts else ""
    return f"ensemble of {settings.ensemble} low-rank models folded into one of N = {settings.n_dims}{shown}"


def stream_summary(trainer: Trainer) -> dict[str, Any]:
    """What a streamed run read: passes over the file and the most pairs its buffer held (empty in memory)."""
    buffer = getattr(trainer.sampler, "buffer", None)
    if buffer is None:
        return {}
    return {"shuffle_buffer": buffer.stream.capacity, "passes": buffer.passes, "pairs_held_peak": buffer.peak}


def _task_name(settings: TrainSettings, data: TrainingData) -> str:
    if data.doc_doc:
        return "document-document"
    if settings.clicks is not None:
        return "queries and clicks" if settings.queries is not None else "adverts"
    return "queries"


def finish_training(
    settings: TrainSettings,
    data: TrainingData,
    result: TrainResult,
    init: Bundle | None,
    stream_info: dict[str, Any],
    *,
    seconds: tuple[float, float],
    started: float,
    sentence: Path | None = None,
) -> dict[str, Any]:
    """Export the bundle of a finished run (and its history plot); the summary `ssi train` prints.

    `seconds`: (load and featurize, prepare); data-parallel training's rank 0 calls it too.
    """
    training_info: dict[str, Any] = {
        "config": settings.model_dump(mode="json"),
        "steps": result.steps,
        "epochs": round(result.epochs, 3),
        "triples": result.triples,
        "train_seconds": round(result.seconds, 2),
        "triples_per_second": round(result.triples_per_second, 1),
        "best_step": result.best_step,
        "init_from": None if init is None else {"bundle": str(init.path), "content_hash": init.content_hash},
        "threads": settings.threads,
        "device": result.device,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "history": result.history,
        **({"ensemble": result.members} if result.members else {}),
    }
    data_info: dict[str, Any] = {
        "fingerprint": data.fingerprint,
        "n_docs": len(data.docs),
        "n_queries": len(data.queries),
        "train_pairs": data.train_size,
        "train_pairs_dropped": data.train.dropped_summary(),
        "valid_pairs": data.valid.size if data.valid is not None else 0,
        "task": _task_name(settings, data),
        "unseen": {
            "share": settings.unseen_docs,
            "seed": settings.seed,
            "documents": data.unseen_docs,
            "training_pairs_left_out": data.unseen_pairs,
        },  # fmt: skip
    }
    if stream_info:
        data_info["stream"] = stream_info
    if data.clicks_info is not None:
        data_info["clicks"] = data.clicks_info
    if data.train.weights is not None:
        data_info["train_pairs_merged"] = data.train.n_merged
    manifest = export_bundle(
        settings.out,
        vocab=data.vocab,
        form=result.best,
        training=training_info,
        data=data_info,
        metrics={"valid": result.best_metrics},
        sentence=sentence,
    )
    plot = write_history_plot(result.history, settings.out / HISTORY_PLOT, f"ssi train --kind {settings.kind}")
    finished = time.perf_counter()
    return {
        "bundle": str(settings.out),
        "history_plot": str(plot) if plot is not None else None,
        "content_hash": manifest.content_hash,
        "form": manifest.form,
        **{k: v for k, v in result.best.sizes.items() if k != "D"},
        "D": data.vocab.size,
        "valid": result.best_metrics,
        "best_step": result.best_step,
        "steps": result.steps,
        "triples": result.triples,
        "triples_per_second": round(result.triples_per_second, 1),
        "device": result.device,
        "seconds": {
            "load_and_featurize": round(seconds[0], 1),
            "prepare": round(seconds[1], 1),
            "train": round(result.seconds, 1),
            "total": round(finished - started, 1),
        },
        "dropped_pairs": data.train.dropped_summary(),
        **({"stream": stream_info} if stream_info else {}),
    }
