"""What a hybrid bundle's sentence encoder costs (ssi.sentence), its fp32 and int8 graphs side by side: a 5- and a
20-word query's encoding on one core, documents encoded per second on two cores at index time (and the minutes that
makes for 100k passages), the memory each graph adds to a process, and what the query cache (service.query_vectors)
saves on queries repeated as real traffic repeats them (Zipf). With --http-passages N: `/search` over HTTP at 1 and
32 clients (`ssi bench`'s run, a flat index, queries of 5 random words of the text) on N 60-word passages, served by
the day-one hybrid bundle (BM25 + the encoder, `ssi train --corpus … --encoder …`) and by its twin without the encoder
(the same vocabulary and form: BM25 alone), one after the other in this process; the ratios are hybrid over BM25.

Queries are random words of Wikispeedia text (stop words included); documents are 60-word passages of it, and SciFact
abstracts (about 225 words: cut at the model's 256 tokens) where given. The machine may be shared: the two graphs are
timed interleaved (query by query, and batch by batch of documents) so that both see the same load, each query's time
is also taken as CPU time (time.process_time: the one-thread session runs on the calling thread), and every figure is
given with its ratio int8 / fp32 from the same run, documents' per round too (their spread says how noisy it was).

    python -m benchmarks.hybrid_cost --out runs/hybrid-cost.json

With --query-model DIR (a model folder distilled towards MiniLM, `python -m training.shallow_encoder`): its graph as
the bundle's query graph (`ssi train --query-model`) beside the two in the query timings, its vectors' cosine to
MiniLM's fp32 ones, and over HTTP the hybrid bundle with it, served with it (the default) and with MiniLM's graph
encoding the queries (SSI_QUERY_GRAPH=document), both without the query cache.

With --sentence-dims N: over HTTP, the day-one bundle whole and with its vectors cut to N (`ssi train --sentence-dims`;
both with the query graph where --query-model is given), both without the query cache. --http-only leaves the
encoder's timings out; --work DIR keeps the bundles and the servers' folders there, so a run again serves the same
bundles from their saved index instead of encoding the passages again:

    python -m benchmarks.hybrid_cost --http-only --http-passages 20000 --query-model $Q --sentence-dims 128 \
        --work bench-results/hybrid-cost --out runs/hybrid-cost-cut.json
"""

from __future__ import annotations

import gzip
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from benchmarks.replication_faults import write_figures
from benchmarks.snippet_cost import _passages
from service.query_vectors import DEFAULT_SIZE, QueryVectorCache
from ssi.sentence import PRECISIONS, SentenceEncoder, bulk_encoder, int8_instructions
from training.pretrained import NAME, checked_minilm_folder
from training.sentence_export import add_query_graph, cosines, prepare_encoder

DOC_ROUNDS = 4  # interleaved rounds of documents per graph
ZIPF_DISTINCT = 1000  # distinct queries the repeated stream draws from
ZIPF_EXPONENT = 1.0


