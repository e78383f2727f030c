"""The README's results table: every kind beside the baselines, from one command, at one training budget.

    python -m benchmarks.results_table --data ../shared/data/wikispeedia --out runs/table --minutes 3

For each setting it trains every kind with `ssi train` (the same budget of wall minutes each: a
kind warm-started from another gets its own budget on top, and says so), then scores all of them
and the baselines in one `ssi eval` run per task, so every row of a column comes from one process
on the same queries:

- `docdoc`: document–document links (validation, filtered); the same bundles also answer
  `keywords10`, queries cut to 10 random words of the query document (seed 0);
- `unseen`: trained with `--unseen-docs 0.1`, scored on the queries among those held-out documents;
- `crosslang`: queries in a seeded pseudo-language (`ssi crosslang`), documents in English; only the
  kinds whose form allows two vocabularies, beside "translate, then tf-idf/BM25" on the queries
  translated back word by word.

It writes `results.md` (the tables), `results.json` (every figure) and `commands.sh` (every command it
ran, in order, to reproduce any row alone). Runs resume: a bundle already trained with the same
command is kept, so a longer budget or a new kind reruns only what changed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from training.evaluate.metrics import LABELS, MAP, METRICS

FREQUENT = ("--frequent-words", "10000")


@dataclass(frozen=True)
class Recipe:
    """One row: a kind and the flags it trains with; `init` names the row whose bundle it starts from."""

    row: str
    kind: str
    flags: tuple[str, ...] = ()
    init: str | None = None
    crosslang: bool = False  # whether its form allows two vocabularies (no shared diagonal needed)
    unseen: bool = True  # whether the unseen-documents setting trains it too (the slow EM kinds: no)
    note: str = ""


RECIPES: tuple[Recipe, ...] = (
    Recipe("SSI low rank", "lowrank", FREQUENT, crosslang=True),
    Recipe("SSI symmetric", "symmetric", FREQUENT),
    Recipe("SSI without identity", "noidentity", FREQUENT, crosslang=True),
    Recipe("SSI diagonal", "diagonal"),
    Recipe("SSI full W (D = 5,000)", "fullw", ("--vocab-size", "5000"), note="W is D × D: D cut to 5,000 words"),
    Recipe(
        "PSI degree 3",
        "psi3",
        (*FREQUENT, "--warm-lr-scale", "0", "--lr", "0.003", "--eval-every", "25"),
        init="SSI low rank",
        crosslang=True,
        note="warm-started from SSI low rank",
    ),  # fmt: skip
    Recipe("hash kernels (H = 2²⁴)", "hashkernel", ("--hash-size", "16777216", "--batch-queries", "64")),
    Recipe(
        "correlated feature hashing",
        "cfh",
        (*FREQUENT, "--cfh-ngrams", "1,2"),
        init="SSI low rank",
        note="all words and 2-grams hashed onto the top 10,000; warm-started from SSI low rank",
    ),  # fmt: skip
    Recipe("half-transductive", "halftrans", FREQUENT),
    # Linear projections (paper 003, section 4): cos(A q, B d), combined with the tf-idf cosine at a weight tuned
    # on validation (the "alone" column: the same fit without it).
    Recipe("LSA + tf-idf", "lsa"),
    Recipe("CL-LSA + tf-idf", "cl-lsa", crosslang=True),
    Recipe("OPCA + tf-idf", "opca", crosslang=True),
    Recipe("S2Net + tf-idf", "s2net", crosslang=True),
    # Language-model kinds (paper 003, section 3): mixed with the unigram document model, λ tuned on validation.
    Recipe("PLSA + unigram", "plsa", ("--dims", "50"), unseen=False),
    Recipe("BLTM + unigram", "bltm", ("--dims", "50", "--pair-words", "50"), unseen=False),
    Recipe("BLTM-PR + unigram", "bltm-pr", ("--dims", "50", "--pair-words", "50"), crosslang=True, unseen=False),
    Recipe("BLTM-PR-1V + unigram", "bltm-1v", ("--dims", "50", "--pair-words", "50"), unseen=False),
    Recipe("word translation (IBM 1)", "translation", ("--pair-words", "50")),
)
SETTINGS = ("docdoc", "unseen", "crosslang")
BASELINES = "tfidf,bm25,lsi,lsi-mix,qe"


@dataclass
class Layout:
    """Where a run keeps its files, and the data it reads."""

    data: Path
    out: Path
    crosslang_task: Path = field(init=False)

    def __post_init__(self) -> None:
        self.crosslang_task = self.out / "crosslang-task"

    def bundle(self, setting: str, recipe: Recipe) -> Path:
        slug = "".join(c if c.isalnum() else "-" for c in recipe.row.lower()).strip("-")
        while "--" in slug:
            slug = slug.replace("--", "-")
        return self.out / "bundles" / setting / slug


class Runner:
    """Runs `ssi` commands, logs each one to commands.sh and its output beside the results."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.ssi = str(Path(sys.executable).with_name("ssi"))
        self.log = out / "commands.sh"
        out.mkdir(parents=True, exist_ok=True)
        if not self.log.exists():
            self.log.write_text("#!/usr/bin/env bash\n# Written by benchmarks/results_table.py, in run order.\n")

    def __call__(self, args: Sequence[str], log_name: str) -> str:
        command = [self.ssi, *args]
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(shlex.join(["ssi", *args]) + "\n")
        typer.echo(f"$ ssi {' '.join(args[:1])} … ({log_name})", err=True)
        logs = self.out / "logs"
        logs.mkdir(exist_ok=True)
        result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
        (logs / f"{log_name}.out").write_text(result.stdout + "\n--- stderr ---\n" + result.stderr, encoding="utf-8")
        if result.returncode != 0:
            raise RuntimeError(f"ssi {args[0]} failed ({log_name}): {result.stderr.strip()[-2000:]}")
        return result.stdout


