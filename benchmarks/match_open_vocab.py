"""/match with the open vocabulary on against off, in one process, page by page in turn (issue 35: within 5 %).

`ssi bench --scenario match` serves each setting in its own server, one after the other: on a shared machine its
neighbours move those runs by more than the open term costs. Here both adverts collections (the corpus cut into
60-word passages, as there) are loaded in one process, each with its own cache, and every page is matched by one
and then the other, round after round, so both see the same machine; the ratio of their p50s is the open term's cost.

    python -m benchmarks.match_open_vocab --bundle B --corpus $W/docs.jsonl.gz --ads 100000 --page-kb 2,20

prints, per page size, the p50 and mean of each and open/closed, and writes them as JSON with `--out`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from service.adverts import NOT_PAUSED
from service.bench.match import make_pages
from service.bench.queries import passage_corpus
from service.collection import Collection
from service.matching import match_pages
from service.metrics import Metrics
from service.settings import CollectionSpec, Settings
from service.threads import limit_blas_threads

MODES = {"closed": False, "open": True}


def main(
    bundle: Annotated[Path, typer.Option(help="A BM25 bundle (the open vocabulary needs one).")],
    corpus: Annotated[Path, typer.Option(help="The source of adverts (its passages) and pages (its documents).")],
    work: Annotated[Path, typer.Option(help="Adverts file and each setting's cache.")] = Path("/tmp/match-open-vocab"),
    ads: Annotated[int, typer.Option(help="Adverts in the collection.")] = 100_000,
    page_kb: Annotated[str, typer.Option(help="Page sizes in kB, comma-separated.")] = "2,20",
    pages: Annotated[int, typer.Option(help="Distinct pages of each size.")] = 20,
    rounds: Annotated[int, typer.Option(help="Times each page is matched by each setting.")] = 10,
    threads: Annotated[int, typer.Option(help="SSI_THREADS of both collections.")] = 1,
    out: Annotated[Path | None, typer.Option(help="Write the results JSON here.")] = None,
) -> None:
    limit_blas_threads()
    adverts = work / f"ads-{ads}.jsonl"
    if not adverts.exists():
        passage_corpus(corpus, adverts, 60, ads)
    loaded: dict[str, tuple[Collection, Settings]] = {}
    for mode, on in MODES.items():
        settings = Settings(
            bundle=bundle, corpus=adverts, cache_dir=work / f"cache-{mode}", threads=threads, open_vocab=on
        )
        collection = Collection(
            "ads", CollectionSpec(bundle=bundle, corpus=adverts, type="adverts"), settings, Metrics()
        )
        collection.load()
        loaded[mode] = (collection, settings)
    result: dict[str, Any] = {"bundle": str(bundle), "ads": ads, "pages": pages, "rounds": rounds, "sizes": {}}
    try:
        for kb in [int(size) for size in page_kb.split(",")]:
            texts = make_pages(corpus, kb, pages, seed=0)
            seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
            for collection, settings in loaded.values():
                match_pages(collection, settings, texts[:5], 10, NOT_PAUSED)  # warm-up
            for _ in range(rounds):
                for text in texts:
                    for mode, (collection, settings) in loaded.items():
                        started = time.perf_counter()
                        match_pages(collection, settings, [text], 10, NOT_PAUSED)
                        seconds[mode].append(time.perf_counter() - started)
            p50 = {mode: 1e3 * float(np.median(s)) for mode, s in seconds.items()}
            mean = {mode: 1e3 * float(np.mean(s)) for mode, s in seconds.items()}
            ratio = p50["open"] / p50["closed"]
            result["sizes"][str(kb)] = {
                **{mode: {"p50_ms": round(p50[mode], 3), "mean_ms": round(mean[mode], 3)} for mode in MODES},
                "open_over_closed_p50": round(ratio, 4),
            }
            print(f"{kb} kB pages: closed p50 {p50['closed']:.2f} ms (mean {mean['closed']:.2f}), "
                  f"open p50 {p50['open']:.2f} ms (mean {mean['open']:.2f}), open/closed p50 {ratio:.3f}")  # fmt: skip
    finally:
        for collection, _ in loaded.values():
            collection.close()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    typer.run(main)
