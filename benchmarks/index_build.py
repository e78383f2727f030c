"""Index build, stage by stage: how many documents per second each step of a from-scratch build takes.

    python -m benchmarks.index_build --bundle B --corpus $W/docs.jsonl.gz --passages 100000

The corpus is cut into 60-word passages (`passage_corpus`, as `ssi bench --passages` does; written
once under --work-dir) and taken through the build's steps in one process: the featurizer the build
uses (`BulkFeaturizer`, tokenizing and tf-idf rows as arrays), the form's index vectors
(`Embedder.embed_documents`) and the FAISS add (`VectorIndex.build`). Beside it, the reference path
(`ssi.tokenize.tokenize` per text, then `Vocabulary.featurize_tokens`) is timed and its rows compared
with the featurizer's, byte for byte. Then the service's own build end to end: the passages imported
into a fresh SQLite store, and `open_state` with an empty cache (store read, featurize, embed, FAISS
add, progress reporting) once per --build-workers count, timed from the call to the ready state.
Documents per second and each stage's share are reported, wall clock and CPU time of this process
(worker processes' CPU is not in it; the machine may be shared: the load average is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import scipy.sparse as sp

from service.bench.queries import passage_corpus
from service.bulk_featurize import BulkFeaturizer
from service.embedding import Embedder
from service.index import IndexConfig, VectorIndex
from service.settings import Settings
from service.state_builder import open_state
from service.store import DocumentStore
from ssi.bundle import load_bundle
from ssi.corpus import iter_corpus
from ssi.tokenize import tokenize

T = TypeVar("T")


class Clock:
    """Wall and CPU seconds spent per named stage, summed over calls."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def run(self, stage: str, work: Callable[[], T]) -> T:
        wall, cpu = time.perf_counter(), time.process_time()
        result = work()
        self.wall[stage] = self.wall.get(stage, 0.0) + time.perf_counter() - wall
        self.cpu[stage] = self.cpu.get(stage, 0.0) + time.process_time() - cpu
        return result

    def report(self, stages: list[str], documents: int) -> dict:
        wall = sum(self.wall[s] for s in stages)
        return {
            "seconds": round(wall, 3),
            "cpu_seconds": round(sum(self.cpu[s] for s in stages), 3),
            "docs_per_second": round(documents / wall) if wall else None,
            "stages": {
                s: {
                    "seconds": round(self.wall[s], 3),
                    "cpu_seconds": round(self.cpu[s], 3),
                    "docs_per_second": round(documents / self.wall[s]) if self.wall[s] else None,
                    "share": round(self.wall[s] / wall, 3) if wall else None,
                }
                for s in stages
            },
        }


def same_rows(a: sp.csr_matrix, b: sp.csr_matrix) -> bool:
    """Byte-identical CSR matrices: shape, index dtypes, structure and float32 values."""
    return (
        a.shape == b.shape
        and a.indices.dtype == b.indices.dtype
        and a.indptr.dtype == b.indptr.dtype
        and a.data.dtype == b.data.dtype
        and a.indptr.tobytes() == b.indptr.tobytes()
        and a.indices.tobytes() == b.indices.tobytes()
        and a.data.tobytes() == b.data.tobytes()
    )


