"""`ssi.train`: train a model from your files and export a bundle, as `ssi train` does.

One configuration object, not two: the keyword options are the fields of `training.settings.TrainSettings`
(the long flags of `ssi train` with `_` for `-`; `--dims` is `n_dims`), validated by it, and the run is
`training.run.run_training`, the function behind the command. Options left out fall back to
`SSI_TRAIN_*` variables, then to the defaults, exactly as on the command line.

Training needs the `train` extra (PyTorch). The trainer is imported when `train` is called, not when this
module is, so that `help(ssi)` and the settings' checks work where PyTorch is not installed.

In the examples, `corpus`, `pairs` and `valid_pairs` are paths to your JSONL corpus, your TSV pairs to train on
and those to validate on; `folder` is where to write.

Examples:
    >>> import ssi
    >>> trained = ssi.train(
    ...     corpus, pairs, valid_pairs=valid_pairs, kind="lowrank", out=folder / "bundle", epochs=2, n_dims=8,
    ...     progress=False,
    ... )
    >>> trained.form, trained.bundle.name
    ('lowrank', 'bundle')
    >>> 0.0 <= trained.valid["map"] <= 1.0
    True
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.settings import TrainSettings

if TYPE_CHECKING:
    from ssi.api.model import Model
    from ssi.open_vocab import Statistics
    from ssi.records import Document

StrPath = str | os.PathLike[str]


@dataclass(frozen=True)
class Trained:
    """A finished training run: where its bundle is, and what `ssi train` would have printed.

    It stands for its bundle folder wherever a path is taken (`os.fspath`), so `ssi.load(trained)` works.
    """

    bundle: Path
    form: str
    content_hash: str
    valid: dict[str, float]  # validation metrics of the step that was kept (empty without validation pairs)
    summary: dict[str, Any] = field(repr=False)  # the whole JSON summary of `ssi train`

    def __fspath__(self) -> str:
        return str(self.bundle)

    def load(
        self,
        corpus: StrPath | list[Document] | list[str] | None = None,
        *,
        open_vocab: bool = True,
        statistics: Statistics = "bundle",
    ) -> Model:
        """The trained model, ready to rank `corpus` in this process (see `ssi.load`, its `open_vocab` and
        `statistics`)."""
        from ssi.api.model import load

        return load(self.bundle, corpus=corpus, open_vocab=open_vocab, statistics=statistics)


def train(
    corpus: StrPath,
    pairs: StrPath | None = None,
    *,
    out: StrPath,
    kind: str = "lowrank",
    progress: bool = True,
    **options: Any,
) -> Trained:
    """Train a model of `kind` on `corpus` and `pairs` and write its bundle to `out` (replaced atomically).

        `pairs`: query-document pairs (document ids, one pair a line), or None when the data comes another way
        (`queries=` with `qrels=`, `clicks=`, `self_pairs=`). `options`: any other field of `TrainSettings`,
        such as `n_dims`, `epochs`, `max_minutes`, `lr`, `valid_pairs`, `lexical`, `device` ("auto", "cpu",
    "cuda", "cuda:N": where the steps run, auto a GPU when PyTorch sees one). `progress`: show the
        trainer's progress bar. Raises `pydantic.ValidationError` (a `ValueError`) for an unknown option or a
        bad value, and `ssi.corpus.DataFileError` for a file it cannot read, before any training happens.
    """
    given: dict[str, Any] = {"corpus": Path(corpus), "out": Path(out), "kind": kind, **options}
    if pairs is not None:
        given["pairs"] = Path(pairs)
    settings = TrainSettings(**given)
    try:
        from training.run import run_training
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] in ("ssi", "training"):
            raise
        raise ModuleNotFoundError(
            f"ssi.train needs the train extra, and {exc.name} is missing: "
            "bash scripts/install.sh --extras train (it pins PyTorch's CPU wheel)",
            name=exc.name,
        ) from exc
    summary = run_training(settings, show_progress=progress)
    return Trained(
        bundle=Path(summary["bundle"]),
        form=summary["form"],
        content_hash=summary["content_hash"],
        valid=dict(summary.get("valid") or {}),
        summary=summary,
    )
