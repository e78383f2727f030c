"""A lowrank bundle of random arrays over a given vocabulary: what the text-pipeline tests write and read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ssi.bundle import write_bundle
from ssi.forms import form_class
from ssi.vocab import Vocabulary
from training.encoder import form_encoder


def lowrank_bundle(tmp_path: Path, vocab: Vocabulary) -> Path:
    """`tmp_path / "b"`: a lowrank form (N = 4, seed 0) over `vocab`, with its query encoder."""
    cls = form_class("lowrank")
    rng = np.random.default_rng(0)
    arrays = {n: rng.standard_normal(s).astype(np.float32) for n, s in cls.shapes(4, vocab.size).items()}
    form = cls(arrays)
    write_bundle(tmp_path / "b", form=form, vocab=vocab, encoder_onnx=form_encoder(form))
    return tmp_path / "b"
