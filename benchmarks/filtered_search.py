"""What a filter costs `/search` (issue 63): latency at 1 client and throughput at 32, for filters matching about
50 %, 10 %, 1 %, 0.1 % and 0.01 % of the documents, each as a ratio to the same server without a filter; recall@10
of HNSW and IVF against the flat index's filtered answer at each selectivity; short pages; facets' cost; the
memory of each field's index.

Documents: Wikispeedia text cut into 60-word passages (`--passages N`; past the ~240,000 disjoint ones, windows
that overlap: benchmarks.ann_scale.window_passages), each with generated fields drawn with a fixed seed:

    shelf  keyword of 10 values       brand  keyword of 1,000 values
    year   integer in [0, 10,000)     day    date, one of 1,000 days from 2021-01-01

Queries: 5 words at random positions of random passages (stop words included). Each query gets its own filter
values (its own shelf, brand, days), so the server cannot answer one filter from a cache:

    50 %     {"range": {"year": {"lt": 5000}}}
    10 %     {"term": {"shelf": S}}
    1 %      {"and": [{"term": {"shelf": S}}, {"range": {"day": {"gte": D, "lt": D + 100 days}}}]}
    0.1 %    {"term": {"brand": B}}
    0.01 %   {"and": [{"term": {"brand": B}}, {"range": {"year": {"lt": 1000}}}]}

The servers are `ssi serve` with its defaults but the index type (a worker per core); the flat index's filtered
answer is the brute force among the matching documents (service.fields.plan; tests/service/test_forms_oracle.py
checks it against the forms' reference scores), so it is the truth the approximate indexes are held to. The
number of matching documents each answer reports (`matched`) is checked against the generated fields.

    python -m benchmarks.filtered_search --bundle B --corpus $W/docs.jsonl.gz --passages 100000 \
        --work-dir D --out runs/filtered-100k.json
    python -m benchmarks.filtered_search --bundle B --corpus $W/docs.jsonl.gz --passages 1000000 \
        --index-types flat,ivf --work-dir D --out runs/filtered-1m.json
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Annotated, Any

import httpx
import numpy as np
import typer

from benchmarks.ann_scale import window_passages
from benchmarks.replication_faults import write_figures
from service.bench.load import run_load
from service.bench.queries import keyword_queries, passage_corpus
from service.bench.ratio import ratio
from service.bench.recall import recall
from service.bench.server import ServedProcess
from ssi.fields.index import FieldIndex

FIRST_DAY = date(2021, 1, 1)
DAYS = 1000
# Disjoint 60-word passages Wikispeedia's text makes; past that, overlapping windows.
DISJOINT_PASSAGES = 200_000
SELECTIVITIES = ("50%", "10%", "1%", "0.1%", "0.01%")
TYPES = {"shelf": "keyword", "brand": "keyword", "year": "integer", "day": "date"}


def generated_fields(n_docs: int, seed: int = 0) -> list[dict[str, Any]]:
    """Each document's fields (see the module docstring), drawn with `seed`."""
    rng = random.Random(seed)
    return [
        {
            "shelf": f"s{rng.randrange(10)}",
            "brand": f"b{rng.randrange(1000)}",
            "year": rng.randrange(10_000),
            "day": (FIRST_DAY + timedelta(days=rng.randrange(DAYS))).isoformat(),
        }
        for _ in range(n_docs)
    ]


def fielded_corpus(passages: Path, path: Path, seed: int = 0) -> list[dict[str, Any]]:
    """Write `passages` again at `path` with generated fields; return the fields, line for line."""
    lines = passages.read_text(encoding="utf-8").splitlines()
    fields = generated_fields(len(lines), seed)
    with path.open("w", encoding="utf-8") as handle:
        for line, values in zip(lines, fields, strict=True):
            record = json.loads(line)
            record["fields"] = values
            handle.write(json.dumps(record) + "\n")
    return fields


def a_filter(selectivity: str, rng: random.Random) -> dict[str, Any]:
    """One query's filter of the given selectivity, its values drawn from `rng`."""
    shelf, brand = f"s{rng.randrange(10)}", f"b{rng.randrange(1000)}"
    if selectivity == "50%":
        return {"range": {"year": {"lt": 5000}}}
    if selectivity == "10%":
        return {"term": {"shelf": shelf}}
    if selectivity == "1%":
        start = FIRST_DAY + timedelta(days=rng.randrange(DAYS - 100))
        days = {"gte": start.isoformat(), "lt": (start + timedelta(days=100)).isoformat()}
        return {"and": [{"term": {"shelf": shelf}}, {"range": {"day": days}}]}
    if selectivity == "0.1%":
        return {"term": {"brand": brand}}
    if selectivity == "0.01%":
        return {"and": [{"term": {"brand": brand}}, {"range": {"year": {"lt": 1000}}}]}
    raise ValueError(f"unknown selectivity {selectivity!r}")


