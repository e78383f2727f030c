"""Export a trained model as a bundle (ssi.bundle): arrays, vocabulary, ONNX query encoder, manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ssi.bundle import Manifest, write_bundle
from ssi.vocab import Vocabulary
from training.encoder import build_encoder
from training.models import ExportedModel


def export_bundle(
    out: Path,
    *,
    kind: str,
    vocab: Vocabulary,
    model: ExportedModel,
    training: dict[str, Any],
    data: dict[str, Any],
    metrics: dict[str, Any],
) -> Manifest:
    return write_bundle(
        out,
        kind=kind,
        vocab=vocab,
        U=model.U,
        V=model.V,
        lexical=model.lexical,
        encoder_onnx=build_encoder(model.U),
        training=training,
        data=data,
        metrics=metrics,
    )
