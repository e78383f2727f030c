"""The training loop: sample a step's triples, score the block, take a margin-ranking step, validate.

Validation runs every `eval_every` steps and at the end; the best-scoring export is kept (the
"best checkpoint"), and with `patience` > 0 training stops after that many validations without
improvement. The budget is `epochs` (each training query visited once per epoch) and/or
`max_minutes` of training-loop wall time, whichever comes first.

Pairs cut from the corpus (`--self-pairs`) often teach nothing a BM25 base does not already know: validation
never beats step 0 and the whole budget buys the starting model. So with self-made pairs training also stops
once `base_patience` validations and `base_patience_minutes` (both) have gone by without beating step 0; the
step-0 model is exported and the result says so (`stopped_without_gain`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ssi.forms import DocumentKeys, Form
from ssi.products import DocMatrix
from training.data import TrainingData
from training.gram import LexicalBlocks
from training.keywords import cut_to_keywords
from training.loss import margin_ranking
from training.models import REGISTRY, ModelShape, SSIModel, make_model
from training.models.block import Block, SparseRows, Triples
from training.pair_stream import StreamSampler
from training.sampling import TripleSampler
from training.settings import TrainSettings

Validator = Callable[[Form], dict[str, float]]
SELECTION_METRIC = "map"


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
    ) -> None:
        """`init`: a trained model to warm-start from (a lowrank form for lowrank or psi3)."""
        self.data = data
        self.settings = settings
        self.validator = validator
        torch.set_num_threads(settings.threads)
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
        # The rows a step's documents are read from: what the model's own scores read (ssi.vocab.semantic_rows;
        # the lexical rows for a model whose learned part is the word weights themselves).
        self._doc_rows = data.X_docs if self.model.reads_lexical_rows else doc_matrix.S
        self.phase_seconds = dict.fromkeys(("sample", "block", "scores", "loss", "update"), 0.0)
        self._all_docs = SparseRows.of(self._doc_rows, n_words) if n_docs <= settings.pool_size else None

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
        return Block(queries=SparseRows.of(rows, self.n_words), docs=docs, gram=gram, doc_rows=doc_rows)

    def step(self) -> tuple[float, float, int]:
        """One step; returns (loss, share of violated triples, triples used).

        Wall time per phase accumulates in `phase_seconds` (the throughput benchmark reads it).
        """
        t0 = time.perf_counter()
        plan = self.sampler.plan()
        t1 = time.perf_counter()
        block = self._block(plan.queries, plan.pool)
        t2 = time.perf_counter()
        scores = self.model.scores(block)
        t3 = time.perf_counter()
        neg, valid = self.sampler.negatives(plan, scores)
        loss, coeff, violated = margin_ranking(
            scores, plan.triple_query, plan.triple_pos, neg, valid, self.settings.margin, plan.weights
        )
        t4 = time.perf_counter()
        block.triples = Triples(plan.triple_query, plan.triple_pos, neg, valid, self.settings.margin)
        self.model.update(block, coeff)
        t5 = time.perf_counter()
        for phase, a, b in (
            ("sample", t0, t1),
            ("block", t1, t2),
            ("scores", t2, t3),
            ("loss", t3, t4),
            ("update", t4, t5),
        ):
            self.phase_seconds[phase] += b - a
        return loss, violated, int(valid.sum())

    def _validate(self) -> dict[str, float]:
        return self.validator(self.model.export()) if self.validator is not None else {}

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
        steps = triples = 0
        loss = 0.0
        start = time.perf_counter()
        with Progress(*columns, disable=not show_progress, transient=False) as progress:
            task = progress.add_task("train", total=total, rate=0.0, loss=0.0, valid=_fmt(best_metrics))
            while True:
                if self._out_of_budget(steps, max_steps, time.perf_counter() - start, deadline):
                    break
                loss, _violated, used = self.step()
                steps += 1
                triples += used
                elapsed = time.perf_counter() - start
                if deadline is not None and total is None:
                    progress.update(task, total=deadline, completed=min(elapsed, deadline))
                else:
                    progress.update(task, completed=steps)
                progress.update(task, rate=triples / elapsed, loss=loss)
                if steps % s.eval_every == 0:
                    metrics = self._validate()
                    validations += 1
                    history.append({"step": steps, "seconds": elapsed, "triples": triples, "loss": loss, **metrics})
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
        )

    def _out_of_budget(self, steps: int, max_steps: int | None, elapsed: float, deadline: float | None) -> bool:
        """Whether the step or time budget is spent (data-parallel workers decide it together: training.ray_train)."""
        return (max_steps is not None and steps >= max_steps) or (deadline is not None and elapsed >= deadline)

    @staticmethod
    def _better(new: dict[str, float], old: dict[str, float]) -> bool:
        if SELECTION_METRIC not in new:
            return True  # no validation: the latest model is the one kept
        return new[SELECTION_METRIC] > old.get(SELECTION_METRIC, float("-inf"))


def _per_document(kind: str) -> bool:
    cls = REGISTRY.get(kind)
    return cls is not None and cls.per_document


def _fmt(metrics: dict[str, float]) -> str:
    return " ".join(f"{k} {v:.4f}" for k, v in metrics.items()) if metrics else "—"
