"""Export a trained model as a bundle (ssi.bundle): its form's arrays, the vocabulary, the ONNX query
encoder of the form's query map (to unit length for a cosine form; none for a form not served exactly),
the manifest, and a hybrid bundle's sentence encoder (training.hybrid)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ssi.bundle import Manifest, write_bundle
from ssi.forms import Form
from ssi.vocab import Vocabulary
from training.encoder import form_encoder


def export_bundle(
    out: Path,
    *,
    vocab: Vocabulary,
    form: Form,
    training: dict[str, Any],
    data: dict[str, Any],
    metrics: dict[str, Any],
    sentence: Path | None = None,
) -> Manifest:
    return write_bundle(
        out,
        form=form,
        vocab=vocab,
        encoder_onnx=form_encoder(form) if form.served_exactly else None,
        training=training,
        data=data,
        metrics=metrics,
        sentence=sentence,
    )
