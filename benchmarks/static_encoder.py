"""The static encoder (training.static_distil) against the encoder it is distilled from, all-MiniLM-L6-v2.

`quality`: the day-one hybrid (BM25 on stems + λ · cosine) on SciFact's 162 validation claims, in one process as
benchmarks.hybrid_weight computes it (the day-one bundle's BM25 part, its rule λ = 1 and a few other weights beside),
for static encoders distilled with each choice: each token's row (its own state or the one-token text's mean) and
the SIF weighting with its constant, then PCA's dimensions, then the tokens a text is cut at, each stage keeping the
best of the one before by NDCG@10 at λ = 1. The choices are tuned on
these validation claims only; the test split is never read. The vocabulary goes through the source encoder once.

`speed`: MiniLM's fp32 and int8 graphs and a static encoder in one process: a query's encoding on one thread (5 and
20 random words of Wikispeedia text, stop words included; the encoders taking turns query by query; p50 of CPU and
wall time) and 60-word passages a second on two threads (the encoders taking turns over slices), repeated
`--repeats` times; each figure's ratio to fp32 and to int8 per repetition, and their medians.

    python -m benchmarks.static_encoder quality --out runs/static-quality.json
    python -m benchmarks.static_encoder speed --out runs/static-speed.json
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from tokenizers import Tokenizer

from benchmarks.hybrid_cost import _queries, _query_times
from benchmarks.hybrid_weight import scifact_validation
from benchmarks.replication_faults import write_figures
from benchmarks.snippet_cost import _passages
from ssi.corpus import read_corpus
from ssi.sentence import SentenceEncoder
from training.evaluate.metrics import NDCG10, quick_metrics
from training.pretrained import NAME, checked_minilm_folder
from training.sentence_export import prepare_encoder
from training.static_distil import (
    ROWS,
    SIF,
    counted_probabilities,
    static_table,
    token_table,
    write_static,
    zipf_probabilities,
)

app = typer.Typer(add_completion=False)
WEIGHTS = (0.5, 1.0, 1.5, 2.0)
SIFS = (1e-4, 1e-5, 1e-6)
DIMS = (None, 384, 256, 128)  # None: no PCA, the source's 384 as they came; 384: centred and rotated, all kept
MAX_LENGTHS = (256, 512)
SCIFACT = Path("../shared/data/scifact")
WIKISPEEDIA = Path("../shared/data/wikispeedia/docs.jsonl.gz")


def _minilm(scratch: Path) -> Path:
    """all-MiniLM-L6-v2 exported and checked (fp32 and int8 graphs) into `scratch/minilm`."""
    folder = scratch / "minilm"
    prepare_encoder(checked_minilm_folder(), folder, name=NAME, threads=2)
    return folder


def _pooled(table: np.ndarray, rows: list[list[int]]) -> np.ndarray:
    """What the static graph and SentenceEncoder give (training.static_distil.reference_vectors): each text's rows of
    the table averaged, to unit length."""
    out = np.stack([table[np.asarray(ids, dtype=np.int64)].mean(axis=0) for ids in rows])
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


@app.command()
def quality(
    data: Annotated[Path, typer.Option(help="SciFact's folder (BEIR layout).")] = SCIFACT,
    generic: Annotated[Path, typer.Option(help="Texts whose token counts give a corpus-free p.")] = WIKISPEEDIA,
    source: Annotated[Path | None, typer.Option(help="all-MiniLM-L6-v2 already exported (an encoder folder).")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    docs, task, lexical = scifact_validation(data)
    texts = [d.full_text for d in docs]
    generic_texts = [d.full_text for d in read_corpus(generic)]

    def ndcg(scores: np.ndarray) -> float:
        return round(float(quick_metrics(scores, task.relevant_matrix, task.excluded_matrix)[NDCG10].mean()), 4)

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        tokens = token_table(source or _minilm(Path(scratch)), threads=2)
        figures: dict[str, object] = {
            "claims": task.n_queries,
            "bm25_on_stems": ndcg(lexical),
            "vocabulary_through_minilm_seconds": round(time.perf_counter() - started, 1),
        }
        # The texts tokenized once a length, as the static encoder's tokenizer (SentenceEncoder.token_ids) cuts them;
        # tests check that the graph gives `_pooled`'s vectors.
        reader = Tokenizer.from_str(tokens.tokenizer)
        reader.no_padding()
        ids: dict[int, tuple[list[list[int]], list[list[int]]]] = {}
        for length in MAX_LENGTHS:
            reader.enable_truncation(length)
            ids[length] = tuple(  # type: ignore[assignment]
                [found.ids for found in reader.encode_batch(list(some), add_special_tokens=True)]
                for some in (task.query_texts, texts)
            )
        size = len(tokens.token)
        counted: dict[tuple[str, int], np.ndarray] = {}

        def probabilities(weighting: str, corpus: str, length: int) -> np.ndarray | None:
            if weighting == "none":
                return None
            if weighting == "zipf":
                return zipf_probabilities(size)
            if (corpus, length) not in counted:
                given = generic_texts if corpus == "wikispeedia" else texts
                counted[corpus, length] = counted_probabilities(tokens.tokenizer, given, size, length)
            return counted[corpus, length]

        def measure(label: str, rows: str, weighting: str, corpus: str = "", a: float = SIF, dims: int | None = None,
                    length: int = 256) -> dict[str, object]:  # fmt: skip
            vectors = tokens.token if rows == "token" else tokens.mean
            table = static_table(vectors, tokens.special, dims, probabilities(weighting, corpus, length), a)
            queries, documents = ids[length]
            cosine = _pooled(table, queries) @ _pooled(table, documents).T
            row: dict[str, object] = {
                "variant": label, "rows": rows, "weighting": weighting, "counted_over": corpus, "a": a,
                "dims": dims, "max_length": length, "alone": ndcg(cosine),
                **{f"lambda_{w}": ndcg(lexical + np.float32(w) * cosine) for w in WEIGHTS},
            }  # fmt: skip
            typer.echo(row, err=True)
            return row

        def best(rows: list[dict[str, object]]) -> dict[str, object]:
            return max(rows, key=lambda row: float(row["lambda_1.0"]))  # type: ignore[arg-type]

        stage_1 = []
        for rows in ROWS:
            stage_1.append(measure(f"{rows}, none", rows, "none"))
            for a in SIFS:
                stage_1.append(measure(f"{rows}, zipf a={a:g}", rows, "zipf", a=a))
                for corpus in ("wikispeedia", "scifact"):
                    stage_1.append(measure(f"{rows}, counts {corpus} a={a:g}", rows, "counts", corpus, a))
        won = best(stage_1)
        chosen = {key: won[key] for key in ("rows", "weighting")} | {"corpus": won["counted_over"], "a": won["a"]}
        stage_2 = [measure(f"dims {d}", dims=d, **chosen) for d in DIMS]  # type: ignore[arg-type]
        chosen["dims"] = best(stage_2)["dims"]
        stage_3 = [measure(f"max_length {n}", length=n, **chosen) for n in MAX_LENGTHS]  # type: ignore[arg-type]
        figures |= {
            "stage_1_rows_and_weighting_no_pca": stage_1,
            "stage_2_dims": stage_2,
            "stage_3_max_length": stage_3,
            "chosen": best(stage_3),
        }
    write_figures(figures, out)


def _passages_per_second(encoders: dict[str, SentenceEncoder], texts: list[str], rounds: int) -> dict[str, float]:
    """Texts a second per encoder (its threads), the encoders taking turns over `rounds` slices; an encoder that
    finishes a slice in under half a second encodes it again until half a second has passed."""
    spent = {name: 0.0 for name in encoders}
    done = {name: 0 for name in encoders}
    size = max(1, len(texts) // rounds)
    for r in range(rounds):
        chunk = texts[r * size : (r + 1) * size]
        for name in encoders if r % 2 == 0 else list(encoders)[::-1]:
            started = time.perf_counter()
            while True:
                encoders[name].encode(chunk)
                done[name] += len(chunk)
                if time.perf_counter() - started >= 0.5 or name != "static":
                    break
            spent[name] += time.perf_counter() - started
    return {name: done[name] / spent[name] for name in encoders}


def _ratios(values: dict[str, float]) -> dict[str, float]:
    return {f"static_over_{base}": values["static"] / values[base] for base in ("fp32", "int8")}


@app.command()
def speed(
    rows: Annotated[str, typer.Option(help="The static encoder's rows (training.static_distil).")] = "token",
    dims: Annotated[int, typer.Option(help="Its dimensions after PCA (0: no PCA).")] = 0,
    weighting: Annotated[str, typer.Option(help="Its weighting (training.static_distil).")] = "zipf",
    sif: Annotated[float, typer.Option(help="Its SIF constant.")] = SIF,
    max_length: Annotated[int, typer.Option(help="Its tokens a text (0: the source's).")] = 0,
    corpus: Annotated[Path, typer.Option(help="Wikispeedia docs: the queries' and passages' text.")] = WIKISPEEDIA,
    queries: Annotated[int, typer.Option(help="Queries timed one at a time, per length and repetition.")] = 200,
    documents: Annotated[int, typer.Option(help="60-word passages a repetition.")] = 800,
    repeats: Annotated[int, typer.Option(help="Repetitions; the ratios' medians are reported.")] = 5,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    passages = _passages(corpus, documents * repeats)
    with tempfile.TemporaryDirectory() as scratch:
        minilm = _minilm(Path(scratch))
        texts = [d.full_text for d in read_corpus(corpus)] if weighting == "counts" else []
        static_dir = Path(scratch) / "static"
        spec = write_static(
            token_table(minilm), static_dir, rows=rows, dims=dims or None, weighting=weighting, sif=sif,  # type: ignore[arg-type]
            texts=texts, max_length=max_length or None,
        )  # fmt: skip
        one = {
            "fp32": SentenceEncoder(minilm, 1, "fp32"),
            "int8": SentenceEncoder(minilm, 1, "int8"),
            "static": SentenceEncoder(static_dir, 1),
        }
        two = {
            "fp32": SentenceEncoder(minilm, 2, "fp32"),
            "int8": SentenceEncoder(minilm, 2, "int8"),
            "static": SentenceEncoder(static_dir, 2),
        }
        runs: list[dict[str, object]] = []
        for r in range(repeats):
            run: dict[str, object] = {}
            for words in (5, 20):
                asked = _queries(passages, queries, words, seed=100 * r + words)
                _query_times(one, asked[:10])  # warm
                timed = _query_times(one, asked)
                cpu = {name: t["cpu_p50_ms"] for name, t in timed.items()}
                run[f"query_{words}_words_cpu_p50_ms"] = cpu
                run[f"query_{words}_words_wall_p50_ms"] = {name: t["p50_ms"] for name, t in timed.items()}
                run[f"query_{words}_words_cpu_ratios"] = _ratios(cpu)
            rates = _passages_per_second(two, passages[r * documents : (r + 1) * documents], rounds=4)
            run["passages_per_second_two_threads"] = rates
            run["passages_ratios"] = _ratios(rates)
            runs.append(run)
            typer.echo(run, err=True)

    def median(key: str, inner: str) -> float:
        return round(statistics.median(float(run[key][inner]) for run in runs), 4)  # type: ignore[index]

    figures: dict[str, object] = {
        "static": spec.model_dump(include={"name", "dims", "max_length", "static"}),
        "repeats": repeats,
        "medians": {
            key: {inner: median(key, inner) for inner in runs[0][key]}  # type: ignore[union-attr]
            for key in runs[0]
        },
        "runs": runs,
    }
    write_figures(figures, out)


if __name__ == "__main__":
    app()
