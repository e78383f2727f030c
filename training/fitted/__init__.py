"""The kinds fitted in closed form or by EM, chosen by name like the SGD kinds (training.models)."""

from __future__ import annotations

from training.fitted.base import FitContext, FittedKind

FITTED: dict[str, type[FittedKind]] = {}


def fitted_kind(kind: str) -> type[FittedKind] | None:
    """The fitted kind called `kind`, None when `kind` trains by the SGD loop (or is unknown)."""
    return FITTED.get(kind)


__all__ = ["FITTED", "FitContext", "FittedKind", "fitted_kind"]
