"""Data-parallel training on Ray Train (`ssi train --ray ADDRESS --workers N`): the same trainer on N CPU workers.

The driver reads and featurizes the corpus once (pairs streamed: only counted) and puts it in Ray's
object store. Ray Train's TorchTrainer starts N workers in a gloo process group; each runs the ordinary
`Trainer` on its share of the pair stream (every N-th query run of the file, training.pair_stream), and
every step applies the workers' *mean* gradient: each Adagrad table all-reduces its gradient and the
union of the rows it touches before stepping, so the models start equal (one seed) and stay equal.
Rank 0 validates and broadcasts the metrics, so every worker keeps the same best step and stops at
the same step (the time budget is decided together), then writes the bundle exactly as `ssi train`
does. A worker reads the pairs file and, on rank 0, writes --out: on a cluster of several machines
both must be on storage every node sees.

This module is the only part of training/ that imports Ray (pyproject's import contracts).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ssi.bundle import load_bundle
from ssi.forms import Form
from ssi.products import DocMatrix
from training.data import TrainingData
from training.models import SSIModel
from training.models.block import Block
from training.models.optim import RowAdagrad
from training.run import build_validator, finish_training, load_data, resolve_lexical, resolve_recipe, stream_summary
from training.settings import TrainSettings
from training.trainer import Trainer

# Kinds whose every table learns through RowAdagrad.step, once per step (what gradient averaging wraps).
DATA_PARALLEL_KINDS = ("lowrank", "symmetric", "noidentity", "diagonal", "fullw", "psi3")
SUMMARY_FILE = "summary.json"


class AveragedAdagrad(RowAdagrad):
    """A model's RowAdagrad whose step applies the mean of the workers' gradients, on the union of their rows."""

    def __init__(self, inner: RowAdagrad, world: int) -> None:
        self.weight, self.lr, self.accumulator = inner.weight, inner.lr, inner.accumulator
        self.world = world

    def step(self, grad: torch.Tensor, rows: np.ndarray) -> None:
        touched = torch.zeros(self.weight.shape[0], dtype=torch.uint8)
        touched[torch.from_numpy(rows.astype(np.int64))] = 1
        grad = grad.contiguous()
        dist.all_reduce(grad)
        dist.all_reduce(touched, op=dist.ReduceOp.MAX)
        super().step(grad.div_(self.world), np.flatnonzero(touched.numpy()))

    def step_rows(self, g: torch.Tensor, rows: np.ndarray) -> None:
        raise NotImplementedError("per-row steps (per-document vectors) are not averaged across workers")


class AveragedModel(SSIModel):
    """A model whose optimizers average gradients across workers, and whose export sees every worker's rows.

    Kinds zero the rows no update reached at export (LowRank.export says why); each worker marks only
    the rows of its own batches, so the export first ORs those masks (every bool tensor of the model).
    """

    def __init__(self, model: SSIModel, world: int) -> None:
        if model.kind not in DATA_PARALLEL_KINDS:
            raise ValueError(f"--ray trains {', '.join(DATA_PARALLEL_KINDS)}, not '{model.kind}'")
        self.inner = model
        self.shape = model.shape
        for name, value in vars(model).items():
            if isinstance(value, RowAdagrad):
                setattr(model, name, AveragedAdagrad(value, world))

    def scores(self, block: Block) -> np.ndarray:
        return self.inner.scores(block)

    def update(self, block: Block, coeff: np.ndarray) -> None:
        self.inner.update(block, coeff)

    def export(self) -> Form:
        for name in sorted(vars(self.inner)):  # the same order on every worker
            mask = getattr(self.inner, name)
            if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
                union = mask.to(torch.uint8)
                dist.all_reduce(union, op=dist.ReduceOp.MAX)
                mask.copy_(union.bool())
        return self.inner.export()


class DataParallelTrainer(Trainer):
    """The Trainer on one worker: averaged gradients, rank 0's validation for all, a budget decided together."""

    def __init__(
        self, data: TrainingData, settings: TrainSettings, docs: DocMatrix | None = None, init: Form | None = None
    ) -> None:
        super().__init__(data, settings, docs=docs, init=init)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.model = AveragedModel(self.model, self.world)

    def _validate(self) -> dict[str, float]:
        form = self.model.export()  # every worker: the export is collective
        metrics = [self.validator(form) if self.rank == 0 and self.validator is not None else None]
        dist.broadcast_object_list(metrics, src=0)
        return metrics[0] or {}

    def _out_of_budget(self, steps: int, max_steps: int | None, elapsed: float, deadline: float | None) -> bool:
        spent = torch.tensor([int(super()._out_of_budget(steps, max_steps, elapsed, deadline))], dtype=torch.int32)
        dist.all_reduce(spent, op=dist.ReduceOp.MAX)
        return bool(spent.item())


