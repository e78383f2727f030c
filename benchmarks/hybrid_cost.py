"""What a hybrid bundle's sentence encoder costs (ssi.sentence): a 20-word query's encoding on one core, documents
encoded per second on two cores at index time (and the minutes that makes for 100k passages), and the memory the
encoder adds to a process. With --http-passages N: `/search` over HTTP at 1 and 32 clients (`ssi bench`'s run, a
flat index, queries of 5 random words of the text) on N 60-word passages, served by the day-one hybrid bundle
(BM25 + the encoder, `ssi train --corpus … --encoder …`) and by its twin without the encoder (the same vocabulary
and form: BM25 alone), one after the other in this process; the ratios are hybrid over BM25.

Queries are 20 random words of Wikispeedia text (stop words included); documents are 60-word passages of it,
and SciFact abstracts (about 225 words: cut at the model's 256 tokens) where given.

    python -m benchmarks.hybrid_cost --out runs/hybrid-cost.json
"""

from __future__ import annotations

import gzip
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated

import psutil
import typer

from benchmarks.replication_faults import write_figures
from benchmarks.snippet_cost import _passages
from ssi.sentence import SentenceEncoder
from training.pretrained import NAME, checked_minilm_folder
from training.sentence_export import prepare_encoder


def _queries(passages: list[str], count: int, words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pool = " ".join(passages).split()
    return [" ".join(rng.choice(pool) for _ in range(words)) for _ in range(count)]


def _p50_ms(encoder: SentenceEncoder, queries: list[str]) -> float:
    times = []
    for query in queries:
        started = time.perf_counter()
        encoder.encode([query])
        times.append(time.perf_counter() - started)
    return 1000.0 * statistics.median(times)


def _docs_per_second(encoder: SentenceEncoder, texts: list[str]) -> float:
    started = time.perf_counter()
    encoder.encode(texts)
    return len(texts) / (time.perf_counter() - started)


def main(
    corpus: Annotated[Path, typer.Option(help="Wikispeedia docs (JSONL.gz with 'text').")] = Path(
        "../shared/data/wikispeedia/docs.jsonl.gz"
    ),
    scifact: Annotated[Path | None, typer.Option(help="SciFact's corpus.jsonl.gz (long documents).")] = Path(
        "../shared/data/scifact/corpus.jsonl.gz"
    ),
    queries: Annotated[int, typer.Option(help="Queries timed one at a time.")] = 200,
    documents: Annotated[int, typer.Option(help="Passages encoded for the documents-per-second figure.")] = 2000,
    http_passages: Annotated[int, typer.Option(help="/search with and without the encoder on this many passages.")] = 0,
    seconds: Annotated[float, typer.Option(help="Seconds of load per client count (--http-passages).")] = 10.0,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    process = psutil.Process()
    before = process.memory_info().rss
    with tempfile.TemporaryDirectory() as scratch:
        spec = prepare_encoder(checked_minilm_folder(), Path(scratch) / "sentence", name=NAME, threads=2)
        one = SentenceEncoder(Path(scratch) / "sentence", threads=1)
        rss_one = process.memory_info().rss
        two = SentenceEncoder(Path(scratch) / "sentence", threads=2)
        passages = _passages(corpus, documents)
        asked = _queries(passages, queries, 20)
        one.encode(asked[:10])  # warm
        figures: dict[str, object] = {
            "model": NAME,
            "dims": spec.dims,
            "max_length": spec.max_length,
            "query_words": 20,
            "query_p50_ms_one_core": round(_p50_ms(one, asked), 3),
            "passages_60_words_per_second_two_cores": round(_docs_per_second(two, passages), 1),
            "process_rss_mb_before_encoder": round(before / 2**20, 1),
            "process_rss_mb_with_one_encoder_loaded": round(rss_one / 2**20, 1),
        }
        rate = float(figures["passages_60_words_per_second_two_cores"])  # type: ignore[arg-type]
        figures["minutes_for_100k_passages_two_cores"] = round(100_000 / rate / 60.0, 1)
        if scifact is not None and scifact.is_file():
            with gzip.open(scifact, "rt", encoding="utf-8") as handle:
                abstracts = [(row.get("title", "") + " " + row["text"]) for row in map(json.loads, handle)][:500]
            figures["scifact_abstracts_per_second_two_cores"] = round(_docs_per_second(two, abstracts), 1)
    if http_passages:
        with tempfile.TemporaryDirectory() as scratch:
            figures["search"] = http_cost(corpus, http_passages, Path(scratch), seconds)
    write_figures(figures, out)


def http_cost(corpus: Path, passages: int, work: Path, seconds: float) -> dict[str, object]:
    """`ssi bench` (flat, 1 and 32 clients) on the day-one hybrid bundle and on its twin without the encoder."""
    from service.bench.queries import passage_corpus
    from service.bench.run import BenchConfig, run_bench
    from ssi.bundle import ENCODER_FILE, load_bundle, write_bundle
    from training.run import run_training
    from training.settings import TrainSettings

    texts = passage_corpus(corpus, work / "passages.jsonl", limit=passages)
    hybrid, plain = work / "hybrid", work / "bm25"
    run_training(TrainSettings(corpus=texts, out=hybrid, encoder=checked_minilm_folder()), show_progress=False)
    made = load_bundle(hybrid, mmap=False)
    write_bundle(plain, form=made.form, vocab=made.vocab, encoder_onnx=(hybrid / ENCODER_FILE).read_bytes())
    found: dict[str, dict[str, object]] = {}
    for name, bundle in (("bm25", plain), ("hybrid", hybrid)):
        config = BenchConfig(
            bundle=bundle, corpus=texts, work_dir=work / f"run-{name}", out=work / f"{name}.json",
            query_sampler="positions", clients=[1, 32], seconds=seconds, index_types=["flat"], measure_restart=False,
        )  # fmt: skip
        report = run_bench(config, log=lambda line: None)
        flat = report["flat"]
        found[name] = {
            "first_start_seconds": flat["first_start_seconds"],
            "worker_memory_mb_after_load": flat["worker_memory_mb_after_load"],
            **{
                f"{c}_clients": {k: flat["load"][c][k] for k in ("p50_ms", "p99_ms", "throughput_qps")}
                for c in ("1", "32")
            },
        }
    ratios = {
        f"{c}_clients_{k}_hybrid_over_bm25": round(
            found["hybrid"][f"{c}_clients"][k] / found["bm25"][f"{c}_clients"][k], 2
        )  # type: ignore[index]
        for c in ("1", "32")
        for k in ("p50_ms", "throughput_qps")
    }
    return {"passages": passages, **found, "ratios": ratios}


if __name__ == "__main__":
    typer.run(main)
