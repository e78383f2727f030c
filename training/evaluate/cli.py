"""`ssi eval` and `ssi rank`: the evaluation harness and the TREC ranker on the command line.

Errors in the user's inputs (a missing or malformed file, an unusable bundle, a bad option) print
one line, `error: <what and where>`, and exit with status 2, never a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ssi.bundle import Bundle, BundleError, load_bundle
from ssi.corpus import DataFileError, read_beir_queries, read_corpus, read_pairs, read_qrels, read_query_set
from ssi.open_vocab import STATISTICS, Statistics
from ssi.records import Document
from ssi.stemming import DEFAULT_STEMMER, NO_STEMMER, check_stemmer
from ssi.vocab import Vocabulary
from training.evaluate.baselines import BASELINES, LSI_K_GRID, BaselineContext, parse_baselines
from training.evaluate.features import TextFeatures, TokenTable
from training.evaluate.form_scorer import FormScorer, same_vocabulary
from training.evaluate.harness import evaluate
from training.evaluate.rank import RankError, write_trec_run
from training.evaluate.report import rich_table, write_reports
from training.evaluate.scorer import DEFAULT_BLOCK, Scorer
from training.evaluate.tasks import RetrievalTask, TaskError, beir_task, doc_doc_task, filtered_rows, keyword_task
from training.evaluate.tuning import build_baseline
from training.splits import DEFAULT_SPLIT_SEED, DEFAULT_VALID_FRACTION, split_by_query, unseen_documents

DATA = "Data"
TASK = "Task"
SCORERS = "Scorers"
RUN = "Run"
OPEN_VOCAB_HELP = (
    "Let a BM25 bundle's lexical part also count the corpus's words it never saw (docs/guides/open-vocabulary.md); "
    "on by default (--closed-vocab: the bundle's words only)."
)
STATISTICS_HELP = (
    "With --open-vocab, whose idf and avg_len the lexical part uses: 'bundle' (its training corpus's, for the words "
    "it knows) or 'collection' (the corpus ranked here, for every word: its lexical part is BM25 over that corpus; "
    "docs/guides/open-vocabulary.md)."
)
SPLITS = ("all", "valid", "train")


def _statistics(statistics: str, open_vocab: bool) -> Statistics:
    """The --statistics value checked: one of STATISTICS, and 'collection' only with --open-vocab."""
    if statistics not in STATISTICS:
        raise UsageError(f"--statistics: one of {', '.join(STATISTICS)}, got {statistics!r}")
    if statistics != "bundle" and not open_vocab:
        raise UsageError("--statistics collection is a rule of the open vocabulary: not with --closed-vocab")
    return statistics  # type: ignore[return-value]


class UsageError(ValueError):
    """Options that do not make one evaluation; the message says which."""


@contextmanager
def _clean_errors() -> Iterator[None]:
    """Turn the user's input errors into one line on stderr and exit status 2."""
    try:
        yield
    except (DataFileError, BundleError, TaskError, RankError, UsageError) as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    except OSError as exc:  # e.g. an output folder that cannot be written
        typer.secho(f"error: {exc.filename or ''}: {exc.strerror or exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None


def _build_task(
    docs: list[Document],
    *,
    pairs: Path | None,
    eval_pairs: Path | None,
    keywords: int,
    queries: Path | None,
    qrels: Path | None,
    split: str,
    valid_share: float,
    split_seed: int,
    seed: int,
    tokens: TokenTable,
) -> RetrievalTask:
    link_mode = eval_pairs is not None
    beir_mode = queries is not None or qrels is not None
    if link_mode == beir_mode:
        raise UsageError("give either --eval-pairs [--pairs] (document links) or --queries with --qrels (BEIR)")
    if link_mode:
        if split != "all":
            raise UsageError("--split is for BEIR qrels; document links come split already")
        if keywords < 0:
            raise UsageError(f"--keywords must be 0 (whole documents) or positive, got {keywords}")
        judged = read_pairs(eval_pairs)
        trained = read_pairs(pairs) if pairs is not None else []
        if keywords:
            return keyword_task(docs, judged, trained, n_words=keywords, seed=seed, tokens=tokens)
        return doc_doc_task(docs, judged, trained)
    if queries is None or qrels is None:
        raise UsageError("--queries and --qrels go together")
    if keywords:
        raise UsageError("--keywords is for document links, not BEIR queries")
    if split not in SPLITS:
        raise UsageError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    judgments = read_qrels(qrels)
    name = "beir"
    if split != "all":
        try:
            train_part, valid_part = split_by_query(judgments, valid_share, split_seed)
        except ValueError as exc:
            raise UsageError(f"{qrels}: cannot split: {exc}") from None
        judgments = valid_part if split == "valid" else train_part
        name = f"beir-{split}"
    # --pairs with queries (e.g. the training clicks of an adverts log, as qrels): filtered setting.
    known = read_qrels(pairs) if pairs is not None else []
    return beir_task(docs, read_beir_queries(queries), judgments, name=name, known=known)


@contextmanager
def _progress(console: Console) -> Iterator[Callable[[str, int, int], None]]:
    """A rich progress bar per scorer, fed by the harness's (name, blocks done, blocks) reports."""
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    ) as bar:  # fmt: skip
        bars: dict[str, TaskID] = {}

        def report(name: str, done: int, total: int) -> None:
            if name not in bars:
                bars[name] = bar.add_task(f"scoring {name}", total=total)
            bar.update(bars[name], completed=done)

        yield report


