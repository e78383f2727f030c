"""How long a snapshot's capture holds the index: before (a FAISS copy) and now (ids and the live bitmap).

A snapshot captures the state under the index's read lock, and the next write's in-memory apply
waits for it (before this change it also held the collection's writer lock, so every write waited).
For a flat index the capture no longer serializes the FAISS index: its vectors are the cached
embeddings, whose filled rows never change, so the snapshot saves those and the index is rebuilt
from them on load. What is left is copying the row ids and the live bitmap.

    python -m benchmarks.snapshot_capture --rows 1000000 --dims 64
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

import faiss
import numpy as np
import typer

from service.index import IndexConfig, VectorIndex
from service.rows import RowTable


def best_ms(work: Callable[[], object], repeat: int = 5) -> float:
    """The fastest of `repeat` runs, in milliseconds: the cost itself, without the noise of a shared machine."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main(
    rows: Annotated[int, typer.Option(help="Rows of the flat index")] = 1_000_000,
    dims: Annotated[int, typer.Option(help="Dimension of the index vectors")] = 64,
) -> None:
    vectors = np.random.default_rng(0).standard_normal((rows, dims)).astype(np.float32)
    index = VectorIndex.build(IndexConfig("flat"), dims, vectors)
    table = RowTable([f"doc-{i}" for i in range(rows)])
    # Before, the flat index was a FAISS IndexFlatIP in an id map, serialized while the lock was held.
    faiss_flat = faiss.IndexIDMap2(faiss.IndexFlatIP(dims))
    faiss_flat.add_with_ids(vectors, np.arange(rows, dtype=np.int64))
    before = best_ms(lambda: (faiss.serialize_index(faiss_flat), list(table.doc_ids), table.live.copy()))
    now = best_ms(lambda: (index.serialize(), index.all_vectors(), list(table.doc_ids), table.live.copy()))
    typer.echo(f"flat index, {rows:,} rows x {dims}: capture held {before:.0f} ms before, {now:.0f} ms now")


if __name__ == "__main__":
    typer.run(main)
