"""`--kind s2net`: the discriminative projection model trained by S2Net (Yih et al., 2011; paper 003,
section 4.2, eq. (21), Appendix B).

For a query q, a document d⁺ paired with it and a document d⁻ that is not, Δ = cos(A q, B d⁺) −
cos(A q, B d⁻), and the loss is the logistic loss on Δ scaled by γ (eq. 21; γ = 10 in the paper,
since a cosine difference lies in [−2, 2]):

    L = mean over (q, d⁺, d⁻) of log(1 + exp(−γ Δ))

Negatives are documents drawn uniformly for each training pair (the paper draws 4 per query; here
--negatives-per-positive, afresh each iteration). A and B start from the LSA map of the same texts,
as in the paper ("we always started the model parameters from the LSA matrix"), and training stops
early on validation MAP (the paper's regulariser). Each iteration is one full pass over the training
pairs: every query and document is projected once (two sparse × dense products), the loss is summed
over the pairs on those N-dimensional vectors, and PyTorch's gradient flows back through the products.
The paper minimised with L-BFGS; Adam (--lr, DEFAULT_LR when not given) on the full batch does the
same job here. Cosines do not
depend on the scale of A or B, so both are trained at an entry scale of about 1 (the LSA rows times
√D) and exported at the LSA scale.

Validation MAP (the projection alone) is measured every --eval-every iterations (DEFAULT_EVAL_EVERY
when not given) and the best
iteration is exported, then combined with tf-idf as the other projections are
(training.fitted.projections.choose).
"""

from __future__ import annotations

import math
import time
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from training.fitted.base import FitContext, FittedKind
from training.fitted.basis import LsiBasis
from training.fitted.projections import PairRows, choose, corpus_texts, fitted_result, make_form, summary_row
from training.trainer import TrainResult

NORM_EPS = 1e-12
# Defaults where --lr and --eval-every are not given: the SGD kinds' (Adagrad 0.03, every 50 steps) suit
# thousands of sparse steps, not a hundred full-batch Adam iterations (Wikispeedia links: validation MAP
# alone 0.156 after 20 iterations at 0.3, 0.146 at 0.1, 0.090 after 6 at 0.03, rising).
DEFAULT_LR = 0.3
DEFAULT_EVAL_EVERY = 5


def torch_sparse(X: sp.csr_matrix) -> torch.Tensor:
    """A scipy CSR matrix as a torch COO tensor (sparse × dense products with gradients for the dense side)."""
    coo = sp.coo_matrix(X, dtype=np.float32)
    indices = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    values = torch.from_numpy(coo.data)
    return torch.sparse_coo_tensor(indices, values, coo.shape, check_invariants=False).coalesce()


def unit(rows: torch.Tensor) -> torch.Tensor:
    return rows / rows.norm(dim=1, keepdim=True).clamp_min(NORM_EPS)