def eval_command(
    corpus: Annotated[
        Path, typer.Option(help="Corpus JSONL (gzip or not): id (or _id), title, text.", rich_help_panel=DATA)
    ],
    out: Annotated[Path, typer.Option(help="Folder for results.json and results.md.", rich_help_panel=DATA)],
    bundle: Annotated[
        list[Path] | None,
        typer.Option(
            help="Model bundle to evaluate, ranked by its form's reference score; repeat it to compare several "
            "(rows 'ssi-FORM', or the folder name when two share a form). The baselines use the first one's "
            "vocabulary. Without it only the baselines run.",
            rich_help_panel=DATA,
        ),
    ] = None,
    eval_pairs: Annotated[
        Path | None,
        typer.Option(
            "--eval-pairs",
            "--valid-pairs",
            help="Links 'query_id<TAB>doc_id' of the split evaluated: the relevant documents.",
            rich_help_panel=TASK,
        ),
    ] = None,
    pairs: Annotated[
        Path | None,
        typer.Option(
            help="Training links (or, with --queries, training qrels such as an adverts log's clicks): left out "
            "of each query's ranking (the filtered setting).",
            rich_help_panel=TASK,
        ),
    ] = None,
    keywords: Annotated[
        int,
        typer.Option(
            help="Cut each query document to this many random words (0: whole document).", rich_help_panel=TASK
        ),
    ] = 0,
    queries: Annotated[
        Path | None,
        typer.Option(
            help="BEIR queries JSONL (_id, text, optional filter: that query ranks only the documents matching it, "
            "docs/guides/fields.md); use with --qrels.",
            rich_help_panel=TASK,
        ),
    ] = None,
    qrels: Annotated[
        Path | None,
        typer.Option(help="BEIR qrels TSV (query-id, corpus-id, score): the relevant documents.", rich_help_panel=TASK),
    ] = None,
    split: Annotated[
        str,
        typer.Option(
            help="Which queries of --qrels: all, or the valid/train side of the by-query split `ssi train` uses.",
            rich_help_panel=TASK,
        ),
    ] = "all",
    valid_share: Annotated[
        float, typer.Option(help="Share of qrels queries on the valid side (as ssi train).", rich_help_panel=TASK)
    ] = DEFAULT_VALID_FRACTION,
    split_seed: Annotated[
        int, typer.Option(help="Seed of the by-query split (ssi train uses its --seed).", rich_help_panel=TASK)
    ] = DEFAULT_SPLIT_SEED,
    unseen_docs: Annotated[
        float,
        typer.Option(
            help="Unseen-documents setting: keep only the queries among the seeded share of documents (with "
            "--split-seed) that `ssi train --unseen-docs` left out of training (document links only; 0: off).",
            rich_help_panel=TASK,
        ),
    ] = 0.0,
    max_queries: Annotated[
        int, typer.Option(help="Evaluate a fixed-seed sample of this many queries (0: all).", rich_help_panel=TASK)
    ] = 0,
    seed: Annotated[int, typer.Option(help="Seed of keyword sampling and query samples.", rich_help_panel=TASK)] = 0,
    baselines: Annotated[
        str,
        typer.Option(help=f"Comma-separated baselines ({', '.join(BASELINES)}), or 'none'.", rich_help_panel=SCORERS),
    ] = ",".join(BASELINES),
    tune: Annotated[
        bool,
        typer.Option(
            help="Tune baseline knobs (BM25 k1/b, LSI k, α, feedback) on this split with a small grid.",
            rich_help_panel=SCORERS,
        ),
    ] = True,
    tune_queries: Annotated[
        int, typer.Option(help="Queries (fixed-seed sample) used for tuning (0: all).", rich_help_panel=SCORERS)
    ] = 1000,
    lsi_k: Annotated[
        str,
        typer.Option(
            help="LSI dimensions tried (comma-separated); the largest sets the SVD size.", rich_help_panel=SCORERS
        ),
    ] = ",".join(str(k) for k in LSI_K_GRID),
    vocab_size: Annotated[
        int,
        typer.Option(
            help="Baselines' vocabulary size without --bundle (with it, the bundle's).", rich_help_panel=SCORERS
        ),
    ] = 30000,
    stemmer: Annotated[
        str | None,
        typer.Option(
            help="Snowball stemmer of the baselines' words (english, porter, … or none). Default: the first "
            f"bundle's, without --bundle {DEFAULT_STEMMER} (what `ssi train` uses when not told).",
            rich_help_panel=SCORERS,
        ),
    ] = None,
    block_size: Annotated[
        int, typer.Option(help="Queries scored at once (memory ≈ block × documents × 4 bytes).", rich_help_panel=RUN)
    ] = DEFAULT_BLOCK,
    open_vocab: Annotated[
        bool, typer.Option("--open-vocab/--closed-vocab", help=OPEN_VOCAB_HELP, rich_help_panel=SCORERS)
    ] = True,
    statistics: Annotated[str, typer.Option(help=STATISTICS_HELP, rich_help_panel=SCORERS)] = "bundle",
) -> None:
    """Score a bundle and the classic baselines on one split, in one process, and save the table.

    Document links: --eval-pairs VALID [--pairs TRAIN] [--keywords N]. BEIR: --queries Q --qrels QRELS
    [--split valid]. Prints MAP, P@10, NDCG@10 and rank loss (mean ± standard error over queries) and
    MAP relative to tf-idf, and writes OUT/results.json and OUT/results.md.
    """
    console = Console()
    if not console.is_terminal:  # a log file: no terminal width to fit, keep each row on one line
        console = Console(width=180)
    with _clean_errors():
        started = time.perf_counter()
        names = _parse_names(baselines)
        grid = _parse_ints(lsi_k, "--lsi-k")
        bundles = list(bundle or [])
        if not bundles and not names:
            raise UsageError("nothing to evaluate: give --bundle or at least one baseline")
        chosen = _statistics(statistics, open_vocab)
        if block_size < 1 or vocab_size < 1 or max_queries < 0 or tune_queries < 0:
            raise UsageError("--block-size and --vocab-size must be positive, --max-queries and --tune-queries ≥ 0")
        models = [load_bundle(path) for path in bundles]
        model = models[0] if models else None
        if stemmer is None:
            stemmer = (model.vocab.stemmer or NO_STEMMER) if model is not None else DEFAULT_STEMMER
        try:
            check_stemmer(stemmer)
        except ValueError as exc:
            raise UsageError(f"--stemmer: {exc}") from None
        docs = read_corpus(corpus)
        tokens = TokenTable()
        task = _build_task(
            docs, pairs=pairs, eval_pairs=eval_pairs, keywords=keywords, queries=queries, qrels=qrels,
            split=split, valid_share=valid_share, split_seed=split_seed, seed=seed, tokens=tokens,
        )  # fmt: skip
        if unseen_docs:
            task = _unseen_queries(task, docs, unseen_docs, split_seed, doc_queries=queries is None)
        task = task.subset(max_queries, seed)
        for line in task.stats.problems():
            typer.secho(f"warning: {line}", err=True, fg=typer.colors.YELLOW)
        read_seconds = time.perf_counter() - started

        doc_texts = [d.full_text for d in docs]
        token_ids = tokens.ids(doc_texts)
        if model is not None and model.vocab.symmetric and (model.vocab.stemmer or NO_STEMMER) == stemmer:
            vocab = model.vocab
        else:  # the tf-idf baselines weigh by tf-idf, also beside a BM25 bundle
            vocab = Vocabulary.build_from_tokens(
                ([tokens.words[i] for i in ids.tolist()] for ids in token_ids), max_words=vocab_size, stemmer=stemmer
            )
        features = TextFeatures(vocab, tokens)
        ctx = BaselineContext(docs, features, lsi_k_grid=tuple(grid), seed=seed, block_size=block_size)
        scorers: dict[str, Scorer] = {}
        for name, loaded in _model_rows(models).items():
            # A bundle with the baselines' vocabulary shares their document matrix.
            if same_vocabulary(loaded.vocab, vocab):
                own, shared = features, (ctx.tfidf.docs if names else None)
            else:
                own, shared = TextFeatures(loaded.vocab, tokens), None
            scorers[name] = FormScorer.from_bundle(
                loaded,
                docs,
                features=own,
                doc_matrix=shared if chosen == "bundle" else None,  # collection statistics weigh their own rows
                block_size=block_size,
                open_vocab=open_vocab,
                statistics=chosen,
            )
        tune_task = task.subset(tune_queries, seed) if tune else None
        tuning: dict[str, Any] = {}
        if names and "tfidf" not in names:
            names = ["tfidf", *names]  # the reference every ratio is read against
        for name in names:
            typer.echo(f"fitting {name}" + (" (tuning)" if tune_task is not None else ""), err=True)
            scorer, result = build_baseline(name, ctx, tune_on=tune_task)
            scorers[name] = scorer
            tuning[name] = result.to_json()
        fit_seconds = time.perf_counter() - started - read_seconds

        with _progress(Console(stderr=True)) as progress:
            table = evaluate(task, scorers, block_size=block_size, progress=progress)
        total = time.perf_counter() - started
        table.notes.update(
            {
                "bundles": {name: str(loaded.path) for name, loaded in _model_rows(models).items()},
                "vocabulary": {
                    "source": "bundle" if model is not None and vocab is model.vocab else "corpus",
                    "size": vocab.size,
                },
                "tuned_on": None if tune_task is None else {"queries": tune_task.n_queries, "seed": seed},
                # only when asked: a closed-vocabulary run writes the notes it always wrote
                **({"open_vocab": True} if open_vocab and models else {}),
                **({"open_vocab_statistics": chosen} if chosen != "bundle" and models else {}),
                "timings_seconds": {
                    "read": round(read_seconds, 2),
                    "fit_and_tune": round(fit_seconds, 2),
                    "evaluate": round(total - read_seconds - fit_seconds, 2),
                    "total": round(total, 2),
                },
            }
        )
        console.print(rich_table(table))
        paths = write_reports(table, out, extra={"tuning": tuning})
        console.print(f"total {total:.1f}s; wrote {', '.join(str(p) for p in paths)}", highlight=False)