def task_flags(layout: Layout, setting: str) -> list[str]:
    """The data flags of `ssi train` for a setting."""
    W = layout.data
    corpus = ["--corpus", str(W / "docs.jsonl.gz")]
    if setting == "crosslang":
        X = layout.crosslang_task
        return [
            *corpus, "--queries", str(X / "queries.jsonl"), "--qrels", str(X / "qrels.train.tsv"),
            "--valid-qrels", str(X / "qrels.valid.tsv"), "--query-vocab-size", "30000",
        ]  # fmt: skip
    flags = [*corpus, "--pairs", str(W / "links.train.tsv.gz"), "--valid-pairs", str(W / "links.valid.tsv.gz")]
    return [*flags, "--unseen-docs", "0.1"] if setting == "unseen" else flags


def train_all(
    layout: Layout, run: Runner, setting: str, recipes: Sequence[Recipe], minutes: float, threads: int
) -> dict[str, dict[str, Any]]:
    """Train each recipe for `setting` (skipping a bundle already made by the same command); their summaries."""
    summaries: dict[str, dict[str, Any]] = {}
    for recipe in recipes:
        out = layout.bundle(setting, recipe)
        flags = list(recipe.flags)
        if setting == "crosslang":  # two vocabularies: the frequent-word cut would keep half of each
            flags = [f for i, f in enumerate(flags) if f != FREQUENT[0] and (i == 0 or flags[i - 1] != FREQUENT[0])]
        init = []
        if recipe.init is not None:
            init = ["--init-from", str(layout.bundle(setting, next(r for r in recipes if r.row == recipe.init)))]
        args = [
            "train", *task_flags(layout, setting), "--kind", recipe.kind, *flags, *init,
            "--max-minutes", f"{minutes:g}", "--threads", str(threads), "--no-progress", "--out", str(out),
        ]  # fmt: skip
        stamp = out.with_name(out.name + ".train.json")
        if stamp.is_file() and (out / "manifest.json").is_file():
            saved = json.loads(stamp.read_text())
            if saved.get("args") == args:
                summaries[recipe.row] = saved
                continue
        started = time.perf_counter()
        stdout = run(args, f"train-{setting}-{out.name}")
        summary = json.loads(stdout[stdout.index("{") :])
        saved = {"args": args, "wall_seconds": round(time.perf_counter() - started, 1), "summary": summary}
        stamp.write_text(json.dumps(saved, indent=2) + "\n")
        summaries[recipe.row] = saved
    return summaries


def evaluate(run: Runner, name: str, args: Sequence[str], out: Path) -> dict[str, Any]:
    run(["eval", *args, "--out", str(out)], f"eval-{name}")
    return json.loads((out / "results.json").read_text())


def bundle_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file() and f.name != "history.png") / 1e6


