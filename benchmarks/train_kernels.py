"""The CPU trainer's kernels against the ones they replaced, steps in turn in one process (issue 36).

A step of the block trainer (Wikispeedia's shape, as `benchmarks.train_throughput`) with today's kernels, then one
with the earlier ones switched back in (X V by the plain row loop, PyTorch's four-op dense Adagrad, ∂loss/∂S's two
products dense: training.models.spmm, training.models.optim), on the same trainer, pair after pair, the order
swapped every pair; both see the same machine, so a neighbour moves both. Reports each one's median step and the
ratio of the medians, with a bootstrap interval over pairs.

    python -m benchmarks.train_kernels --corpus $W/docs.jsonl.gz --pairs $W/links.train.tsv.gz --threads 2
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import typer

from training.data import load_training_data
from training.models import optim, spmm
from training.settings import TrainSettings
from training.trainer import Trainer


@contextmanager
def earlier_kernels() -> Iterator[None]:
    """The kernels before the blocked X V, the one-pass Adagrad and the sparse ∂loss/∂S products."""
    saved = (spmm.BLOCKED_TABLE_BYTES, spmm.SPARSE_COEFF_SHARE, optim.NUMBA_DENSE)
    spmm.BLOCKED_TABLE_BYTES, spmm.SPARSE_COEFF_SHARE, optim.NUMBA_DENSE = 1 << 62, -1.0, False
    try:
        yield
    finally:
        spmm.BLOCKED_TABLE_BYTES, spmm.SPARSE_COEFF_SHARE, optim.NUMBA_DENSE = saved


def timed_step(trainer: Trainer, earlier: bool) -> float:
    if earlier:
        with earlier_kernels():
            started = time.perf_counter()
            trainer.step()
            return time.perf_counter() - started
    started = time.perf_counter()
    trainer.step()
    return time.perf_counter() - started


def main(
    corpus: Annotated[Path, typer.Option(help="Corpus JSONL.")],
    pairs: Annotated[Path, typer.Option(help="Document-document training pairs.")],
    threads: Annotated[int, typer.Option(help="torch (and numba) threads.")] = 2,
    steps: Annotated[int, typer.Option(help="Pairs of steps.")] = 40,
    dims: Annotated[int, typer.Option(help="N.")] = 100,
    vocab_size: Annotated[int, typer.Option(help="D.")] = 30000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    out: Annotated[Path, typer.Option(help="JSON result file.")] = Path("bench-results/train_kernels.json"),
) -> None:
    torch.set_num_threads(threads)
    data = load_training_data(corpus, pairs=pairs, vocab_size=vocab_size)
    settings = TrainSettings(corpus=corpus, pairs=pairs, out=Path("unused"), n_dims=dims, threads=threads)
    trainer = Trainer(data, settings, docs=data.vocab.doc_matrix(data.X_docs))
    for earlier in (True, False, True, False):  # warm-up: numba's compilation, first-touch allocations
        timed_step(trainer, earlier)
    now, before = np.empty(steps), np.empty(steps)
    for i in range(steps):
        for earlier in (i % 2 == 0, i % 2 != 0):
            (before if earlier else now)[i] = timed_step(trainer, earlier)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, steps, size=(2000, steps))
    boot = np.median(before[picks], axis=1) / np.median(now[picks], axis=1)
    result = {
        "threads": threads,
        "steps": steps,
        "before_median_ms": round(1000 * float(np.median(before)), 1),
        "now_median_ms": round(1000 * float(np.median(now)), 1),
        "ratio": round(float(np.median(before) / np.median(now)), 3),
        "ratio_95": [round(float(x), 3) for x in np.quantile(boot, [0.025, 0.975])],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    typer.echo(
        f"{threads} threads, {steps} pairs of steps: earlier kernels {result['before_median_ms']} ms, now "
        f"{result['now_median_ms']} ms a step: {result['ratio']}x ({result['ratio_95'][0]} ... {result['ratio_95'][1]})"
    )


if __name__ == "__main__":
    typer.run(main)
