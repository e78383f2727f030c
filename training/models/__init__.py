"""The SSI model family, chosen by name from a registry (DESIGN.md, "The model family")."""

from __future__ import annotations

from training.models.base import ExportedModel, ModelShape, SSIModel
from training.models.diagonal import Diagonal
from training.models.fullw import FullW
from training.models.lowrank import LowRank, NoIdentity, Symmetric

REGISTRY: dict[str, type[SSIModel]] = {cls.kind: cls for cls in (LowRank, Symmetric, NoIdentity, Diagonal, FullW)}


def make_model(kind: str, shape: ModelShape) -> SSIModel:
    try:
        cls = REGISTRY[kind]
    except KeyError:
        raise ValueError(f"unknown model kind '{kind}' (choose from {', '.join(REGISTRY)})") from None
    return cls(shape)


__all__ = ["REGISTRY", "ExportedModel", "ModelShape", "SSIModel", "make_model"]
