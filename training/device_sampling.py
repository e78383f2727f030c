"""Triple sampling on the device: training.sampling's plan, drawn where the model is, with no host round trip.

The same triples as the host sampler's (training.sampling.TripleSampler): a step takes B training queries
(an epoch visits each once), `positives_per_query` of each query's relevant documents with replacement and
`negatives_per_positive` negatives per positive, uniform over the pool and never the query itself or one of
its positives, `hard_fraction` of them among the `hard_pool` best-scoring non-relevant documents. The draws
come from a torch generator on the device, so a GPU run's triples are not the CPU run's for the same seed.

Two things differ, both because a step's sizes must not depend on its data (finding them out means waiting on
the GPU): a negative that hits a positive is redrawn a fixed number of times for every triple (the host
redraws only the bad ones, while any are left); and when the corpus exceeds the pool, the pool is the step's
positives followed by `pool_size` uniform documents, without removing repeats, and negatives are drawn from
the uniform part alone (so still uniform over the corpus).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from training.data import PairIndex
from training.sampling import RESAMPLE_TRIES, PositiveIndex


@dataclass
class DevicePlan:
    """One step's triples on the device (training.sampling.StepPlan's fields, as tensors)."""

    queries: torch.Tensor  # B query rows
    pool: torch.Tensor | None  # P document rows; None = the whole corpus in order
    triple_query: torch.Tensor  # T
    triple_pos: torch.Tensor  # T
    n_pool: int
    weights: torch.Tensor | None = None
    uniform_from: int = 0  # negatives are drawn from pool[uniform_from:]


class DeviceTripleSampler:
    def __init__(
        self,
        pairs: PairIndex,
        n_docs: int,
        *,
        device: torch.device,
        doc_doc: bool,
        batch_queries: int,
        positives_per_query: int,
        negatives_per_positive: int,
        pool_size: int,
        hard_fraction: float,
        hard_pool: int,
        seed: int,
    ) -> None:
        index = PositiveIndex.of(pairs, n_docs)
        self.device = device
        put = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        self.pos_doc = put(index.pos_doc.astype(np.int64))
        self.pos_weight = None if index.pos_weight is None else put(index.pos_weight.astype(np.float64))
        counts = np.diff(index.query_ptr)
        self.query_ptr = put(index.query_ptr.astype(np.int64))
        self.train_queries = put(index.train_queries.astype(np.int64))
        self.n_train_queries = index.train_queries.size
        self.positive_keys = put(index.positive_keys.astype(np.int64))
        self.max_positives = int(counts.max())
        self.n_docs = n_docs
        self.doc_doc = doc_doc
        self.batch_queries = min(batch_queries, self.n_train_queries)
        self.positives_per_query = positives_per_query
        self.negatives_per_positive = negatives_per_positive
        self.pool_size = pool_size
        self.hard_fraction = hard_fraction
        self.hard_pool = hard_pool
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self._epoch_order = torch.zeros(0, dtype=torch.int64, device=device)
        self._cursor = 0
        self.epoch = 0

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.n_train_queries // self.batch_queries)

    def _rand(self, *shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=self.generator, device=self.device)

    def _integers(self, high: int, size: int) -> torch.Tensor:
        return torch.randint(0, high, (size,), generator=self.generator, device=self.device)

    def _next_queries(self) -> torch.Tensor:
        if self._cursor >= self._epoch_order.numel():
            perm = torch.randperm(self.n_train_queries, generator=self.generator, device=self.device)
            self._epoch_order = self.train_queries[perm]
            self._cursor = 0
            self.epoch += 1
        batch = self._epoch_order[self._cursor : self._cursor + self.batch_queries]
        self._cursor += self.batch_queries
        return torch.sort(batch).values

    def plan(self) -> DevicePlan:
        queries = self._next_queries()
        start = self.query_ptr[queries]
        counts = self.query_ptr[queries + 1] - start
        n_queries = queries.numel()
        picks = start[:, None] + (self._rand(n_queries, self.positives_per_query) * counts[:, None]).long()
        per_positive = self.negatives_per_positive
        pos_docs = self.pos_doc[picks].reshape(-1)
        triple_query = torch.arange(n_queries, device=self.device).repeat_interleave(
            self.positives_per_query * per_positive
        )
        weights = None
        if self.pos_weight is not None:
            weights = self.pos_weight[picks].reshape(-1).repeat_interleave(per_positive)
        if self.n_docs <= self.pool_size:
            triple_pos = pos_docs.repeat_interleave(per_positive)
            return DevicePlan(queries, None, triple_query, triple_pos, self.n_docs, weights)
        extra = self._integers(self.n_docs, self.pool_size)
        pool = torch.cat([pos_docs, extra])
        triple_pos = torch.arange(pos_docs.numel(), device=self.device).repeat_interleave(per_positive)
        return DevicePlan(queries, pool, triple_query, triple_pos, pool.numel(), weights, uniform_from=pos_docs.numel())

    def _pool_rows(self, plan: DevicePlan) -> torch.Tensor:
        return torch.arange(plan.n_pool, device=self.device) if plan.pool is None else plan.pool

    def _is_positive(self, keys: torch.Tensor) -> torch.Tensor:
        where = torch.searchsorted(self.positive_keys, keys).clamp(max=self.positive_keys.numel() - 1)
        return self.positive_keys[where] == keys

    def _is_excluded(self, plan: DevicePlan, neg: torch.Tensor) -> torch.Tensor:
        q_rows = plan.queries[plan.triple_query]
        d_rows = self._pool_rows(plan)[neg]
        bad = self._is_positive(q_rows * self.n_docs + d_rows)
        if self.doc_doc:
            bad |= q_rows == d_rows
        return bad

    def _uniform(self, plan: DevicePlan, size: int) -> torch.Tensor:
        return plan.uniform_from + self._integers(plan.n_pool - plan.uniform_from, size)

    def negatives(self, plan: DevicePlan, scores: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Negative pool indices per triple, and a mask of the triples that found a valid one."""
        n_triples = plan.triple_query.numel()
        neg = self._uniform(plan, n_triples)
        if self.hard_fraction > 0 and scores is not None:
            neg = self._mix_hard(plan, scores, neg)
        bad = self._is_excluded(plan, neg)
        for _ in range(RESAMPLE_TRIES):
            neg = torch.where(bad, self._uniform(plan, n_triples), neg)
            bad = self._is_excluded(plan, neg)
        return neg, ~bad

    def _mix_hard(self, plan: DevicePlan, scores: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
        masked = scores.detach().clone()
        if plan.pool is None:
            # Each batch query's positives, padded to the longest list with its first positive again.
            start = self.query_ptr[plan.queries]
            count = self.query_ptr[plan.queries + 1] - start
            lane = torch.arange(self.max_positives, device=self.device)
            at = start[:, None] + torch.minimum(lane[None, :], (count - 1)[:, None])
            masked.scatter_(1, self.pos_doc[at], float("-inf"))
            if self.doc_doc:
                masked.scatter_(1, plan.queries[:, None], float("-inf"))
        else:
            keys = plan.queries[:, None] * self.n_docs + plan.pool[None, :]
            masked.masked_fill_(self._is_positive(keys), float("-inf"))
            if self.doc_doc:
                masked.masked_fill_(plan.queries[:, None] == plan.pool[None, :], float("-inf"))
        k = min(self.hard_pool, plan.n_pool - 1)
        top = masked.topk(k, dim=1, sorted=False).indices
        hard = top[plan.triple_query, self._integers(k, neg.numel())]
        use = self._rand(neg.numel()) < self.hard_fraction
        return torch.where(use, hard, neg)
