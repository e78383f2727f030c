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


def _pair_dots(X: sp.csr_matrix, a: np.ndarray, b: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(X[a].multiply(X[b]).sum(axis=1), dtype=np.float32).ravel())


def run_plain(data: TrainingData, n_dims: int, seconds: float, batch: int, seed: int) -> dict[str, float]:
    X = data.X_docs
    rng = np.random.default_rng(seed)
    model = PlainSSI(X.shape[1], n_dims, seed)
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
    q_rows, d_rows = data.train.query_rows, data.train.doc_rows
    n_docs = X.shape[0]
    triples = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pick = rng.integers(0, q_rows.size, size=batch)
        q, pos = q_rows[pick], d_rows[pick]
        neg = rng.integers(0, n_docs, size=batch)
        bq = _bag(data.X_queries, q)
        s_pos = model(bq, _bag(X, pos)) + _pair_dots(X, q, pos)
        s_neg = model(bq, _bag(X, neg)) + _pair_dots(X, q, neg)
        loss = torch.relu(1.0 - s_pos + s_neg).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        triples += batch
    elapsed = time.perf_counter() - start
    return {"triples": triples, "seconds": elapsed, "triples_per_second": triples / elapsed}


def run_block(trainer: Trainer, seconds: float) -> dict[str, float]:
    """The product's trainer, with the share of time each phase of its step took."""
    trainer.phase_seconds = dict.fromkeys(trainer.phase_seconds, 0.0)
    triples = steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        triples += trainer.step()[2]
        steps += 1
    elapsed = time.perf_counter() - start
    return {
        "triples": triples,
        "steps": steps,
        "seconds": elapsed,
        "triples_per_second": triples / elapsed,
        "phase_share": {k: round(v / elapsed, 3) for k, v in trainer.phase_seconds.items()},
    }


def main(
    corpus: Annotated[Path, typer.Option(help="Corpus JSONL.")],
    pairs: Annotated[Path, typer.Option(help="Document-document training pairs.")],
    seconds: Annotated[float, typer.Option(help="Wall time for each of the two trainers.")] = 60.0,
    dims: Annotated[int, typer.Option(help="N.")] = 100,
    vocab_size: Annotated[int, typer.Option(help="D.")] = 30000,
    threads: Annotated[int, typer.Option(help="torch threads for both.")] = 2,
    plain_batch: Annotated[int, typer.Option(help="Triples per step of the plain baseline.")] = 256,
    out: Annotated[Path, typer.Option(help="JSON result file.")] = Path("bench-results/train_throughput.json"),
) -> None:
    torch.set_num_threads(threads)
    data = load_training_data(corpus, pairs=pairs, vocab_size=vocab_size)
    settings = TrainSettings(corpus=corpus, pairs=pairs, out=Path("unused"), n_dims=dims, threads=threads)
    trainer = Trainer(data, settings, docs=data.vocab.doc_matrix(data.X_docs))
    trainer.step()  # warm-up (first-touch allocations)
    block = run_block(trainer, seconds)
    plain = run_plain(data, dims, seconds, plain_batch, seed=0)
    result = {
        "corpus": str(corpus),
        "n_docs": data.X_docs.shape[0],
        "mean_nnz_per_doc": round(data.X_docs.nnz / data.X_docs.shape[0], 1),
        "train_pairs": data.train.size,
        "N": dims,
        "D": data.vocab.size,
        "threads": threads,
        "machine": platform.machine(),
        "torch": torch.__version__,
        "block_trainer": block,
        "plain_pytorch": plain,
        "speedup": block["triples_per_second"] / plain["triples_per_second"],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    typer.echo(
        f"corpus {data.X_docs.shape[0]} docs, N={dims}, D={data.vocab.size}, threads={threads}\n"
        f"block trainer : {block['triples_per_second']:>10,.0f} triples/s  (phases {block['phase_share']})\n"
        f"plain PyTorch : {plain['triples_per_second']:>10,.0f} triples/s\n"
        f"speedup       : {result['speedup']:.1f}x   -> {out}"
    )


if __name__ == "__main__":
    typer.run(main)
