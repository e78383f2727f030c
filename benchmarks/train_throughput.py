"""Training throughput: the block trainer against a plain per-triple PyTorch SSI, same data, same run.

The plain baseline is how SSI is usually written in PyTorch: each triple embeds its own q, d⁺ and
d⁻ with `EmbeddingBag` (tf-idf weights as per-sample weights), autograd computes the gradients, and
Adagrad applies them. The block trainer shares each document's V d across every triple of a
step (training/models/block.py). Both run for the same wall time on the same corpus, N, D and
threads; the result is triples/s for each, their ratio, and where the block trainer's time goes.

    python -m benchmarks.train_throughput --corpus ../shared/data/wikispeedia/docs.jsonl.gz \\
        --pairs ../shared/data/wikispeedia/links.train.tsv.gz --seconds 60
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import scipy.sparse as sp
import torch
import typer

from training.data import TrainingData, load_training_data
from training.settings import TrainSettings
from training.trainer import Trainer


class PlainSSI(torch.nn.Module):
    """f(q, d) = (U q)·(V d) + q·d with one EmbeddingBag lookup per text of every triple."""

    def __init__(self, n_words: int, n_dims: int, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        # Dense gradients: with full documents, sparse ones (one row per looked-up word) cost more
        # to coalesce than a dense (D × N) Adagrad step.
        self.U = torch.nn.EmbeddingBag(n_words, n_dims, mode="sum")
        self.V = torch.nn.EmbeddingBag(n_words, n_dims, mode="sum")
        with torch.no_grad():
            self.U.weight.normal_(0.0, 0.1, generator=gen)
            self.V.weight.zero_()

    def forward(self, bag_q: tuple, bag_d: tuple) -> torch.Tensor:
        return (self.U(*bag_q) * self.V(*bag_d)).sum(dim=1)


def _bag(X: sp.csr_matrix, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    sub = X[rows]
    return (
        torch.from_numpy(sub.indices.astype(np.int64)),
        torch.from_numpy(sub.indptr[:-1].astype(np.int64)),
        torch.from_numpy(sub.data.astype(np.float32)),
    )


def _to(bag: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(device) for t in bag)


def _pair_dots(X: sp.csr_matrix, a: np.ndarray, b: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(X[a].multiply(X[b]).sum(axis=1), dtype=np.float32).ravel())


def run_plain(
    data: TrainingData, n_dims: int, seconds: float, batch: int, seed: int, device: torch.device
) -> dict[str, float]:
    X = data.X_docs
    rng = np.random.default_rng(seed)
    model = PlainSSI(X.shape[1], n_dims, seed).to(device)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    q_rows, d_rows = data.train.query_rows, data.train.doc_rows
    n_docs = X.shape[0]
    triples = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pick = rng.integers(0, q_rows.size, size=batch)
        q, pos = q_rows[pick], d_rows[pick]
        neg = rng.integers(0, n_docs, size=batch)
        bq = _to(_bag(data.X_queries, q), device)
        s_pos = model(bq, _to(_bag(X, pos), device)) + _pair_dots(X, q, pos).to(device)
        s_neg = model(bq, _to(_bag(X, neg), device)) + _pair_dots(X, q, neg).to(device)
        loss = torch.relu(1.0 - s_pos + s_neg).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        triples += batch
    elapsed = time.perf_counter() - start
    return {"triples": triples, "seconds": elapsed, "triples_per_second": triples / elapsed}


def run_block(trainer: Trainer, seconds: float) -> dict[str, float]:
    """The product's trainer, with the share of time each phase of its step took.

    On a GPU the steps run unsynchronised (as `ssi train` runs them) for the rate, then the phases are timed
    over a tenth of the time again, each boundary waiting for the device.
    """
    trainer.phase_seconds = dict.fromkeys(trainer.phase_seconds, 0.0)
    triples, steps, elapsed = _steps(trainer, seconds)
    if trainer.on_device:
        trainer.measure_phases = True
        _, _, phase_elapsed = _steps(trainer, seconds / 10)
        trainer.measure_phases = False
    else:
        phase_elapsed = elapsed
    return {
        "triples": triples,
        "steps": steps,
        "seconds": elapsed,
        "triples_per_second": triples / elapsed,
        "phase_share": {k: round(v / phase_elapsed, 3) for k, v in trainer.phase_seconds.items()},
    }


def _steps(trainer: Trainer, seconds: float) -> tuple[int, int, float]:
    """(triples, steps, seconds) of steps for `seconds` of wall time, the device's last step finished."""
    used: int | torch.Tensor = 0
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        used += trainer.step()[2]
        steps += 1
    triples = int(used)  # waits for the device
    return triples, steps, time.perf_counter() - start


