"""Every kind `ssi train --kind` takes, by name: the one list the help text, the settings check and both
registries (training.models for the SGD kinds, training.fitted for the fitted ones) agree with.

Plain names, so that `ssi train --help` and a wrong `--kind` are answered without importing PyTorch;
tests/training/test_kinds.py checks that the registries hold exactly these.
"""

from __future__ import annotations

# Trained by the SGD loop (training.models); cfh needs --frequent-words.
SGD_KINDS: tuple[str, ...] = (
    "lowrank", "symmetric", "noidentity", "diagonal", "fullw", "psi3", "hashkernel", "halftrans", "cfh",
)  # fmt: skip
PROJECTION_KINDS: tuple[str, ...] = ("lsa", "cl-lsa", "opca", "s2net")  # closed form, paper 003 §4
EM_KINDS: tuple[str, ...] = ("plsa", "bltm", "bltm-pr", "bltm-1v", "translation")  # EM, paper 003 §3
FITTED_KINDS: tuple[str, ...] = PROJECTION_KINDS + EM_KINDS
KINDS: tuple[str, ...] = SGD_KINDS + FITTED_KINDS


def kinds_help() -> str:
    return (
        f"Model form: {', '.join(SGD_KINDS)}; projections {', '.join(PROJECTION_KINDS)}; "
        f"EM kinds {', '.join(EM_KINDS)}."
    )


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown --kind '{kind}' (choose from {', '.join(KINDS)})")
    return kind