def s2net_loss(
    A: torch.Tensor,
    B: torch.Tensor,
    XQ: torch.Tensor,
    XD: torch.Tensor,
    q_rows: torch.Tensor,
    d_rows: torch.Tensor,
    negatives: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """Eq. (21): mean log(1 + exp(−γ (cos(Aq, Bd⁺) − cos(Aq, Bd⁻)))) over the pairs and their negatives
    ([pairs, k] document rows)."""
    queries = unit(torch.sparse.mm(XQ, A.T))[q_rows]  # [pairs, N]
    docs = unit(torch.sparse.mm(XD, B.T))  # [n_docs, N]
    positive = (queries * docs[d_rows]).sum(dim=1)  # [pairs]
    negative = torch.einsum("pn,pkn->pk", queries, docs[negatives])  # [pairs, k]
    return torch.nn.functional.softplus(-gamma * (positive[:, None] - negative)).mean()


def draw_negatives(d_rows: np.ndarray, n_docs: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """[pairs, k] uniform document rows, none equal to its pair's own document."""
    drawn = rng.integers(0, n_docs - 1, size=(d_rows.shape[0], k))
    return drawn + (drawn >= d_rows[:, None])  # skip the positive: n_docs − 1 choices, uniform


class S2Net(FittedKind):
    kind: ClassVar[str] = "s2net"
    description: ClassVar[str] = "S2Net: cos(Aq, Bd) trained on a logistic loss of cosine differences (paper 003)"

    def fit(self, context: FitContext) -> TrainResult:
        started = time.perf_counter()
        settings = context.settings
        torch.set_num_threads(settings.threads)
        torch.manual_seed(settings.seed)
        rng = np.random.default_rng(settings.seed)
        pairs = PairRows.of(context, rng)
        n_docs = pairs.XD.shape[0]
        if n_docs < 2:
            raise ValueError("S2Net needs at least 2 documents to draw negatives from")
        lsa = LsiBasis.fit(corpus_texts(context), settings.n_dims, seed=settings.seed).components
        scale = math.sqrt(lsa.shape[1])
        A = torch.nn.Parameter(torch.from_numpy(lsa * scale))
        B = torch.nn.Parameter(torch.from_numpy(lsa * scale))
        given = settings.model_fields_set
        optimizer = torch.optim.Adam([A, B], lr=settings.lr if "lr" in given else DEFAULT_LR)
        eval_every = settings.eval_every if "eval_every" in given else DEFAULT_EVAL_EVERY
        XD = torch_sparse(pairs.XD)
        XQ = torch_sparse(pairs.XQ)
        q_rows, d_rows = torch.from_numpy(pairs.q_rows), torch.from_numpy(pairs.d_rows)

        def current() -> tuple[np.ndarray, np.ndarray]:
            return (A.detach().numpy() / scale).astype(np.float32), (B.detach().numpy() / scale).astype(np.float32)

        def validate() -> float | None:
            return float(context.validate(make_form(*current(), 0.0))["map"]) if context.validate else None

        start_map = validate()
        history = [summary_row(0, started, **({"map": start_map} if start_map is not None else {}))]
        best_map, best_step, best_maps = start_map, 0, current()
        limit = math.ceil(settings.epochs) if settings.epochs is not None else None
        deadline = started + 60 * settings.max_minutes if settings.max_minutes is not None else math.inf
        stale, step = 0, 0
        columns = (
            TextColumn("s2net"), BarColumn(), TextColumn("iter {task.completed:.0f}"),
            TextColumn("loss {task.fields[loss]:.4f}"), TextColumn("valid MAP {task.fields[valid]}"),
            TimeElapsedColumn(),
        )  # fmt: skip
        with Progress(*columns, disable=not context.show_progress, transient=False) as progress:
            task = progress.add_task("s2net", total=limit, loss=0.0, valid=_shown(start_map))
            while (limit is None or step < limit) and time.perf_counter() < deadline:
                step += 1
                if settings.query_words and context.data.doc_doc:  # fresh keywords for every iteration
                    pairs = PairRows.of(context, rng)
                    XQ, q_rows = torch_sparse(pairs.XQ), torch.from_numpy(pairs.q_rows)
                negatives = torch.from_numpy(draw_negatives(pairs.d_rows, n_docs, settings.negatives_per_positive, rng))
                optimizer.zero_grad()
                loss = s2net_loss(A, B, XQ, XD, q_rows, d_rows, negatives, settings.s2net_gamma)
                loss.backward()
                optimizer.step()
                row: dict[str, float] = {"loss": float(loss.detach())}
                if step % eval_every == 0 and context.validate is not None:
                    row["map"] = value = float(validate() or 0.0)
                    if best_map is None or value > best_map:
                        best_map, best_step, best_maps, stale = value, step, current(), 0
                    else:
                        stale += 1
                history.append(summary_row(step, started, **row))
                progress.update(task, completed=step, loss=row["loss"], valid=_shown(best_map))
                if settings.patience and stale >= settings.patience:
                    break
        if context.validate is None:
            best_step, best_maps = step, current()
        chosen = choose(*best_maps, context)
        if start_map is not None:
            chosen.metrics["start_map"] = start_map  # the LSA it started from
        result = fitted_result(chosen, started, history, steps=step)
        result.best_step = best_step
        result.triples = step * pairs.size * settings.negatives_per_positive
        result.epochs = float(step)
        return result


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
