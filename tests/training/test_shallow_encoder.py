"""A shallow encoder cut from the run's tiny encoder (training.shallow_encoder): its first layers' weights as they were,
a model folder that training.sentence_export reads as it reads the source's (pooling, length, name), the texts it is
distilled on, and a few seconds of distillation that bring its vectors towards the whole model's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ssi.records import Document
from ssi.sentence import SentenceError
from tests.service.service_testing import write_corpus
from tests.training.sentence_testing import WORDS, exported_tiny_encoder
from training.sentence_export import _reference_model, read_max_length, read_name, read_pooling
from training.shallow_encoder import INFO_FILE, distil_texts, shallow_encoder


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return exported_tiny_encoder(tmp_path_factory).model


def test_the_cut_keeps_the_first_layers_and_reads_as_the_source(source: Path, tmp_path: Path) -> None:
    info = shallow_encoder(source, tmp_path / "cut", 1)
    assert info == {"source": read_name(source), "layers": 1, "of_layers": 2, "distilled": False}
    assert json.loads((tmp_path / "cut" / INFO_FILE).read_text()) == info
    whole, cut = _reference_model(source), _reference_model(tmp_path / "cut")
    assert cut.config.num_hidden_layers == 1 and len(cut.encoder.layer) == 1
    kept = whole.state_dict()
    assert all(
        (value == kept[name]).all() for name, value in cut.state_dict().items()
    )  # every weight of the cut is the source's own
    assert read_name(tmp_path / "cut") == f"{read_name(source)}, first 1 of 2 layers"
    assert read_pooling(tmp_path / "cut") == read_pooling(source)
    assert read_max_length(tmp_path / "cut") == read_max_length(source)
    assert not (tmp_path / "cut" / "onnx").exists()  # the source's graph is the whole model's: not copied
    with pytest.raises(SentenceError, match="3 layers asked of a model of 2"):
        shallow_encoder(source, tmp_path / "too-deep", 3)


def test_distil_texts_are_sentences_runs_and_titles(tmp_path: Path) -> None:
    text = "The star is bright tonight. A moon orbits the planet slowly! Bread rises in the oven. Ok. Yeast and flour."
    corpus = write_corpus(tmp_path / "c.jsonl", [Document(id="d", title="Stars and bread", text=text)])
    texts = distil_texts([corpus])
    assert sorted(texts) == sorted(
        [
            "The star is bright tonight.",
            "A moon orbits the planet slowly!",
            "Bread rises in the oven.",
            "Yeast and flour.",
            "The star is bright tonight. A moon orbits the planet slowly! Bread rises in the oven. Yeast and flour.",
            "Stars and bread",
        ]
    )


def test_distillation_brings_the_cut_towards_the_whole_model(source: Path, tmp_path: Path) -> None:
    texts = [" ".join(WORDS[i : i + 6]) for i in range(len(WORDS) - 6)] * 4
    info = shallow_encoder(source, tmp_path / "distilled", 1, texts=texts, seconds=1.5, batch=8, lr=3e-3, threads=1)
    assert info["distilled"] and info["steps"] >= 10 and info["texts_seen"] == 8 * info["steps"]
    assert info["loss_last_20_steps"] < info["loss_first_20_steps"]
    assert read_name(tmp_path / "distilled").endswith("first 1 of 2 layers, distilled")
