"""The training loop: sample a step's triples, score the block, take a margin-ranking step, validate.

Validation runs every `eval_every` steps and at the end; the best-scoring export is kept (the
"best checkpoint"), and with `patience` > 0 training stops after that many validations without
improvement. The budget is `epochs` (each training query visited once per epoch) and/or
`max_minutes` of training-loop wall time, whichever comes first.

Pairs cut from the corpus (`--self-pairs`) often teach nothing a BM25 base does not already know: validation
never beats step 0 and the whole budget buys the starting model. So with self-made pairs training also stops
once `base_patience` validations and `base_patience_minutes` (both) have gone by without beating step 0; the
step-0 model is exported and the result says so (`stopped_without_gain`).

On a GPU (`--device`, training.device) the whole step runs there: the triples are drawn there
(training.device_sampling), the rows gathered there (training.models.device_rows), and the loss, the
gradients and Adagrad stay there; the host only queues work. A step's loss and triple count come back as
tensors, read when the progress bar or validation asks for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ssi.forms import DocumentKeys, Form
from ssi.products import DocMatrix
from training.data import TrainingData
from training.device import resolve_device
from training.device_sampling import DevicePlan, DeviceTripleSampler
from training.gram import LexicalBlocks
from training.hybrid import SENTENCE_WEIGHT, SentenceTraining
from training.keywords import cut_to_keywords
from training.loss import margin_ranking
from training.models import REGISTRY, ModelShape, SSIModel, make_model
from training.models.block import Block, SparseRows, Triples
from training.models.device_rows import DeviceCSR
from training.pair_stream import StreamSampler
from training.sampling import StepPlan, TripleSampler
from training.settings import TrainSettings

Validator = Callable[[Form], dict[str, float]]
SELECTION_METRIC = "map"
DEVICE_REFRESH_STEPS = 25  # on a GPU the progress bar reads the loss (a wait on the device) this often


@dataclass
class TrainResult:
    best: Form
    best_metrics: dict[str, float]
    best_step: int
    steps: int
    epochs: float
    triples: int
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    stopped_without_gain: bool = False  # self-made pairs never beat step 0 in the base-patience window
    device: str = "cpu"  # where the steps ran (training.device), with the GPU's name
    members: list[dict[str, Any]] = field(default_factory=list)  # --ensemble: each member's seed, best step, metrics

    @property
    def triples_per_second(self) -> float:
        return self.triples / self.seconds if self.seconds > 0 else 0.0


class Trainer:
    def __init__(
        self,
        data: TrainingData,
        settings: TrainSettings,
        validator: Validator | None = None,
        docs: DocMatrix | None = None,
        init: Form | None = None,
        device_path: bool | None = None,
        sentence: SentenceTraining | None = None,
    ) -> None:
        """`init`: a trained model to warm-start from (a lowrank form for lowrank or psi3). `sentence`: a hybrid
        model's third part λ e(q)·e(d) (training.hybrid), its λ learned in the same steps (host path only).

        `device_path`: run the GPU's step (True) or the host's (False); None: the GPU's on a GPU. The tests run
        the GPU's step on the CPU, where it must give the host's results.
        """
        self.data = data
        self.settings = settings
        self.validator = validator
        self.sentence = sentence
        torch.set_num_threads(settings.threads)
        self.device = _training_device(settings, data)
        self.on_device = self.device.type != "cpu" if device_path is None else device_path
        if sentence is not None:  # λ's block is built on the host's step (training.hybrid)
            if device_path:
                raise ValueError("a hybrid model (--encoder) trains on the host's step")
            self.on_device = False
        vocab_size = data.vocab.size
        n_words = min(settings.frequent_words or vocab_size, vocab_size)
        doc_matrix = docs or data.vocab.doc_matrix(data.X_docs)
        self.n_words = n_words
        self.model: SSIModel = make_model(
            settings.kind,
            ModelShape(
                vocab_size=vocab_size,
                n_dims=settings.n_dims,
                n_words=n_words,
                init_scale=settings.init_scale,
                lr=settings.lr,
                seed=settings.seed,
                hash_size=settings.hash_size,
                gamma=settings.gamma,
                documents=DocumentKeys.of(data.doc_ids, doc_matrix.S) if _per_document(settings.kind) else None,
                device=self.device if self.on_device else torch.device("cpu"),
            ),
            init,
            settings.warm_lr_scale,
        )
        sampling = {
            "doc_doc": data.doc_doc,
            "batch_queries": settings.batch_queries,
            "positives_per_query": settings.positives_per_query,
            "negatives_per_positive": settings.negatives_per_positive,
            "pool_size": settings.pool_size,
            "hard_fraction": settings.hard_fraction,
            "hard_pool": settings.hard_pool,
            "seed": settings.seed,
        }
        n_docs = data.X_docs.shape[0]
        self._doc_rows = data.X_docs if self.model.reads_lexical_rows else doc_matrix.S
        self.phase_seconds = dict.fromkeys(("sample", "block", "scores", "loss", "update"), 0.0)
        self.measure_phases = not self.on_device  # on a GPU each phase boundary would wait for the device
        if self.on_device:
            self._device_setup(data, doc_matrix, sampling, n_words)
            return
        if data.stream is not None and data.stream_count is not None:  # streamed pairs (training.pair_stream)
            runs = data.stream_count.runs_of(data.stream.shard, data.stream.shards)
            # Data-parallel workers draw different triples: the seed differs by worker.
            sampling["seed"] = settings.seed + 7919 * data.stream.shard
            self.sampler: TripleSampler = StreamSampler(data.stream, runs, n_docs, **sampling)
        else:
            self.sampler = TripleSampler(data.train, n_docs, **sampling)
        # Keyword queries change every step: nothing to cache for them.
        max_gram = 0 if settings.query_words else settings.max_gram_entries
        self.keyword_rng = np.random.default_rng(settings.seed + 1)
        self.lexical = LexicalBlocks(data.X_queries, doc_matrix, max_gram) if self.model.needs_gram else None
        self._all_docs = SparseRows.of(self._doc_rows, n_words) if n_docs <= settings.pool_size else None

    def _device_setup(self, data: TrainingData, doc_matrix: DocMatrix, sampling: dict, n_words: int) -> None:
        """The corpus, the queries and (where it fits) the whole q·d table on the device, and its sampler."""
        s, device = self.settings, self.device
        _check_device_memory(device, data, self._doc_rows, s, n_words)
        self.sampler = DeviceTripleSampler(data.train, data.X_docs.shape[0], device=device, **sampling)
        self._device_queries = DeviceCSR(data.X_queries, n_words, device)
        self._device_docs = DeviceCSR(self._doc_rows, n_words, device)
        self._device_gram: torch.Tensor | None = None
        self._device_lexical: tuple[DeviceCSR, DeviceCSR] | None = None
        # The host keeps the whole q·d table too, where it fits: validation reads it (training.run).
        self.lexical = LexicalBlocks(data.X_queries, doc_matrix, s.max_gram_entries) if self.model.needs_gram else None
        if self.lexical is not None:
            cached = self.lexical.cached
            if cached is not None:
                self._device_gram = torch.from_numpy(cached).to(device)
            else:
                n_features = doc_matrix.X.shape[1]
                self._device_lexical = (
                    DeviceCSR(data.X_queries, n_features, device),
                    DeviceCSR(doc_matrix.X, n_features, device),
                )

    def _device_block(self, plan: DevicePlan) -> Block:
        queries = self._device_queries.rows(plan.queries)
        docs = self._device_docs.whole() if plan.pool is None else self._device_docs.rows(plan.pool)
        gram = None
        if self._device_gram is not None:
            gram = self._device_gram[plan.queries]
            gram = gram if plan.pool is None else gram[:, plan.pool]
        elif self._device_lexical is not None:
            lexical_queries, lexical_docs = self._device_lexical
            rows = lexical_docs.whole() if plan.pool is None else lexical_docs.rows(plan.pool)
            gram = rows.times(lexical_queries.dense(plan.queries).T.contiguous()).T.contiguous()
        return Block(queries=queries, docs=docs, gram=gram)

    def _block(self, queries: np.ndarray, pool: np.ndarray | None) -> Block:
        docs = self._all_docs if pool is None and self._all_docs is not None else None
        if docs is None:
            rows = self._doc_rows if pool is None else self._doc_rows[pool]
            docs = SparseRows.of(rows, self.n_words)
        rows = self.data.X_queries[queries]
        cut = None
        if self.settings.query_words:
            rows = cut = cut_to_keywords(rows, self.data.vocab.idf, self.settings.query_words, self.keyword_rng)
        gram = self.lexical.block(queries, pool, cut) if self.lexical is not None else None
        doc_rows = np.arange(self.data.X_docs.shape[0]) if pool is None else pool
        return Block(
            queries=SparseRows.of(rows, self.n_words),
            docs=docs,
            gram=None if gram is None else torch.from_numpy(gram),
            doc_rows=doc_rows,
        )

    def _clock(self) -> float:
        if self.measure_phases and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def step(self) -> tuple[float | torch.Tensor, float | torch.Tensor, int | torch.Tensor]:
        """One step; returns (loss, share of violated triples, triples used): numbers on the host, 0-d tensors
        on a GPU (reading them would wait for the step to finish).

        Wall time per phase accumulates in `phase_seconds` (the throughput benchmark reads it; on a GPU only
        with `measure_phases`, which waits for the device at each boundary).
        """
        t0 = self._clock()
        plan = self.sampler.plan()
        t1 = self._clock()
        block = self._device_block(plan) if isinstance(plan, DevicePlan) else self._block(plan.queries, plan.pool)
        t2 = self._clock()
        scores = self.model.scores(block)
        sentence = None
        if self.sentence is not None and not isinstance(plan, DevicePlan):
            assert block.doc_rows is not None  # the host's blocks always name their pool's rows
            sentence = self.sentence.block(plan.queries, block.doc_rows)
            scores = scores + self.sentence.weight * sentence
        t3 = self._clock()
        if isinstance(plan, DevicePlan):
            neg, valid = self.sampler.negatives(plan, scores)
            triples = Triples(plan.triple_query, plan.triple_pos, neg, valid, self.settings.margin)
            weights = plan.weights
        else:
            triples, weights = self._host_triples(plan, scores)
        loss, coeff, violated = margin_ranking(
            scores, triples.query, triples.pos, triples.neg, triples.valid, triples.margin, weights
        )
        t4 = self._clock()
        block.triples = triples
        self.model.update(block, coeff)
        if self.sentence is not None and sentence is not None:
            self.sentence.step(coeff, sentence)
        t5 = self._clock()
        if self.measure_phases:
            self._add_phases(t0, t1, t2, t3, t4, t5)
        used = triples.valid.sum()
        if isinstance(plan, DevicePlan):
            return loss, violated, used
        return float(loss), float(violated), int(used)

    def _host_triples(self, plan: StepPlan, scores: torch.Tensor) -> tuple[Triples, torch.Tensor | None]:
        neg, valid = self.sampler.negatives(plan, scores.numpy())
        as_tensor = torch.from_numpy
        query, pos = as_tensor(plan.triple_query), as_tensor(plan.triple_pos)
        triples = Triples(query, pos, as_tensor(neg), as_tensor(valid), self.settings.margin)
        return triples, None if plan.weights is None else as_tensor(plan.weights)

    def _add_phases(self, *marks: float) -> None:
        t0, t1, t2, t3, t4, t5 = marks
        for phase, a, b in (
            ("sample", t0, t1),
            ("block", t1, t2),
            ("scores", t2, t3),
            ("loss", t3, t4),
            ("update", t4, t5),
        ):
            self.phase_seconds[phase] += b - a

    def _validate(self) -> dict[str, float]:
        if self.validator is None:
            return {}
        if self.sentence is None:
            return self.validator(self.model.export())
        self.validator.sentence_weight = self.sentence.weight
        return {**self.validator(self.model.export()), SENTENCE_WEIGHT: self.sentence.weight}

    def run(self, show_progress: bool = True) -> TrainResult:
        s = self.settings
        max_steps = int(np.ceil(s.epochs * self.sampler.steps_per_epoch)) if s.epochs else None
        deadline = s.max_minutes * 60.0 if s.max_minutes else None
        history: list[dict[str, float]] = []
        best_metrics = self._validate()
        best_model = self.model.export() if self.validator is not None else None
        best_step, stale, validations = 0, 0, 0
        stopped_without_gain = False
        # Self-made pairs: stop once validation has not beaten step 0 for the window (both counts must pass).
        base_window = self.validator is not None and s.self_pairs is not None and s.base_patience > 0
        history.append({"step": 0, "seconds": 0.0, "triples": 0, **best_metrics})
        columns = (
            TextColumn("[bold]training[/]"),
            BarColumn(),
            TextColumn("step {task.completed:.0f} · {task.fields[rate]:,.0f} triples/s · loss {task.fields[loss]:.3f}"),
            TextColumn("· valid {task.fields[valid]}"),
            TimeElapsedColumn(),
        )
        total = max_steps if max_steps is not None else None
        steps = 0
        triples: int | torch.Tensor = 0
        loss: float | torch.Tensor = 0.0
        refresh = DEVICE_REFRESH_STEPS if self.on_device else 1
        start = time.perf_counter()
        with Progress(*columns, disable=not show_progress, transient=False) as progress:
            task = progress.add_task("train", total=total, rate=0.0, loss=0.0, valid=_fmt(best_metrics))
            while True:
                if self._out_of_budget(steps, max_steps, time.perf_counter() - start, deadline):
                    break
                loss, _violated, used = self.step()
                steps += 1
                triples += used
                if steps % refresh != 0 and steps % s.eval_every != 0:
                    continue
                elapsed = time.perf_counter() - start
                if deadline is not None and total is None:
                    progress.update(task, total=deadline, completed=min(elapsed, deadline))
                else:
                    progress.update(task, completed=steps)
                progress.update(task, rate=int(triples) / elapsed, loss=float(loss))
                if steps % s.eval_every == 0:
                    metrics = self._validate()
                    validations += 1
                    history.append(
                        {"step": steps, "seconds": elapsed, "triples": int(triples), "loss": float(loss), **metrics}
                    )
                    progress.update(task, valid=_fmt(metrics))
                    if self._better(metrics, best_metrics):
                        best_metrics, best_model, best_step, stale = metrics, self.model.export(), steps, 0
                    else:
                        stale += 1
                        if s.patience and stale >= s.patience:
                            break
                    if (
                        base_window
                        and best_step == 0
                        and validations >= s.base_patience
                        and elapsed >= 60.0 * s.base_patience_minutes
                    ):
                        stopped_without_gain = True
                        break
        triples, loss = int(triples), float(loss)  # waits for the device's last step
        seconds = time.perf_counter() - start
        if steps % s.eval_every != 0 or best_model is None:
            metrics = self._validate()
            history.append({"step": steps, "seconds": seconds, "triples": triples, "loss": loss, **metrics})
            if best_model is None or self._better(metrics, best_metrics):
                best_metrics, best_model, best_step = metrics, self.model.export(), steps
        return TrainResult(
            best=best_model,
            best_metrics=best_metrics,
            best_step=best_step,
            steps=steps,
            epochs=steps / self.sampler.steps_per_epoch,
            triples=triples,
            seconds=seconds,
            history=history,
            stopped_without_gain=stopped_without_gain,
            device=self.device_name,
        )

    @property
    def device_name(self) -> str:
        if self.device.type == "cuda" and self.on_device:
            return f"{self.device} ({torch.cuda.get_device_name(self.device)})"
        return "cpu"

    def _out_of_budget(self, steps: int, max_steps: int | None, elapsed: float, deadline: float | None) -> bool:
        """Whether the step or time budget is spent (data-parallel workers decide it together: training.ray_train)."""
        return (max_steps is not None and steps >= max_steps) or (deadline is not None and elapsed >= deadline)

    @staticmethod
    def _better(new: dict[str, float], old: dict[str, float]) -> bool:
        if SELECTION_METRIC not in new:
            return True  # no validation: the latest model is the one kept
        return new[SELECTION_METRIC] > old.get(SELECTION_METRIC, float("-inf"))


def _training_device(settings: TrainSettings, data: TrainingData) -> torch.device:
    """`--device`: auto takes the GPU where there is one and the run can use it; cuda refuses a run it cannot."""
    obstacle = _device_obstacle(settings, data)
    if settings.device == "auto":
        device = resolve_device("auto")
        return device if obstacle is None else torch.device("cpu")
    device = resolve_device(settings.device)
    if device.type != "cpu" and obstacle is not None:
        raise ValueError(f"--device {settings.device}: {obstacle}")
    return device


def _check_device_memory(
    device: torch.device, data: TrainingData, doc_rows: object, settings: TrainSettings, n_words: int
) -> None:
    """Refuse, before allocating, a run whose corpus does not fit on the GPU (a CUDA out-of-memory error later
    would say less). What it holds: the documents' rows twice (and their transpose), the queries' rows, the
    whole q·d table where it is cached, and per step a few B × P blocks and the B gathered query rows."""
    if device.type != "cuda":
        return
    n_queries, n_docs = data.X_queries.shape[0], data.X_docs.shape[0]
    widest = int(np.diff(data.X_queries.indptr).max(initial=1))
    gram = n_queries * n_docs * 4 if n_queries * n_docs <= settings.max_gram_entries else 0
    pool = min(n_docs, settings.pool_size + settings.batch_queries * settings.positives_per_query)
    needed = (
        3 * 12 * int(doc_rows.nnz)  # type: ignore[attr-defined]
        + 12 * int(data.X_queries.nnz)
        + gram
        + 6 * 4 * settings.batch_queries * pool
        + 3 * 12 * settings.batch_queries * widest
        + 6 * 4 * n_words * settings.n_dims
    )
    free, _total = torch.cuda.mem_get_info(device)
    if needed > 0.9 * free:
        raise ValueError(
            f"training on {device} needs about {needed / 2**30:.1f} GiB there and {free / 2**30:.1f} GiB is free "
            "(the corpus, its queries and their q·d table stay on the GPU): give --device cpu, or a smaller "
            "--max-gram-entries"
        )


def _device_obstacle(settings: TrainSettings, data: TrainingData) -> str | None:
    """What keeps this run off a GPU, or None."""
    cls = REGISTRY.get(settings.kind)
    if cls is None or not cls.runs_on_device:
        on_device = ", ".join(sorted(k for k, c in REGISTRY.items() if c.runs_on_device))
        return f"--kind {settings.kind} trains on the CPU only (on a GPU: {on_device}); give --device cpu"
    if data.stream is not None:
        return "--stream-pairs and --ray train on the CPU; give --device cpu"
    if settings.query_words:
        return "--query-words cuts its queries on the CPU; give --device cpu"
    return None


def _per_document(kind: str) -> bool:
    cls = REGISTRY.get(kind)
    return cls is not None and cls.per_document


def _fmt(metrics: dict[str, float]) -> str:
    return " ".join(f"{k} {v:.4f}" for k, v in metrics.items()) if metrics else "—"
