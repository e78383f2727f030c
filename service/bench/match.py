"""`ssi bench --scenario match`: POST /match for whole web pages against an adverts collection, over HTTP.

The adverts are the corpus cut into 60-word passages (10k, 100k, 1 M of them), the pages the corpus's own
documents laid end to end and cut to 2, 20 and 60 kB: real text with its stop words, not words chosen for the
code. For each advert count the service is started as users start it (`python -m service serve`, the adverts
collection in SSI_COLLECTIONS) and each page size is sent by 1 and 32 clients (wrk where installed).

Floors measured in the same run, on the same adverts and pages: the FAISS flat scan of each page's embedding
(one query per call, as a lone request makes it; `threads` × `workers` scanning threads for throughput), and
the same /match done in process without HTTP. An approximate index (IVF) is served once per nprobe, and its
recall@k measured against the flat index's answers (which are the brute-force ranking, service.rerank).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.bench.floors import scan_floor
from service.bench.load import run_load, summarize
from service.bench.queries import passage_corpus
from service.bench.ratio import ratio
from service.bench.recall import recall
from service.bench.run import machine_setup
from service.bench.server import ServedProcess
from service.cores import serve_sizes, usable_cores
from ssi.corpus import iter_corpus

MATCH_PATH = "/collections/ads/match"


@dataclass
class MatchBenchConfig:
    bundle: Path
    corpus: Path  # the source of adverts (its passages) and pages (its documents)
    work_dir: Path
    out: Path
    ads: list[int] = field(default_factory=lambda: [10_000, 100_000])
    page_kb: list[int] = field(default_factory=lambda: [2, 20, 60])
    pages: int = 50  # distinct pages of each size, sent in turn
    ad_words: int = 60  # words per advert passage (Wikispeedia gives ~242k of 60 words, ~1.04 M of 14)
    k: int = 10
    clients: list[int] = field(default_factory=lambda: [1, 32])
    seconds: float = 10.0
    index_types: list[str] = field(default_factory=lambda: ["flat"])
    nprobe: list[int] = field(default_factory=lambda: [16, 64, 256])
    threads: int | None = None  # SSI_THREADS of the served process (None: as `ssi serve` chooses)
    workers: int | None = None  # SSI_WORKERS of the served process (None: as `ssi serve` chooses)
    seed: int = 0
    extra_settings: dict[str, str] = field(default_factory=dict)


def make_pages(corpus: Path, kb: int, count: int, seed: int) -> list[str]:
    """`count` pages of about `kb` kB: random documents of the corpus laid end to end, cut at a word boundary."""
    texts = [doc.full_text for doc in iter_corpus(corpus)]
    rng = np.random.default_rng(seed + kb)
    pages = []
    for _ in range(count):
        parts: list[str] = []
        size = 0
        while size < kb * 1000:
            parts.append(texts[int(rng.integers(len(texts)))])
            size += len(parts[-1]) + 1
        pages.append(" ".join(parts)[: kb * 1000].rsplit(" ", 1)[0])
    return pages


def _served(
    config: MatchBenchConfig, ads: Path, docs: Path, cache: Path, index_type: str, **more: str
) -> ServedProcess:
    collections = {"ads": {"bundle": str(config.bundle), "corpus": str(ads), "type": "adverts"}}
    settings = {
        "SSI_CACHE_DIR": str(cache),
        "SSI_COLLECTIONS": json.dumps(collections),
        "SSI_INDEX_TYPE": index_type,
        "SSI_THREADS": str(config.threads),
        "SSI_WORKERS": str(config.workers),
        "SSI_MAX_QUEUE": str(max(64, 2 * max(config.clients))),
        "SSI_QUEUE_TIMEOUT": "60",
        **config.extra_settings,
        **more,
    }
    return ServedProcess(config.bundle, docs, config.work_dir, settings)


def _answers(url: str, pages: list[str], k: int) -> tuple[list[list[tuple[str, float]]], list[float]]:
    """Each page's (advert id, score) list, one request at a time, and each request's seconds."""
    answers, latencies = [], []
    with httpx.Client(base_url=url, timeout=120) as client:
        for page in pages:
            sent = time.perf_counter()
            response = client.post(MATCH_PATH, json={"page": page, "k": k})
            latencies.append(time.perf_counter() - sent)
            response.raise_for_status()
            answers.append([(ad["id"], ad["score"]) for ad in response.json()["results"][0]["ads"]])
    return answers, latencies


def _in_process(config: MatchBenchConfig, ads: Path, cache: Path, pages: dict[int, list[str]]) -> dict[str, Any]:
    """Per page size: /match's work without HTTP (match_pages, one page at a time) and the FAISS scan floor of
    the pages' embeddings over the adverts' vectors, from the cache the flat server left."""
    from service.adverts import NOT_PAUSED
    from service.bounds import cut_long_text
    from service.collection import Collection
    from service.matching import match_pages
    from service.metrics import Metrics
    from service.settings import CollectionSpec, Settings
    from service.threads import limit_blas_threads

    limit_blas_threads()
    settings = Settings(bundle=config.bundle, corpus=ads, cache_dir=cache, threads=config.threads)
    spec = CollectionSpec(bundle=config.bundle, corpus=ads, type="adverts")
    collection = Collection("ads", spec, settings, Metrics())
    collection.load()
    out: dict[str, Any] = {}
    try:
        state = collection.ready_state()
        vectors = state.index.all_vectors()
        for kb, texts in pages.items():
            match_pages(collection, settings, texts[:5], config.k, NOT_PAUSED)  # warm-up
            latencies = []
            for text in texts:
                sent = time.perf_counter()
                match_pages(collection, settings, [text], config.k, NOT_PAUSED)
                latencies.append(time.perf_counter() - sent)
            cut = [cut_long_text(text, settings.max_page_chars) for text in texts]
            rows = state.embedder.featurize_queries(cut, settings.max_page_words)
            embedded = state.embedder.embed_queries(rows, cut)
            out[str(kb)] = {
                "match": summarize(latencies, 1, 0, float(sum(latencies))).as_dict(),
                "scan_floor": scan_floor(
                    vectors, embedded, config.k, config.threads * config.workers, min(config.seconds, 3.0)
                ),
                "page_words_mean": round(float(np.diff(rows.indptr).mean()), 1),
            }
    finally:
        collection.close()
    return out


def _ratios(result: dict[str, Any]) -> dict[str, float]:
    ratios: dict[str, float] = {}
    floor = result["in_process"]["scan_floor"]
    for clients, level in result["load"].items():
        ratios[f"{clients}c_p50_over_scan_p50"] = ratio(level["p50_ms"], floor["p50_ms"])
        ratios[f"{clients}c_qps_over_scan_qps"] = ratio(level["throughput_qps"], floor["throughput_qps"])
    return ratios


def _measure(
    config: MatchBenchConfig,
    server: ServedProcess,
    pages: dict[int, list[str]],
    exact: dict[int, list[list[tuple[str, float]]]],
    flat: bool,
    name: str,
    log: Any,
) -> dict[str, Any]:
    """One served index: each page size's answers (kept in `exact` for the flat index, scored against it for
    another) and its load levels (every client count for flat, one client for an approximate knob)."""
    result: dict[str, Any] = {"rss_mb": round(server.rss_bytes() / 2**20, 1), "sizes": {}}
    for kb, texts in pages.items():
        answers, _ = _answers(server.url, texts, config.k)
        size: dict[str, Any] = {"load": {}}
        found = ""
        if flat:
            exact[kb] = answers
        else:
            size[f"recall@{config.k}"] = round(recall(answers, exact[kb]), 4)
            found = f", recall@{config.k} {size[f'recall@{config.k}']}"
        bodies = [{"page": text, "k": config.k} for text in texts]
        for clients in config.clients if flat else [1]:
            measured = run_load(server.url, bodies, clients, config.seconds, warmup=5, path=MATCH_PATH)
            size["load"][str(clients)] = measured.as_dict()
            log(f"[{name}] {kb} kB pages, {clients:>2} clients: p50 {measured.p50_ms:.1f} ms, "
                f"p99 {measured.p99_ms:.1f} ms, {measured.throughput_qps:.1f} matches/s, "
                f"{measured.errors} errors{found}")  # fmt: skip
        result["sizes"][str(kb)] = size
    return result


def run_match_bench(config: MatchBenchConfig, log: Any = print) -> dict[str, Any]:
    # What `ssi serve` would choose on this machine where not given, so that the floors use as many threads.
    config.workers, config.threads = serve_sizes(usable_cores().usable, config.workers, config.threads)
    config.work_dir.mkdir(parents=True, exist_ok=True)
    pages = {kb: make_pages(config.corpus, kb, config.pages, config.seed) for kb in config.page_kb}
    docs = config.work_dir / "match-documents.jsonl"  # the served documents collection: one page, unused
    docs.write_text(json.dumps({"id": "page", "title": "", "text": pages[config.page_kb[0]][0]}) + "\n")
    report: dict[str, Any] = {
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "setup": {
            "bundle": str(config.bundle),
            "corpus": str(config.corpus),
            "pages_per_size": config.pages,
            "k": config.k,
            "clients": config.clients,
            "seconds_per_level": config.seconds,
            **machine_setup(config.threads, config.workers),
        },
        "ads": {},
    }
    for n_ads in config.ads:
        ads = config.work_dir / f"ads-{n_ads}-{config.ad_words}w.jsonl"
        if not ads.is_file():
            log(f"cutting {config.corpus} into {config.ad_words}-word passages (at most {n_ads}) into {ads}")
            passage_corpus(config.corpus, ads, words_per_passage=config.ad_words, limit=n_ads)
            with ads.open("rb") as handle:
                cut = sum(1 for _ in handle)
            if cut < n_ads:
                log(f"the corpus gives {cut} adverts of {config.ad_words} words, not {n_ads}: figures are for {cut}")
        per_count: dict[str, Any] = {}
        exact: dict[int, list[list[tuple[str, float]]]] = {}
        for index_type in config.index_types:
            cache = config.work_dir / f"match-{n_ads}-{config.ad_words}w-{index_type}"
            knobs = [{}] if index_type == "flat" else [{"SSI_IVF_NPROBE": str(v)} for v in config.nprobe]
            for knob in knobs:
                name = index_type if not knob else f"{index_type} nprobe={knob['SSI_IVF_NPROBE']}"
                server = _served(config, ads, docs, cache, index_type, **knob)
                info = server.start()
                log(f"[{n_ads} adverts, {name}] ready in {info['ready_seconds']:.1f}s")
                try:
                    flat = index_type == "flat"
                    result = _measure(config, server, pages, exact, flat, f"{n_ads} adverts, {name}", log)
                finally:
                    server.stop()
                if index_type == "flat":
                    for kb, measured in _in_process(config, ads, cache, pages).items():
                        size = result["sizes"][kb]
                        size["in_process"] = measured
                        size["ratios"] = _ratios(size)
                        floor = measured["scan_floor"]
                        log(f"[{n_ads} adverts] {kb} kB pages ({measured['page_words_mean']} words): in process "
                            f"p50 {measured['match']['p50_ms']:.1f} ms; FAISS scan floor p50 {floor['p50_ms']:.2f} ms, "
                            f"{floor['throughput_qps']:.0f} q/s; ratios {size['ratios']}")  # fmt: skip
                per_count[name] = result
        report["ads"][str(n_ads)] = per_count
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    log(f"wrote {config.out}")
    return report
