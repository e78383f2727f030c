"""A picture of a training run beside its bundle: loss or log-likelihood and validation MAP per step.

EM and S2Net (paper 003) are judged by whether their objective keeps improving; the SGD kinds by
their validation curve. Every `ssi train` writes `history.png` from the history it also stores in
the manifest, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen: draw to a file
import matplotlib.pyplot as plt  # noqa: E402

# What a history row may hold, in the order the panels are drawn, with their axis labels.
SERIES: tuple[tuple[str, str], ...] = (
    ("log_likelihood", "log-likelihood per token"),
    ("loss", "training loss"),
    ("map", "validation MAP"),
)


def write_history_plot(history: Sequence[dict[str, float]], path: Path, title: str) -> Path | None:
    """One panel per series present in `history` against its step; None when there is nothing to draw."""
    panels = [(key, label) for key, label in SERIES if sum(key in row for row in history) >= 1]
    if not panels:
        return None
    figure, axes = plt.subplots(len(panels), 1, figsize=(6.4, 2.4 * len(panels)), sharex=True, squeeze=False)
    for ax, (key, label) in zip(axes[:, 0], panels, strict=True):
        rows = [row for row in history if key in row]
        ax.plot([row["step"] for row in rows], [row[key] for row in rows], marker="o", markersize=3)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step (SGD) or iteration (EM, fitted kinds)")
    axes[0, 0].set_title(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
