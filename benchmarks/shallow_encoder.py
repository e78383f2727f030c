"""A shallow encoder (training.shallow_encoder: all-MiniLM-L6-v2 cut to its first K layers, distilled or not) against
the whole model.

`quality`: the day-one hybrid (BM25 on stems + λ · cosine) on SciFact's 162 validation claims, in one process as
benchmarks.hybrid_weight computes it: BM25's part alone, the whole MiniLM, MiniLM cut to each `--layers` K, and each
model folder given with `--folder` (a distilled one: `python -m training.shallow_encoder … --seconds S`), every encoder
exported and checked by training.sentence_export and run as its fp32 graph. For each: the cosine alone, the hybrid at a
few weights, the gain at the day-one rule λ = 1 over BM25 with its paired standard error over the claims, and its share
of MiniLM's gain; and for each cut and folder the same as a query graph (`ssi train --query-model`: its e(q) against the
whole MiniLM's e(d)), with its claims' cosine to MiniLM's. The test split is never read.

`speed`: the whole MiniLM and each cut (fp32 graphs) in one process: a query's encoding on one thread (5 and 20 random
words of Wikispeedia text, the encoders taking turns query by query, p50 of CPU time) and 60-word passages a second on
two threads (the encoders taking turns over slices), repeated `--repeats` times; each figure's ratio to MiniLM per
repetition and their medians. A distilled cut runs exactly as the plain one (the same graph, other weights).

    python -m benchmarks.shallow_encoder quality --layers 2 --layers 3 --out runs/shallow-quality.json
    python -m benchmarks.shallow_encoder speed --layers 2 --layers 3 --out runs/shallow-speed.json
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from benchmarks.hybrid_cost import _queries, _query_times
from benchmarks.hybrid_weight import scifact_validation
from benchmarks.replication_faults import write_figures
from benchmarks.snippet_cost import _passages
from benchmarks.static_encoder import SCIFACT, WIKISPEEDIA, _minilm, _passages_per_second
from ssi.sentence import SentenceEncoder, read_spec
from training.evaluate.metrics import NDCG10, quick_metrics
from training.pretrained import NAME, checked_minilm_folder
from training.sentence_export import is_encoder_folder, prepare_encoder, read_name
from training.sentence_vectors import encode_corpus
from training.shallow_encoder import shallow_encoder

app = typer.Typer(add_completion=False)
WEIGHTS = (0.5, 1.0, 1.5, 2.0)
DAY_ONE = 1.0  # the day-one rule's λ (training/hybrid.py)


def _cut(layers: int, scratch: Path) -> Path:
    """MiniLM cut to its first `layers` layers, exported and checked (fp32 and int8 graphs) into `scratch/l{layers}`."""
    model, folder = scratch / f"l{layers}-model", scratch / f"l{layers}"
    shallow_encoder(checked_minilm_folder(), model, layers)
    prepare_encoder(model, folder, threads=2)
    return folder


def _row(
    per_claim: Callable[[np.ndarray], np.ndarray], lexical: np.ndarray, base: np.ndarray, cosine: np.ndarray
) -> dict[str, object]:
    """An encoder's cosine alone, the hybrid at WEIGHTS, and its gain at the day-one λ over BM25 alone (`base`)."""
    gain = per_claim(lexical + np.float32(DAY_ONE) * cosine) - base
    return {
        "alone": round(float(per_claim(cosine).mean()), 4),
        **{f"lambda_{w}": round(float(per_claim(lexical + np.float32(w) * cosine).mean()), 4) for w in WEIGHTS},
        "gain_at_lambda_1": round(float(gain.mean()), 4),
        "gain_se": round(float(gain.std(ddof=1) / np.sqrt(gain.size)), 4),
    }