def _queries(passages: list[str], count: int, words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pool = " ".join(passages).split()
    return [" ".join(rng.choice(pool) for _ in range(words)) for _ in range(count)]


def _query_times(encoders: dict[str, SentenceEncoder], queries: list[str]) -> dict[str, dict[str, float]]:
    """Per graph, p50 of one query's encoding (wall and CPU ms), the graphs taking turns query by query."""
    wall: dict[str, list[float]] = {name: [] for name in encoders}
    cpu: dict[str, list[float]] = {name: [] for name in encoders}
    names = list(encoders)
    for i, query in enumerate(queries):
        for name in names if i % 2 == 0 else names[::-1]:
            started, used = time.perf_counter(), time.process_time()
            encoders[name].encode([query])
            cpu[name].append(time.process_time() - used)
            wall[name].append(time.perf_counter() - started)
    return {
        name: {
            "p50_ms": round(1000.0 * statistics.median(wall[name]), 3),
            "cpu_p50_ms": round(1000.0 * statistics.median(cpu[name]), 3),
        }
        for name in names
    }


def _docs_per_second(encoders: dict[str, SentenceEncoder], texts: list[str]) -> dict[str, object]:
    """Per graph, texts encoded a second (wall, on two cores as a first start encodes them: ssi.sentence.bulk_encoder),
    the graphs taking turns DOC_ROUNDS times over slices of `texts`; and the int8 / fp32 ratio of each round."""
    spent = {name: 0.0 for name in encoders}
    rounds: list[float] = []
    size = max(1, len(texts) // DOC_ROUNDS)
    for r in range(DOC_ROUNDS):
        chunk = texts[r * size : (r + 1) * size]
        rates = {}
        for name in encoders if r % 2 == 0 else list(encoders)[::-1]:
            started = time.perf_counter()
            encoders[name].encode(chunk)
            took = time.perf_counter() - started
            spent[name] += took
            rates[name] = len(chunk) / took
        rounds.append(round(rates["int8"] / rates["fp32"], 2))
    done = size * DOC_ROUNDS
    return {**{name: round(done / spent[name], 1) for name in encoders}, "int8_over_fp32_by_round": rounds}


def _scifact_agreement(encoders: dict[str, SentenceEncoder], scifact: Path, abstracts: list[str]) -> dict[str, object]:
    """int8 against fp32 on 150 SciFact claims (queries.jsonl.gz beside the corpus) and the first 100 abstracts: the
    least and mean cosine of each, and the share of each claim's top 10 among those abstracts that int8 keeps."""
    with gzip.open(scifact.parent / "queries.jsonl.gz", "rt", encoding="utf-8") as handle:
        claims = [row["text"] for row in map(json.loads, handle)][:150]
    docs = abstracts[:100]
    q = {name: encoder.encode(claims) for name, encoder in encoders.items()}
    d = {name: encoder.encode(docs) for name, encoder in encoders.items()}
    tops = {name: np.argsort(-(q[name] @ d[name].T), axis=1, kind="stable")[:, :10] for name in encoders}
    kept = [len(set(a) & set(b)) / 10 for a, b in zip(tops["fp32"], tops["int8"], strict=True)]
    pairs = {"claims": (q["int8"], q["fp32"]), "abstracts": (d["int8"], d["fp32"])}
    found = {name: cosines(*pair) for name, pair in pairs.items()}
    return {
        **{
            f"{name}_cosine_min_mean": [round(float(c.min()), 4), round(float(c.mean()), 4)]
            for name, c in found.items()
        },
        "top10_kept": round(float(np.mean(kept)), 3),
    }


def _encoder_rss_mb(folder: Path, precision: str) -> float:
    """MB of resident memory one encoder of `precision` adds to a fresh Python process (loaded, one query encoded): in
    this process, memory the export freed would be reused and hide it."""
    script = (
        "import psutil, sys\n"
        "from ssi.sentence import SentenceEncoder\n"
        "p = psutil.Process(); before = p.memory_info().rss\n"
        "e = SentenceEncoder(sys.argv[1], 1, sys.argv[2]); e.encode(['a query of a few words'])\n"
        "print((p.memory_info().rss - before) / 2**20)\n"
    )
    # The imports (onnxruntime, tokenizers) happen before `before`: only the session and the tokenizer are counted.
    script = "import onnxruntime, tokenizers\n" + script
    done = subprocess.run([sys.executable, "-c", script, str(folder), precision], capture_output=True, text=True)
    return round(float(done.stdout.strip().splitlines()[-1]), 1)


def _zipf_stream(queries: list[str], count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(queries) + 1) ** ZIPF_EXPONENT
    return [queries[i] for i in rng.choice(len(queries), size=count, p=weights / weights.sum())]


def _cache_effect(encoder: SentenceEncoder, stream: list[str], size: int) -> dict[str, float]:
    """CPU ms a query over the Zipf `stream`, encoded one by one without a cache and through a cache of `size`
    entries (empty at the start), taking turns query by query; and the cache's hit rate."""
    cache = QueryVectorCache(size)
    without, through = [], []
    for query in stream:
        used = time.process_time()
        encoder.encode([query])
        without.append(time.process_time() - used)
        used = time.process_time()
        cache.vectors("bench", encoder, [query])
        through.append(time.process_time() - used)
    return {
        "queries": len(stream),
        "distinct": len(set(stream)),
        "cache_entries": size,
        "hit_rate": round(cache.counts.hits / len(stream), 3),
        "cpu_ms_a_query_without": round(1000.0 * statistics.fmean(without), 3),
        "cpu_ms_a_query_with": round(1000.0 * statistics.fmean(through), 3),
        "with_over_without": round(statistics.fmean(through) / statistics.fmean(without), 3),
        "cache_bytes": cache.counts.bytes,
    }


def main(
    corpus: Annotated[Path, typer.Option(help="Wikispeedia docs (JSONL.gz with 'text').")] = Path(
        "../shared/data/wikispeedia/docs.jsonl.gz"
    ),
    scifact: Annotated[Path | None, typer.Option(help="SciFact's corpus.jsonl.gz (long documents).")] = Path(
        "../shared/data/scifact/corpus.jsonl.gz"
    ),
    queries: Annotated[int, typer.Option(help="Queries timed one at a time, per length.")] = 200,
    documents: Annotated[int, typer.Option(help="Passages encoded for the documents-per-second figure.")] = 2000,
    zipf_queries: Annotated[int, typer.Option(help="Queries of the repeated (Zipf) stream for the cache.")] = 3000,
    http_passages: Annotated[int, typer.Option(help="/search with and without the encoder on this many passages.")] = 0,
    seconds: Annotated[float, typer.Option(help="Seconds of load per client count (--http-passages).")] = 10.0,
    query_model: Annotated[
        Path | None, typer.Option(help="A model folder distilled towards MiniLM: the bundle's query graph.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
    http_only: Annotated[bool, typer.Option(help="Only the /search runs of --http-passages.")] = False,
    sentence_dims: Annotated[
        int | None, typer.Option(help="/search also with the bundle's vectors cut to this many (--http-passages).")
    ] = None,
    work: Annotated[
        Path | None,
        typer.Option(help="Keep the /search runs' folder here (a run again reuses its encoded passages and index)."),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            help="Only these /search runs (repeat; bm25 always runs): e.g. hybrid_cut, to skip encoding the "
            "passages for the whole vectors too."
        ),
    ] = None,
) -> None:
    figures: dict[str, object] = {}
    if not http_only:
        figures = encoder_cost(corpus, scifact, queries, documents, zipf_queries, query_model)
    if http_passages and work is not None:
        work.mkdir(parents=True, exist_ok=True)
        figures["search"] = http_cost(corpus, http_passages, work, seconds, query_model, sentence_dims, only)
    elif http_passages:
        with tempfile.TemporaryDirectory() as scratch:
            figures["search"] = http_cost(
                corpus, http_passages, Path(scratch), seconds, query_model, sentence_dims, only
            )
    write_figures(figures, out)


def encoder_cost(
    corpus: Path, scifact: Path | None, queries: int, documents: int, zipf_queries: int, query_model: Path | None
) -> dict[str, object]:
    """The encoder's figures (the module's first part): queries, documents, memory, the query cache."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "sentence"
        spec = prepare_encoder(checked_minilm_folder(), folder, name=NAME, threads=2)
        if query_model is not None:
            spec = add_query_graph(folder, query_model, threads=2)
        one: dict[str, SentenceEncoder] = {}
        for precision in PRECISIONS:
            one[precision] = SentenceEncoder(folder, threads=1, precision=precision)
        if spec.query is not None:  # the query graph's fp32 graph (the one a CPU without int8 instructions serves)
            one["query_fp32"] = SentenceEncoder(folder, threads=1, precision="fp32", part="query")
        two = {precision: bulk_encoder(folder, 2, precision) for precision in PRECISIONS}  # as a first start's
        passages = _passages(corpus, documents)
        figures: dict[str, object] = {
            "model": NAME,
            "dims": spec.dims,
            "max_length": spec.max_length,
            "int8_check": spec.int8.model_dump() if spec.int8 is not None else None,
            "cpu_int8_instructions": int8_instructions(),
            **{f"process_rss_mb_added_by_{name}_encoder": _encoder_rss_mb(folder, name) for name in PRECISIONS},
        }
        for words in (5, 20):
            asked = _queries(passages, queries, words, seed=words)
            _query_times(one, asked[:10])  # warm
            timed = _query_times(one, asked)
            figures[f"query_{words}_words_one_core"] = {
                **timed,
                **{
                    f"{name}_over_fp32_{k}": round(timed[name][k] / timed["fp32"][k], 3)
                    for name in one
                    if name != "fp32"
                    for k in ("p50_ms", "cpu_p50_ms")
                },
            }
            vectors = {name: encoder.encode(asked) for name, encoder in one.items()}
            for name in one:
                if name != "fp32":
                    found = cosines(vectors[name], vectors["fp32"])
                    figures[f"query_{words}_words_{name}_cosine_min_mean"] = [
                        round(float(found.min()), 4),
                        round(float(found.mean()), 4),
                    ]
        if spec.query is not None:
            figures["query_graph"] = spec.query.model_dump()
        rates = _docs_per_second(two, passages)
        figures["passages_60_words_per_second_two_cores"] = rates
        for name in PRECISIONS:
            figures[f"minutes_for_100k_passages_two_cores_{name}"] = round(100_000 / float(rates[name]) / 60.0, 1)  # type: ignore[arg-type]
        if scifact is not None and scifact.is_file():
            with gzip.open(scifact, "rt", encoding="utf-8") as handle:
                abstracts = [(row.get("title", "") + " " + row["text"]) for row in map(json.loads, handle)][:400]
            figures["scifact_abstracts_per_second_two_cores"] = _docs_per_second(two, abstracts)
            figures["scifact_int8_against_fp32"] = _scifact_agreement(one, scifact, abstracts)
        stream = _zipf_stream(_queries(passages, ZIPF_DISTINCT, 5, seed=7), zipf_queries)
        figures["query_cache_zipf_int8"] = {
            size: _cache_effect(one["int8"], stream, size) for size in (DEFAULT_SIZE, ZIPF_DISTINCT // 10)
        }
    return figures


# The servers of --http-passages: (name, which bundle, settings). Every hybrid one runs without the query cache but
# the last: `ssi bench` asks its 500 queries again and again, so with the cache on nearly every query after the first
# 500 is a hit, a bound on what the cache can do rather than what traffic gets (the Zipf figures are that).
HTTP_RUNS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("bm25", "bm25", {}),
    ("hybrid", "hybrid", {"SSI_QUERY_CACHE_SIZE": "0"}),
    ("hybrid_fp32", "hybrid", {"SSI_QUERY_CACHE_SIZE": "0", "SSI_ENCODER_PRECISION": "fp32"}),
    ("hybrid_cached", "hybrid", {}),
)


# With a query graph: the bundle's default (queries by the query graph) against MiniLM encoding its queries.
QUERY_GRAPH_RUNS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("bm25", "bm25", {}),
    ("hybrid", "hybrid", {"SSI_QUERY_CACHE_SIZE": "0"}),
    ("hybrid_document_graph", "hybrid", {"SSI_QUERY_CACHE_SIZE": "0", "SSI_QUERY_GRAPH": "document"}),
)

# With --sentence-dims: the day-one bundle with its vectors cut (`ssi train --sentence-dims`) against it whole.
CUT_RUNS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("bm25", "bm25", {}),
    ("hybrid", "hybrid", {"SSI_QUERY_CACHE_SIZE": "0"}),
    ("hybrid_cut", "cut", {"SSI_QUERY_CACHE_SIZE": "0"}),
)


def day_one_twins(
    texts: Path, work: Path, query_model: Path | None = None, sentence_dims: int | None = None
) -> dict[str, Path]:
    """The day-one hybrid bundle over `texts` (`ssi train --corpus texts --encoder MiniLM`, with `query_model` as its
    query graph) in work/hybrid, its twin without the encoder in work/bm25 (the same vocabulary and form: BM25 alone)
    and, with `sentence_dims`, the hybrid with its vectors cut in work/cut-N. A folder that holds them already keeps
    them (its servers' index is read back)."""
    from ssi.bundle import ENCODER_FILE, load_bundle, write_bundle
    from training.run import run_training
    from training.settings import TrainSettings

    made = {"hybrid": work / "hybrid", "bm25": work / "bm25"}
    if sentence_dims is not None:
        made["cut"] = work / f"cut-{sentence_dims}"
    for name, dims in (("hybrid", None), ("cut", sentence_dims)):
        if name in made and not (made[name] / "manifest.json").is_file():
            trained = TrainSettings(
                corpus=texts, out=made[name], encoder=checked_minilm_folder(), query_model=query_model,
                sentence_dims=dims,
            )  # fmt: skip
            run_training(trained, show_progress=False)
    if not (made["bm25"] / "manifest.json").is_file():
        hybrid = load_bundle(made["hybrid"], mmap=False)
        write_bundle(
            made["bm25"], form=hybrid.form, vocab=hybrid.vocab,
            encoder_onnx=(made["hybrid"] / ENCODER_FILE).read_bytes(),
        )  # fmt: skip
    return made


def http_cost(
    corpus: Path,
    passages: int,
    work: Path,
    seconds: float,
    query_model: Path | None = None,
    sentence_dims: int | None = None,
    only: Sequence[str] | None = None,
) -> dict[str, object]:
    """`ssi bench` (flat, 1 and 32 clients) on the day-one hybrid bundle (int8, its default; fp32 asked of the same
    bundle; int8 with the query cache) and on its twin without the encoder, one after the other (HTTP_RUNS); with a
    `query_model`, the bundle with its query graph instead (QUERY_GRAPH_RUNS); with `sentence_dims`, the bundle whole
    and with its vectors cut (CUT_RUNS; both with the query graph where given). `only`: these runs alone, by name, and
    BM25's (every ratio is to it)."""
    from service.bench.queries import passage_corpus
    from service.bench.run import BenchConfig, run_bench

    texts = passage_corpus(corpus, work / "passages.jsonl", limit=passages)
    bundles = day_one_twins(texts, work, query_model, sentence_dims)
    runs = CUT_RUNS if sentence_dims is not None else HTTP_RUNS if query_model is None else QUERY_GRAPH_RUNS
    if only:
        unknown = sorted(set(only) - {name for name, _, _ in runs})
        if unknown:
            raise typer.BadParameter(f"no such run: {', '.join(unknown)} (these: {', '.join(n for n, _, _ in runs)})")
        runs = tuple(run for run in runs if run[0] == "bm25" or run[0] in only)
    found: dict[str, dict[str, object]] = {}
    for name, bundle, settings in runs:
        config = BenchConfig(
            bundle=bundles[bundle], corpus=texts, out=work / f"{name}.json",
            # A bundle's servers share a store and snapshots (each precision its own): a later one may start from them.
            work_dir=work / f"run-{bundle}", extra_settings=settings,
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
        f"{c}_clients_{k}_{name}_over_bm25": round(found[name][f"{c}_clients"][k] / found["bm25"][f"{c}_clients"][k], 2)  # type: ignore[index]
        for name, bundle, _ in runs
        if bundle != "bm25"
        for c in ("1", "32")
        for k in ("p50_ms", "throughput_qps")
    }
    return {"passages": passages, **found, "ratios": ratios}


if __name__ == "__main__":
    typer.run(main)