def in_process(bundle_path: Path, texts: list[str], batch: int) -> dict:
    """The build's steps over `texts` in memory, the reference featurizer beside the bulk one."""
    bundle = load_bundle(bundle_path)
    embedder = Embedder(bundle, threads=2)
    clock = Clock()
    featurizer = clock.run("featurizer setup", lambda: BulkFeaturizer(bundle.vocab))
    embeddings = np.empty((len(texts), bundle.manifest.index_dims), dtype=np.float32)
    identical = True
    for start in range(0, len(texts), batch):
        chunk = texts[start : start + batch]
        tokens = clock.run("reference: tokenize", lambda: [tokenize(text) for text in chunk])  # noqa: B023
        reference = clock.run("reference: tf-idf rows", lambda: bundle.vocab.featurize_tokens(tokens, documents=True))  # noqa: B023
        tfidf = clock.run("featurize (bulk)", lambda: featurizer.featurize(chunk))  # noqa: B023
        identical = identical and same_rows(reference, tfidf)
        embeddings[start : start + len(chunk)] = clock.run("embed", lambda: embedder.embed_documents(tfidf))  # noqa: B023
    clock.run("faiss add", lambda: VectorIndex.build(IndexConfig(), embeddings.shape[1], embeddings))
    build = ["featurizer setup", "featurize (bulk)", "embed", "faiss add"]
    before = ["reference: tokenize", "reference: tf-idf rows", "embed", "faiss add"]
    return {
        "form": bundle.manifest.form,
        "index_dims": bundle.manifest.index_dims,
        "bulk_rows_identical_to_reference": identical,
        "build": clock.report(build, len(texts)),
        "with_reference_featurizer": clock.report(before, len(texts)),
    }


def service_build(
    bundle_path: Path, corpus: Path, work: Path, batch: int, workers: list[int], start_up: list[int], threads: int
) -> dict:
    """The service's build from an empty data folder: the store import, then `open_state` computing the state
    with each SSI_BUILD_WORKERS of `workers` (no snapshot is written, so each starts from an empty cache), and for a
    hybrid bundle each of `start_up`'s threads for the documents' encoding (0: the serving encoder's SSI_THREADS,
    as a reload builds; a first load uses the usable cores), the sentence cache emptied before each."""
    shutil.rmtree(work, ignore_errors=True)
    settings = Settings(bundle=bundle_path, corpus=corpus, cache_dir=work / "cache", embed_batch=batch, threads=threads)
    clock = Clock()
    store = clock.run("store import", lambda: DocumentStore.open_for_corpus(settings.store_dir, "documents", corpus))
    report: dict = {"documents": store.count()}
    try:
        report["store import"] = clock.report(["store import"], report["documents"])
        bundle = load_bundle(bundle_path)
        for n in workers:
            for t in start_up if bundle.sentence is not None else [0]:
                settings = settings.model_copy(update={"build_workers": n})
                shutil.rmtree(settings.index_dir, ignore_errors=True)  # the sentence cache with it
                stage = f"open_state, {n} build workers" + (f", start-up encoder of {t} threads" if t else "")
                build = partial(open_state, collection="documents", bundle=bundle, store=store, settings=settings)
                clock.run(stage, partial(build, start_up_threads=t or None))
                report[stage] = clock.report([stage], report["documents"])
    finally:
        store.close()
        shutil.rmtree(work, ignore_errors=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=Settings.model_fields["embed_batch"].default)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/ssi-index-build"))
    parser.add_argument("--skip-service", action="store_true", help="only the in-process stages")
    parser.add_argument("--skip-stages", action="store_true", help="only the service's build")
    parser.add_argument(
        "--build-workers", default="0,1", help="SSI_BUILD_WORKERS values to time the service's build with"
    )
    parser.add_argument(
        "--start-up-threads", default="0", help="a hybrid bundle's encoding threads at a first load (0: SSI_THREADS)"
    )
    parser.add_argument("--threads", type=int, default=Settings().threads, help="SSI_THREADS of the build")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()

    jsonl = args.work_dir / f"passages-{args.passages}.jsonl"
    if not jsonl.exists():
        passage_corpus(args.corpus, jsonl, limit=args.passages)
    texts = [doc.full_text for doc in iter_corpus(jsonl)]
    report: dict = {"documents": len(texts), "batch": args.batch, "load_average": os.getloadavg()}
    if not args.skip_stages:
        report["in_process"] = in_process(args.bundle, texts, args.batch)
    if not args.skip_service:
        workers = [int(n) for n in args.build_workers.split(",")]
        start_up = [int(n) for n in args.start_up_threads.split(",")]
        report["service"] = service_build(
            args.bundle, jsonl, args.work_dir / "service", args.batch, workers, start_up, args.threads
        )
    report["load_average_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