def _unseen_queries(
    task: RetrievalTask, docs: list[Document], share: float, seed: int, *, doc_queries: bool
) -> RetrievalTask:
    """The task's queries among the documents held out of training (training.splits.unseen_documents)."""
    if not doc_queries:
        raise UsageError("--unseen-docs applies to document links (--eval-pairs), where queries are documents")
    if not 0.0 < share < 1.0:
        raise UsageError(f"--unseen-docs must be in (0, 1), got {share}")
    unseen = unseen_documents([d.id for d in docs], share, seed)
    rows = [i for i, query_id in enumerate(task.query_ids) if query_id in unseen]
    if not rows:
        raise UsageError("no query of the evaluated links is among the unseen documents")
    return replace(task.select(rows), name=f"{task.name}-unseen")


def _model_rows(models: list[Bundle]) -> dict[str, Bundle]:
    """Row name of each bundle: 'ssi-FORM', or the folder name when forms repeat."""
    forms = [m.manifest.form for m in models]
    rows: dict[str, Bundle] = {}
    for loaded in models:
        name = f"ssi-{loaded.manifest.form}" if forms.count(loaded.manifest.form) == 1 else loaded.path.name
        if name in rows:
            raise UsageError(f"--bundle: two bundles would both be reported as {name!r}; give distinct folder names")
        rows[name] = loaded
    return rows


