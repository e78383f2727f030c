"""`ssi words`: neighbours from a bundle, JSON output, and a clear error for an unknown word or bundle."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from ssi.bundle import write_bundle
from ssi.forms.lowrank import LowRank
from ssi.vocab import Vocabulary
from ssi_cli.main import build_app
from training.encoder import build_encoder


def test_words_prints_neighbours_and_refuses_unknown_words(tmp_path: Path) -> None:
    vocab = Vocabulary.build(["cat dog mouse", "car truck bus", "cat kitten"], min_df=1)
    V = np.zeros((2, vocab.size), dtype=np.float32)
    for word, point in {"cat": (1, 0), "kitten": (1.1, 0), "dog": (1.4, 0), "car": (-3, 2)}.items():
        V[:, vocab.id_of(word)] = point
    write_bundle(tmp_path / "b", form=LowRank({"U": V, "V": V}), vocab=vocab, encoder_onnx=build_encoder(V))
    runner = CliRunner()
    result = runner.invoke(build_app("words"), ["words", "cat", "--bundle", str(tmp_path / "b"), "--k", "2"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "cat: kitten, dog"
    result = runner.invoke(build_app("words"), ["words", "car", "--bundle", str(tmp_path / "b"), "--json"])
    assert [n["word"] for n in json.loads(result.output)["car"]] == ["cat", "kitten", "dog"]
    result = runner.invoke(build_app("words"), ["words", "zebra", "--bundle", str(tmp_path / "b")])
    assert result.exit_code == 2 and "'zebra' is not in the model's vocabulary" in result.output
    result = runner.invoke(build_app("words"), ["words", "cat", "--bundle", str(tmp_path / "none")])
    assert result.exit_code == 2 and "not a bundle folder" in result.output