def rows_of(results: dict[str, Any], bundles: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """The evaluation's scorers keyed by table row: a bundle's row name, else the baseline's name."""
    by_path = {str(p): row for row, p in bundles.items()}
    named = results["notes"].get("bundles", {})
    out: dict[str, dict[str, Any]] = {}
    for scorer, figures in results["scorers"].items():
        out[by_path.get(named.get(scorer, ""), scorer)] = figures
    return out


def alone_map(trained: dict[str, Any] | None) -> str:
    """A combined kind's validation MAP without its tf-idf / unigram part, as its fit measured it."""
    if trained is None:
        return ""
    valid = trained["summary"].get("valid", {})
    alone = valid.get("map_alone")
    return "" if alone is None else f"{alone:.4f}"


def cell(figures: dict[str, Any] | None, metric: str) -> str:
    if figures is None:
        return "—"
    m = figures["metrics"][metric]
    return f"{m['mean']:.4f} ± {m['stderr']:.4f}"


BASELINE_ROWS = {
    "tfidf": "tf-idf cosine", "bm25": "BM25", "lsi": "LSI", "lsi-mix": "α·LSI + (1−α)·tf-idf", "qe": "query expansion",
}  # fmt: skip


def main_table(
    recipes: Sequence[Recipe], tables: dict[str, dict[str, dict[str, Any]]], trained: dict[str, dict[str, Any]],
    layout: Layout,
) -> str:  # fmt: skip
    """Rows: kinds then baselines. Columns: doc–doc metrics, keyword-10 MAP, unseen MAP, training, size."""
    head = [
        "scorer", *(f"doc–doc {LABELS[m]}" for m in METRICS), "10-word keywords MAP", "unseen docs MAP",
        "valid MAP alone", "training (wall)", "bundle",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    names = [r.row for r in recipes] + list(BASELINE_ROWS)
    for name in names:
        docdoc = tables.get("docdoc", {}).get(name)
        if docdoc is None and name in BASELINE_ROWS:
            continue
        summary = trained.get(name)
        recipe = next((r for r in recipes if r.row == name), None)
        minutes = f"{summary['wall_seconds'] / 60:.1f} min" if summary else ""
        size = f"{bundle_mb(layout.bundle('docdoc', recipe)):.0f} MB" if recipe is not None and summary else ""
        label = BASELINE_ROWS.get(name, name)
        cells = [
            label, *(cell(docdoc, m) for m in METRICS), cell(tables.get("keywords10", {}).get(name), MAP),
            cell(tables.get("unseen", {}).get(name), MAP), alone_map(summary), minutes, size,
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def crosslang_table(recipes: Sequence[Recipe], pseudo: dict[str, Any], translated: dict[str, Any]) -> str:
    head = ["scorer", *(LABELS[m] for m in METRICS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [(r.row, pseudo.get(r.row)) for r in recipes if r.crosslang]
    rows += [(f"{BASELINE_ROWS[b]} on the queries as they are", pseudo.get(b)) for b in ("tfidf",)]
    rows += [(f"translate, then {BASELINE_ROWS[b]}", translated.get(b)) for b in ("tfidf", "bm25")]
    for label, figures in rows:
        lines.append("| " + " | ".join([label, *(cell(figures, m) for m in METRICS)]) + " |")
    return "\n".join(lines) + "\n"


def results_table(
    data: Annotated[Path, typer.Option(help="The Wikispeedia folder (read in place).")] = Path(
        "../shared/data/wikispeedia"
    ),
    out: Annotated[Path, typer.Option(help="Folder for bundles, logs and the tables.")] = Path("runs/table"),
    minutes: Annotated[float, typer.Option(help="Training budget of every kind, wall minutes.")] = 3.0,
    threads: Annotated[int, typer.Option(help="Threads of each training.")] = 2,
    kinds: Annotated[str, typer.Option(help="Comma-separated rows' kinds to run (default: all).")] = "",
    settings: Annotated[str, typer.Option(help="Comma-separated settings.")] = ",".join(SETTINGS),
    render_only: Annotated[
        bool, typer.Option(help="Only write results.md again from the run's results.json (no training, no eval).")
    ] = False,
) -> None:
    """Train every kind at one budget and score it beside the baselines on each setting; write the tables."""
    if render_only:
        saved = out / "results.json"
        if not saved.is_file():
            raise typer.BadParameter(f"{saved} does not exist: run the table first")
        render(json.loads(saved.read_text()), RECIPES, Layout(data.resolve(), out.resolve()))
        return
    wanted_kinds = {k for k in kinds.split(",") if k}
    recipes = [r for r in RECIPES if not wanted_kinds or r.kind in wanted_kinds]
    for recipe in list(recipes):  # a warm start needs its source row
        if recipe.init and recipe.init not in {r.row for r in recipes}:
            recipes.insert(0, next(r for r in RECIPES if r.row == recipe.init))
    chosen = [s for s in settings.split(",") if s]
    unknown = sorted(set(chosen) - set(SETTINGS))
    if unknown or not recipes:
        raise typer.BadParameter(f"unknown setting(s) {unknown} or no kind chosen (settings: {', '.join(SETTINGS)})")
    if not (data / "docs.jsonl.gz").is_file():
        raise typer.BadParameter(f"{data} holds no docs.jsonl.gz: give --data the Wikispeedia folder")
    layout = Layout(data.resolve(), out.resolve())
    run = Runner(layout.out)
    W = layout.data
    doc_task = [
        "--corpus", str(W / "docs.jsonl.gz"), "--pairs", str(W / "links.train.tsv.gz"),
        "--eval-pairs", str(W / "links.valid.tsv.gz"),
    ]  # fmt: skip
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    figures: dict[str, Any] = {"minutes": minutes, "threads": threads}
    for setting in chosen:
        if setting == "crosslang":
            if not (layout.crosslang_task / "queries.jsonl").is_file():
                run(["crosslang", "--out", str(layout.crosslang_task), "--corpus", str(W / "docs.jsonl.gz"),
                     "--pairs", str(W / "links.train.tsv.gz"), "--valid-pairs", str(W / "links.valid.tsv.gz")],
                    "crosslang-task")  # fmt: skip
            xl_recipes = [r for r in recipes if r.crosslang and (r.init is None or r.init in {x.row for x in recipes})]
            trained = train_all(layout, run, setting, xl_recipes, minutes, threads)
            bundles = {r.row: layout.bundle(setting, r) for r in xl_recipes}
            X = layout.crosslang_task
            common = ["--corpus", str(W / "docs.jsonl.gz"), "--qrels", str(X / "qrels.valid.tsv"),
                      "--pairs", str(X / "qrels.filter.tsv")]  # fmt: skip
            pseudo = evaluate(
                run, "crosslang",
                [*common, "--queries", str(X / "queries.jsonl"), *_bundle_args(bundles), "--baselines", "tfidf"],
                layout.out / "eval" / "crosslang",
            )  # fmt: skip
            translated = evaluate(
                run, "crosslang-translated",
                [*common, "--queries", str(X / "queries.translated.jsonl"), "--baselines", "tfidf,bm25"],
                layout.out / "eval" / "crosslang-translated",
            )  # fmt: skip
            tables["crosslang"] = rows_of(pseudo, bundles)
            tables["crosslang-translated"] = rows_of(translated, {})
            figures["crosslang_training"] = trained
            continue
        in_setting = [r for r in recipes if setting == "docdoc" or r.unseen]
        trained = train_all(layout, run, setting, in_setting, minutes, threads)
        bundles = {r.row: layout.bundle(setting, r) for r in in_setting}
        if setting == "docdoc":
            base = ["--baselines", BASELINES]
            tables["docdoc"] = rows_of(
                evaluate(run, "docdoc", [*doc_task, *_bundle_args(bundles), *base], layout.out / "eval" / "docdoc"),
                bundles,
            )
            tables["keywords10"] = rows_of(
                evaluate(
                    run,
                    "keywords10",
                    [*doc_task, "--keywords", "10", *_bundle_args(bundles), *base],
                    layout.out / "eval" / "keywords10",
                ),  # fmt: skip
                bundles,
            )
        else:
            tables["unseen"] = rows_of(
                evaluate(
                    run,
                    "unseen",
                    [*doc_task, "--unseen-docs", "0.1", *_bundle_args(bundles), "--baselines", "tfidf,bm25"],
                    layout.out / "eval" / "unseen",
                ),  # fmt: skip
                bundles,
            )
        figures[f"{setting}_training"] = trained
    figures["tables"] = tables
    (layout.out / "results.json").write_text(json.dumps(figures, indent=2, default=str) + "\n", encoding="utf-8")
    render(figures, recipes, layout)


def render(figures: dict[str, Any], recipes: Sequence[Recipe], layout: Layout) -> None:
    """results.md from the figures of a run (results.json), printed too."""
    tables = figures["tables"]
    parts = [f"Budget: {figures['minutes']:g} wall minutes of training per kind, {figures['threads']} threads.\n\n"]
    if "docdoc" in tables:
        parts.append(main_table(recipes, tables, figures.get("docdoc_training", {}), layout))
    if "crosslang" in tables:
        parts.append("\nCross-language (pseudo-language queries, English documents):\n\n")
        parts.append(crosslang_table(recipes, tables["crosslang"], tables["crosslang-translated"]))
    (layout.out / "results.md").write_text("".join(parts), encoding="utf-8")
    typer.echo("".join(parts))


def _bundle_args(bundles: dict[str, Path]) -> list[str]:
    return [arg for path in bundles.values() for arg in ("--bundle", str(path))]


if __name__ == "__main__":
    typer.run(results_table)