def _parse_names(spec: str) -> list[str]:
    try:
        return parse_baselines(spec)
    except ValueError as exc:
        raise UsageError(f"--baselines: {exc}") from None


def _parse_ints(spec: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{flag}: expected comma-separated integers, got {spec!r}") from None
    if not values or min(values) < 1:
        raise UsageError(f"{flag}: expected positive integers, got {spec!r}")
    return values


def rank_command(
    bundle: Annotated[Path, typer.Option(help="Model bundle folder.")],
    corpus: Annotated[Path, typer.Option(help="Corpus JSONL (gzip or not): id (or _id), title, text.")],
    queries: Annotated[
        Path,
        typer.Option(
            help="Queries: a TSV 'query_id<TAB>query text' per line, or JSON lines (.jsonl) with _id, text and "
            "an optional filter (docs/guides/fields.md): that query ranks only the documents matching it."
        ),
    ],
    out: Annotated[Path, typer.Option(help="TREC run file to write: 'qid Q0 docid rank score tag'.")],
    k: Annotated[int, typer.Option("--k", help="Documents per query (ranks 1..k).")] = 1000,
    open_vocab: Annotated[bool, typer.Option("--open-vocab/--closed-vocab", help=OPEN_VOCAB_HELP)] = True,
    statistics: Annotated[str, typer.Option(help=STATISTICS_HELP)] = "bundle",
) -> None:
    """Rank every query against the corpus by the exact SSI score and write a TREC run file.

    Order: score descending, ties by corpus position. The score is f(q, d) = (Uq)·(Vd) + Σ wᵢ qᵢ dᵢ.
    """
    with _clean_errors():
        if k <= 0:
            raise UsageError(f"--k must be positive, got {k}")
        chosen = _statistics(statistics, open_vocab)
        model = load_bundle(bundle)
        docs = read_corpus(corpus)
        asked = read_query_set(queries)
        if not asked:
            raise DataFileError(queries, None, "no queries")
        seen: set[str] = set()
        for query in asked:
            if query.id in seen:
                raise DataFileError(queries, None, f"query id {query.id!r} appears twice")
            seen.add(query.id)
        allowed = filtered_rows(docs, asked)  # checked before anything is scored
        scorer = FormScorer.from_bundle(model, docs, open_vocab=open_vocab, statistics=chosen)
        lines = write_trec_run(
            out, scorer, asked, [d.id for d in docs], k, tag=f"ssi-{model.manifest.form}", allowed=allowed
        )
        typer.echo(f"wrote {lines} lines for {len(asked)} queries to {out}", err=True)