def _worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: its share of the stream, the shared model; rank 0 writes the bundle."""
    import ray
    import ray.train

    settings = TrainSettings(**config["settings"])
    data: TrainingData = ray.get(config["data"])
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    assert data.stream is not None
    data.stream = data.stream.sharded(rank, world)
    init = load_bundle(settings.init_from) if settings.init_from is not None else None
    docs = data.vocab.doc_matrix(data.X_docs, ids=data.doc_ids)
    started = time.perf_counter()
    trainer = DataParallelTrainer(data, settings, docs, init.form if init is not None else None)
    if rank == 0:
        cached = trainer.lexical.cached if trainer.lexical is not None else None
        trainer.validator = build_validator(data, docs, settings, cached)
    elif data.valid_pairs:  # the same control flow as rank 0's; only rank 0 computes metrics
        trainer.validator = lambda form: {}
    prepared = time.perf_counter()
    result = trainer.run(show_progress=False)
    # Every worker's triples count; the most pairs any worker's buffer held.
    totals = torch.tensor([result.triples, stream_summary(trainer)["pairs_held_peak"]], dtype=torch.int64)
    dist.all_reduce(totals[:1])
    peak = totals[1:].clone()
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank != 0:
        ray.train.report({})
        return
    result = dataclasses.replace(result, triples=int(totals[0]))
    stream_info = {**stream_summary(trainer), "pairs_held_peak": int(peak[0]), "workers": world}
    summary = finish_training(
        settings, data, result, init, stream_info,
        seconds=(config["load_seconds"], prepared - started), started=started - config["load_seconds"],
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / SUMMARY_FILE).write_text(json.dumps(summary), encoding="utf-8")
        ray.train.report({"steps": summary["steps"]}, checkpoint=ray.train.Checkpoint.from_directory(folder))


def train_on_ray(settings: TrainSettings, show_progress: bool = True) -> dict[str, Any]:
    """`ssi train --ray`: load on the driver, train on `settings.workers` Ray Train workers; rank 0's summary."""
    try:
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

        from cluster.connect import connect
    except ImportError as exc:
        raise ValueError(f"--ray needs the cluster extra (pip install -e .[cluster]): {exc}") from None

    if settings.kind not in DATA_PARALLEL_KINDS:
        raise ValueError(f"--ray trains {', '.join(DATA_PARALLEL_KINDS)}, not '{settings.kind}'")
    started = time.perf_counter()
    # A worker asks for --threads CPUs (a local Ray instance gets exactly what the workers ask for).
    ray = connect(settings.ray or "local", num_cpus=settings.workers * settings.threads)
    init = load_bundle(settings.init_from) if settings.init_from is not None else None
    settings = resolve_recipe(resolve_lexical(settings, init))
    data = load_data(settings, init)
    out = settings.out.resolve()
    storage = out.parent / f".{out.name}.ray-train"
    config = {
        "settings": settings.model_dump(mode="json") | {"out": str(out)},
        "data": ray.put(data),
        "load_seconds": time.perf_counter() - started,
    }
    del data
    trainer = TorchTrainer(
        _worker,
        train_loop_config=config,
        scaling_config=ScalingConfig(
            num_workers=settings.workers, use_gpu=False, resources_per_worker={"CPU": settings.threads}
        ),
        run_config=RunConfig(storage_path=str(storage), name="run"),
    )
    try:
        result = trainer.fit()
        if result.checkpoint is None:
            raise RuntimeError(f"Ray Train ended without rank 0's bundle: {result.error}")
        with result.checkpoint.as_directory() as folder:
            summary: dict[str, Any] = json.loads((Path(folder) / SUMMARY_FILE).read_text(encoding="utf-8"))
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    summary["seconds"]["total"] = round(time.perf_counter() - started, 1)
    return summary
