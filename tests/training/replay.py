"""The host step's triples replayed into a device step: both then take the same triples (tests/training/test_device.py,
tests/training/test_gpu.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from training.device_sampling import DevicePlan
from training.trainer import Trainer


@dataclass
class Replay:
    """The host's triples handed to the device step: both steps then take the same triples."""

    host: Trainer
    recorded: DevicePlan | None = None
    neg: torch.Tensor | None = None
    valid: torch.Tensor | None = None
    steps_per_epoch: int = 1
    device: torch.device = torch.device("cpu")  # where the device step runs

    def record(self) -> None:
        sampler = self.host.sampler
        inner_plan, inner_negatives = sampler.plan, sampler.negatives

        def plan():  # noqa: ANN202
            p = inner_plan()

            def put(a: np.ndarray | None) -> torch.Tensor | None:
                return None if a is None else torch.from_numpy(a).to(self.device)

            queries = put(p.queries.astype(np.int64))
            pool = None if p.pool is None else put(p.pool.astype(np.int64))
            self.recorded = DevicePlan(queries, pool, put(p.triple_query), put(p.triple_pos), p.n_pool, put(p.weights))
            return p

        def negatives(p, scores):  # noqa: ANN001, ANN202
            neg, valid = inner_negatives(p, scores)
            self.neg, self.valid = torch.from_numpy(neg).to(self.device), torch.from_numpy(valid).to(self.device)
            return neg, valid

        sampler.plan, sampler.negatives = plan, negatives

    def plan(self) -> DevicePlan:
        assert self.recorded is not None, "the host step draws first"
        return self.recorded

    def negatives(self, plan: DevicePlan, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.neg is not None and self.valid is not None
        return self.neg, self.valid


def same_tables(host: Trainer, device: Trainer) -> None:
    """Both models' exported tables, equal to float precision (sums run in another order; Adagrad's g / √Σg² on
    tiny gradients magnifies that a little)."""
    for name, value in host.model.export().values.items():
        np.testing.assert_allclose(device.model.export().values[name], value, rtol=1e-3, atol=1e-4, err_msg=name)