def main(
    corpus: Annotated[Path, typer.Option(help="Corpus JSONL.")],
    pairs: Annotated[Path, typer.Option(help="Document-document training pairs.")],
    seconds: Annotated[float, typer.Option(help="Wall time for each of the two trainers.")] = 60.0,
    dims: Annotated[int, typer.Option(help="N.")] = 100,
    vocab_size: Annotated[int, typer.Option(help="D.")] = 30000,
    threads: Annotated[
        list[int] | None,
        typer.Option(help="torch threads (repeat for several: the block trainer runs at each; plain at the first)."),
    ] = None,
    plain_seconds: Annotated[float | None, typer.Option(help="Wall time of the plain baseline (0: skip it).")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N, for both (training.device).")] = "cpu",
    plain_batch: Annotated[int, typer.Option(help="Triples per step of the plain baseline.")] = 256,
    out: Annotated[Path, typer.Option(help="JSON result file.")] = Path("bench-results/train_throughput.json"),
) -> None:
    counts = threads or [2]
    torch.set_num_threads(counts[0])
    data = load_training_data(corpus, pairs=pairs, vocab_size=vocab_size)
    settings = TrainSettings(
        corpus=corpus, pairs=pairs, out=Path("unused"), n_dims=dims, threads=counts[0], device=device
    )
    trainer = Trainer(data, settings, docs=data.vocab.doc_matrix(data.X_docs))
    for _ in range(3):  # warm-up (first-touch allocations, the GPU's kernels)
        int(trainer.step()[2])
    by_threads = {}
    for count in counts:
        torch.set_num_threads(count)
        by_threads[count] = run_block(trainer, seconds)
    block = by_threads[counts[0]]
    torch.set_num_threads(counts[0])
    plain_for = seconds if plain_seconds is None else plain_seconds
    plain = run_plain(data, dims, plain_for, plain_batch, seed=0, device=trainer.device) if plain_for > 0 else None
    result = {
        "corpus": str(corpus),
        "n_docs": data.X_docs.shape[0],
        "mean_nnz_per_doc": round(data.X_docs.nnz / data.X_docs.shape[0], 1),
        "train_pairs": data.train.size,
        "N": dims,
        "D": data.vocab.size,
        "threads": counts[0],
        "device": trainer.device_name,
        "machine": platform.machine(),
        "torch": torch.__version__,
        "block_trainer": block,
        "block_trainer_by_threads": by_threads,
        "plain_pytorch": plain,
        "speedup": block["triples_per_second"] / plain["triples_per_second"] if plain else None,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    lines = [f"corpus {data.X_docs.shape[0]} docs, N={dims}, D={data.vocab.size}, device {trainer.device_name}"]
    for count, run in by_threads.items():
        rate = run["triples_per_second"]
        lines.append(f"block trainer, {count:>2} threads : {rate:>10,.0f} triples/s  (phases {run['phase_share']})")
    if plain is not None:
        lines.append(f"plain PyTorch, {counts[0]:>2} threads : {plain['triples_per_second']:>10,.0f} triples/s")
        lines.append(f"speedup                  : {result['speedup']:.1f}x")
    typer.echo("\n".join([*lines, f"-> {out}"]))


if __name__ == "__main__":
    typer.run(main)