@app.command()
def quality(
    layers: Annotated[list[int], typer.Option(help="Cut MiniLM to this many layers (repeat for several).")] = [2, 3],  # noqa: B006
    folder: Annotated[
        list[Path] | None,
        typer.Option(help="A model folder to measure too (a distilled cut), or a static encoder folder (a table)."),
    ] = None,
    data: Annotated[Path, typer.Option(help="SciFact's folder (BEIR layout).")] = SCIFACT,
    source: Annotated[Path | None, typer.Option(help="all-MiniLM-L6-v2 already exported (an encoder folder).")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    docs, task, lexical = scifact_validation(data)
    texts = [d.full_text for d in docs]

    def per_claim(scores: np.ndarray) -> np.ndarray:
        return quick_metrics(scores, task.relevant_matrix, task.excluded_matrix)[NDCG10]

    base = per_claim(lexical)
    figures: dict[str, object] = {"claims": task.n_queries, "bm25_on_stems": round(float(base.mean()), 4)}
    rows: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        encoders = {NAME: source or _minilm(Path(scratch))}
        encoders |= {f"{NAME}, first {k} layers": _cut(k, Path(scratch)) for k in layers}
        for i, given in enumerate(folder or []):
            if is_encoder_folder(given):  # a static one (training.static_query, training.static_distil) as it is
                encoders[f"{read_spec(given).name} ({given})"] = given
                continue
            prepare_encoder(given, Path(scratch) / f"given-{i}", threads=2)
            encoders[f"{read_name(given)} ({given})"] = Path(scratch) / f"given-{i}"
        minilm = SentenceEncoder(encoders[NAME], threads=2, precision="fp32")
        whole_docs, whole_queries = encode_corpus(minilm, texts), minilm.encode(list(task.query_texts))
        for name, path in encoders.items():
            encoder = SentenceEncoder(path, threads=2, precision="fp32")
            queries = encoder.encode(list(task.query_texts))
            rows[name] = _row(per_claim, lexical, base, queries @ encode_corpus(encoder, texts).T)
            typer.echo(f"{name}: {rows[name]}", err=True)
            if path != encoders[NAME]:  # as a query graph: its e(q) against the whole model's e(d)
                asymmetric = f"{name}, queries only (documents: {NAME})"
                rows[asymmetric] = _row(per_claim, lexical, base, queries @ whole_docs.T)
                agreement = (queries * whole_queries).sum(axis=1)
                rows[asymmetric] |= {
                    "claims_cosine_to_whole_mean": round(float(agreement.mean()), 4),
                    "claims_cosine_to_whole_min": round(float(agreement.min()), 4),
                }
                typer.echo(f"{asymmetric}: {rows[asymmetric]}", err=True)
    whole = float(rows[NAME]["gain_at_lambda_1"])  # type: ignore[arg-type]
    for row in rows.values():
        row["share_of_minilm_gain"] = round(float(row["gain_at_lambda_1"]) / whole, 3) if whole else None  # type: ignore[arg-type]
    figures["encoders"] = rows
    write_figures(figures, out)


@app.command()
def speed(
    layers: Annotated[list[int], typer.Option(help="Cut MiniLM to this many layers (repeat for several).")] = [2, 3],  # noqa: B006
    corpus: Annotated[Path, typer.Option(help="Wikispeedia docs: the queries' and passages' text.")] = WIKISPEEDIA,
    queries: Annotated[int, typer.Option(help="Queries timed one at a time, per length and repetition.")] = 200,
    documents: Annotated[int, typer.Option(help="60-word passages a repetition.")] = 400,
    repeats: Annotated[int, typer.Option(help="Repetitions; the ratios' medians are reported.")] = 3,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    passages = _passages(corpus, documents * repeats)
    with tempfile.TemporaryDirectory() as scratch:
        folders = {"minilm": _minilm(Path(scratch))} | {f"l{k}": _cut(k, Path(scratch)) for k in layers}
        one = {name: SentenceEncoder(path, 1, "fp32") for name, path in folders.items()}
        two = {name: SentenceEncoder(path, 2, "fp32") for name, path in folders.items()}
        runs: list[dict[str, dict[str, float]]] = []
        for r in range(repeats):
            run: dict[str, dict[str, float]] = {}
            for words in (5, 20):
                asked = _queries(passages, queries, words, seed=100 * r + words)
                _query_times(one, asked[:10])  # warm
                timed = _query_times(one, asked)
                run[f"query_{words}_words_cpu_p50_ms"] = {name: t["cpu_p50_ms"] for name, t in timed.items()}
                run[f"query_{words}_words_wall_p50_ms"] = {name: t["p50_ms"] for name, t in timed.items()}
            run["passages_per_second_two_threads"] = _passages_per_second(
                two, passages[r * documents : (r + 1) * documents], rounds=4
            )
            for key in list(run):
                minilm = run[key]["minilm"]
                run[f"{key}_over_minilm"] = {name: round(value / minilm, 4) for name, value in run[key].items()}
            runs.append(run)
            typer.echo(run, err=True)

    figures: dict[str, object] = {
        "encoders": "all-MiniLM-L6-v2 (minilm) and its first K layers (lK), fp32 graphs",
        "repeats": repeats,
        "medians": {
            key: {name: round(statistics.median(run[key][name] for run in runs), 4) for name in runs[0][key]}
            for key in runs[0]
        },
        "runs": runs,
    }
    write_figures(figures, out)


if __name__ == "__main__":
    app()