def columns(fields: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """The generated fields as arrays (a date as its day number), for `mask`."""
    return {
        "shelf": np.asarray([f["shelf"] for f in fields]),
        "brand": np.asarray([f["brand"] for f in fields]),
        "year": np.asarray([f["year"] for f in fields]),
        "day": np.asarray([date.fromisoformat(f["day"]).toordinal() for f in fields]),
    }


def mask(node: dict[str, Any], held: dict[str, np.ndarray]) -> np.ndarray:
    """The documents one of this benchmark's filters (term, range, and) matches, computed without the service:
    what each answer's `matched` is checked against."""
    ((op, body),) = node.items()
    if op == "and":
        return np.logical_and.reduce([mask(clause, held) for clause in body])
    ((name, value),) = body.items()
    if op == "term":
        return held[name] == value
    found = np.ones(held[name].shape[0], dtype=bool)
    for key, bound in value.items():
        number = date.fromisoformat(bound).toordinal() if name == "day" else bound
        found &= {"gt": np.greater, "gte": np.greater_equal, "lt": np.less, "lte": np.less_equal}[key](
            held[name], number
        )
    return found


def field_index_bytes(fields: list[dict[str, Any]]) -> dict[str, Any]:
    """Each field's index (ssi.fields.index) over these documents, in bytes and per million documents."""
    index = FieldIndex.build(TYPES, enumerate(fields))
    described = index.describe()
    scale = 1e6 / max(1, len(fields))
    return {
        name: {"bytes": entry["bytes"], "mb_per_million_docs": round(entry["bytes"] * scale / 2**20, 2)}
        for name, entry in described.items()
    }


def answers(url: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each request's answer, one at a time."""
    with httpx.Client(base_url=url, timeout=120) as client:
        found = []
        for body in bodies:
            response = client.post("/search", json=body)
            response.raise_for_status()
            found.append(response.json())
        return found


def ranking(answer: dict[str, Any]) -> list[tuple[str, float]]:
    return [(hit["id"], hit["score"]) for hit in answer["hits"]]


def measure_server(
    server: ServedProcess,
    queries: list[str],
    filters: dict[str, list[dict[str, Any]]],
    clients: list[int],
    seconds: float,
    k: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Load without a filter, with each selectivity's filters, and with facets; the answers of each filtered set."""
    plain = [{"query": q, "k": k} for q in queries]
    sets: dict[str, list[dict[str, Any]]] = {"none": plain}
    for selectivity, chosen in filters.items():
        sets[selectivity] = [{**body, "filter": f} for body, f in zip(plain, chosen, strict=True)]
    sets["facets"] = [{**body, "facets": ["shelf", "brand"]} for body in plain]
    sets["10%+facets"] = [{**body, "facets": ["shelf", "brand"]} for body in sets["10%"]]
    result: dict[str, Any] = {"load": {}, "answers": {}}
    for name, bodies in sets.items():
        result["load"][name] = {}
        for count in clients:
            measured = run_load(server.url, bodies, count, seconds)
            result["load"][name][str(count)] = measured.as_dict()
            log(f"  {name:>11}, {count:>2} clients: p50 {measured.p50_ms:7.2f} ms, p99 {measured.p99_ms:7.2f} ms, "
                f"{measured.throughput_qps:7.1f} q/s, {measured.errors} errors")  # fmt: skip
        if name in filters:
            result["answers"][name] = answers(server.url, bodies)
    return result


def ratios(measured: dict[str, Any], clients: list[int]) -> dict[str, dict[str, float]]:
    """Each filtered set against the unfiltered one: p50 at the fewest clients, throughput at the most."""
    low, high = str(min(clients)), str(max(clients))
    base = measured["load"]["none"]
    return {
        name: {
            f"p50_{low}c_over_unfiltered": ratio(level[low]["p50_ms"], base[low]["p50_ms"]),
            f"qps_{high}c_over_unfiltered": ratio(level[high]["throughput_qps"], base[high]["throughput_qps"]),
        }
        for name, level in measured["load"].items()
        if name != "none"
    }


def page_checks(found: list[dict[str, Any]], expected: list[int], n_docs: int, k: int) -> dict[str, Any]:
    """Short pages (fewer than min(k, matched) hits) and answers whose `matched` is not the generated count."""
    short = sum(len(answer["hits"]) < min(k, want) for answer, want in zip(found, expected, strict=True))
    wrong = sum(answer.get("matched") != want for answer, want in zip(found, expected, strict=True))
    return {
        "short_pages": short,
        "matched_wrong": wrong,
        "matched_mean_fraction": round(sum(expected) / max(1, len(expected)) / max(1, n_docs), 6),
    }


def main(
    bundle: Annotated[Path, typer.Option(help="The bundle every server serves.")],
    corpus: Annotated[Path, typer.Option(help="Wikispeedia docs (JSONL.gz), cut into passages.")] = Path(
        "../shared/data/wikispeedia/docs.jsonl.gz"
    ),
    passages: Annotated[int, typer.Option(help="Documents: 60-word passages of the corpus.")] = 100_000,
    work_dir: Annotated[Path, typer.Option(help="Passages, caches and server logs.")] = Path("runs/filtered"),
    index_types: Annotated[str, typer.Option(help="Comma-separated; flat first (the truth).")] = "flat,hnsw,ivf",
    queries: Annotated[int, typer.Option(help="Distinct queries (and filters) per selectivity.")] = 200,
    clients: Annotated[str, typer.Option(help="Client counts, comma-separated.")] = "1,32",
    seconds: Annotated[float, typer.Option(help="Seconds of load per client count and set.")] = 8.0,
    k: Annotated[int, typer.Option(help="Hits per search.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the fields, the queries and the filters.")] = 0,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    kinds = [kind.strip() for kind in index_types.split(",") if kind.strip()]
    if kinds[0] != "flat":
        raise typer.BadParameter(
            "the first index type must be flat: its answers are the truth", param_hint="--index-types"
        )
    levels = sorted({int(c) for c in clients.split(",")})
    work_dir.mkdir(parents=True, exist_ok=True)
    raw = work_dir / f"passages-{passages}.jsonl"
    if not raw.exists():
        if passages <= DISJOINT_PASSAGES:
            passage_corpus(corpus, raw, limit=passages)
        else:
            window_passages(corpus, raw, passages)
    fielded = work_dir / f"fielded-{passages}-{seed}.jsonl"
    fields = fielded_corpus(raw, fielded, seed)
    asked = keyword_queries(fielded, queries, 5, seed, sampler="positions")
    rng = random.Random(seed)
    filters = {s: [a_filter(s, rng) for _ in asked] for s in SELECTIVITIES}
    held = columns(fields)
    expected = {s: [int(mask(node, held).sum()) for node in chosen] for s, chosen in filters.items()}
    figures: dict[str, Any] = {
        "documents": len(fields),
        "queries": len(asked),
        "clients": levels,
        "seconds": seconds,
        "field_index": field_index_bytes(fields),
    }
    truth: dict[str, list[list[tuple[str, float]]]] = {}
    for kind in kinds:
        settings = {"SSI_INDEX_TYPE": kind, "SSI_CACHE_DIR": str(work_dir / f"cache-{kind}-{len(fields)}")}
        server = ServedProcess(bundle, fielded, work_dir, settings)
        started = time.perf_counter()
        info = server.start()
        print(f"[{kind}] ready in {time.perf_counter() - started:.1f} s ({info['documents']} documents)", flush=True)
        try:
            measured = measure_server(server, asked, filters, levels, seconds, k, lambda line: print(line, flush=True))
            rss_mb = round(server.rss_bytes() / 2**20, 1)
        finally:
            server.stop()
        entry: dict[str, Any] = {"load": measured["load"], "ratios": ratios(measured, levels), "rss_mb": rss_mb}
        entry["pages"] = {s: page_checks(measured["answers"][s], expected[s], len(fields), k) for s in SELECTIVITIES}
        found = {s: [ranking(a) for a in measured["answers"][s]] for s in SELECTIVITIES}
        if kind == "flat":
            truth = found
        else:
            entry[f"recall@{k}"] = {s: round(recall(found[s], truth[s]), 4) for s in SELECTIVITIES}
        figures[kind] = entry
    write_figures(figures, out)


if __name__ == "__main__":
    typer.run(main)
