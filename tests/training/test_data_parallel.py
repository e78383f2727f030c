"""Gradient averaging of data-parallel training (training.ray_train) in a real two-process gloo group, without Ray.

Ray Train only starts the processes and the group; what keeps the workers' models one model is
checked here: each step applies the mean gradient on the union of rows, and after training on
different shares of the pairs both workers export the same arrays.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.training.synonyms import SynonymCorpus, make_synonym_corpus


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rank(rank: int, port: int, folder: str) -> None:
    from training.data import load_training_data
    from training.models.optim import RowAdagrad
    from training.ray_train import AveragedAdagrad, DataParallelTrainer
    from training.settings import TrainSettings

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    out = Path(folder)
    # One step by hand: rank 0 touches rows 0 and 1, rank 1 rows 1 and 3.
    table = torch.ones(5, 2)
    opt = AveragedAdagrad(RowAdagrad(table, lr=0.5), world=2)
    grad = torch.zeros(5, 2)
    rows = np.array([0, 1]) if rank == 0 else np.array([1, 3])
    grad[torch.from_numpy(rows)] = float(rank + 1)
    opt.step(grad, rows)
    np.save(out / f"table{rank}.npy", table.numpy())
    np.save(out / f"acc{rank}.npy", opt.accumulator.numpy())
    # Training on different shares of the stream: both workers end with one model.
    data = load_training_data(out / "syn" / "corpus.jsonl", pairs=out / "syn" / "train.tsv", min_df=2, stream_buffer=64)
    assert data.stream is not None
    data.stream = data.stream.sharded(rank, 2)
    settings = TrainSettings(
        corpus=out / "syn" / "corpus.jsonl", pairs=out / "syn" / "train.tsv", out=out / "b", stream_pairs=True,
        epochs=3, n_dims=8, lr=0.1, seed=1, threads=1,
    )  # fmt: skip
    trainer = DataParallelTrainer(data, settings)
    result = trainer.run(show_progress=False)
    np.save(out / f"U{rank}.npy", np.asarray(result.best.values["U"]))
    np.save(out / f"steps{rank}.npy", np.array([result.steps, trainer.sampler.buffer.passes]))
    dist.destroy_process_group()


def test_workers_apply_the_mean_gradient_and_stay_one_model(tmp_path: Path) -> None:
    data: SynonymCorpus = make_synonym_corpus(tmp_path / "syn")
    assert data.n_docs > 0
    mp.start_processes(_rank, args=(_free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    # Mean gradient (1 + 2)/2 = 1.5 on row 1 (both workers), 1/2 on row 0 and 2/2 on row 3 (one each): Adagrad
    # accumulates its square, its first step moves each touched entry by lr · g/|g| = 0.5, and rows 2 and 4,
    # which no worker touched, stay.
    expected = np.ones((5, 2), dtype=np.float32)
    expected[[0, 1, 3]] -= 0.5
    squares = np.repeat(np.array([[0.25], [2.25], [0.0], [1.0], [0.0]], dtype=np.float32), 2, axis=1)
    for rank in (0, 1):
        np.testing.assert_allclose(np.load(tmp_path / f"table{rank}.npy"), expected, rtol=1e-6)
        np.testing.assert_allclose(np.load(tmp_path / f"acc{rank}.npy"), squares, rtol=1e-6)
    u0, u1 = np.load(tmp_path / "U0.npy"), np.load(tmp_path / "U1.npy")
    assert np.any(u0 != 0)
    np.testing.assert_array_equal(u0, u1)
    steps0, steps1 = np.load(tmp_path / "steps0.npy"), np.load(tmp_path / "steps1.npy")
    assert steps0[0] == steps1[0] == 3  # 72 runs each, batch 72: one step an epoch, three epochs
