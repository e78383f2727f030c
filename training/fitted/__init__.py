"""The kinds fitted in closed form or by EM, chosen by name like the SGD kinds (training.models)."""

from __future__ import annotations

from training.fitted.base import FitContext, FittedKind
from training.fitted.cl_lsa import ClLsa
from training.fitted.lsa import Lsa
from training.fitted.opca import Opca
from training.fitted.s2net import S2Net
from training.fitted.topics import BLTM, BLTM1V, BLTMPR, PLSA
from training.fitted.translation import Translation

FITTED: dict[str, type[FittedKind]] = {}
FITTED.update({cls.kind: cls for cls in (Lsa, ClLsa, Opca, S2Net)})  # linear projections, paper 003
FITTED.update({cls.kind: cls for cls in (PLSA, BLTM, BLTMPR, BLTM1V, Translation)})  # EM kinds, paper 003


def fitted_kind(kind: str) -> type[FittedKind] | None:
    """The fitted kind called `kind`, None when `kind` trains by the SGD loop (or is unknown)."""
    return FITTED.get(kind)


__all__ = ["FITTED", "FitContext", "FittedKind", "fitted_kind"]
