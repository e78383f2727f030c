"""The trainable kinds of the SSI family, chosen by name (DESIGN.md, "The model family").

Each kind exports the form of the same name (ssi.forms): the trainer never scores a bundle itself.
"""

from __future__ import annotations

from ssi.forms import Form
from training.kinds import check_kind
from training.models.base import ModelShape, SSIModel
from training.models.cfh import CorrelatedHashing
from training.models.diagonal import Diagonal
from training.models.fullw import FullW
from training.models.halftrans import HalfTransductive
from training.models.hashkernel import HashKernel
from training.models.lowrank import LowRank, NoIdentity, Symmetric
from training.models.psi3 import PSI3

REGISTRY: dict[str, type[SSIModel]] = {
    cls.kind: cls for cls in (LowRank, Symmetric, NoIdentity, Diagonal, FullW, PSI3, HashKernel, HalfTransductive)
}
REGISTRY[CorrelatedHashing.kind] = CorrelatedHashing


def make_model(kind: str, shape: ModelShape, init: Form | None = None, warm_lr_scale: float = 1.0) -> SSIModel:
    """A fresh model of `kind`; `init` (a trained lowrank form) warm-starts the kinds that allow it."""
    try:
        cls = REGISTRY[kind]
    except KeyError:
        check_kind(kind)  # a fitted kind's name: not one the SGD loop trains
        raise ValueError(f"--kind {kind} is fitted, not trained by the SGD loop") from None
    model = cls(shape)
    if init is not None:
        model.warm_start(init, warm_lr_scale)
    return model


__all__ = ["REGISTRY", "ModelShape", "SSIModel", "make_model"]
