"""`ssi train --ensemble K`: K low-rank members folded into the best rank-N model of their average."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from ssi.bundle import load_bundle
from ssi.forms.lowrank import LowRank
from tests.training.synonyms import SynonymCorpus, held_out_map, train
from training.ensemble import fold_lowrank
from training.settings import TrainSettings


def _member(rng: np.random.Generator, n: int, d: int) -> LowRank:
    return LowRank({"U": rng.normal(size=(n, d)).astype(np.float32), "V": rng.normal(size=(n, d)).astype(np.float32)})


def _product(form: LowRank) -> np.ndarray:
    return np.asarray(form.values["U"], np.float64).T @ np.asarray(form.values["V"], np.float64)


def test_folding_keeps_the_average_when_its_rank_fits_and_is_the_best_truncation_otherwise() -> None:
    rng = np.random.default_rng(3)
    members = [_member(rng, 4, 40) for _ in range(3)]
    average = sum(_product(m) for m in members) / 3
    whole = fold_lowrank(members, 12)  # 3 x 4 directions: nothing is cut
    assert whole.values["U"].shape == (12, 40) and whole.values["V"].shape == (12, 40)
    np.testing.assert_allclose(_product(whole), average, atol=1e-4)
    cut = fold_lowrank(members, 4)
    assert cut.values["U"].shape == (4, 40)
    singular = np.linalg.svd(average, compute_uv=False)
    best_error = np.sqrt(np.sum(singular[4:] ** 2))  # Eckart–Young: no rank-4 matrix is closer
    assert np.linalg.norm(_product(cut) - average) == pytest.approx(best_error, rel=1e-4)
    one = fold_lowrank(members[:1], 4)  # a single member is itself (up to a rotation of its rows)
    np.testing.assert_allclose(_product(one), _product(members[0]), atol=1e-3)


def test_an_ensemble_trains_folds_and_serves_as_one_model_of_n_rows(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    summary = train(synonyms, tmp_path / "e", "--epochs", "20", "--dims", "16", "--lr", "0.1", "--ensemble", "2")
    bundle = load_bundle(tmp_path / "e")
    members = bundle.manifest.training["ensemble"]  # seeds --seed (1 here) and the next
    assert [m["seed"] for m in members] == [1, 2] and all("map" in m["valid"] for m in members)
    assert bundle.manifest.form == "lowrank" and bundle.form.values["U"].shape[0] == 16
    ensemble_map, tfidf_map = held_out_map(synonyms, tmp_path / "e")
    assert ensemble_map > 0.8 > 0.1 > tfidf_map  # it learns the synonyms as a single model does
    assert summary["valid"]["map"] == pytest.approx(ensemble_map, abs=1e-6)  # the folded model was validated
    assert any("ensemble of 2" in note for note in summary["notes"])


def test_an_ensemble_is_of_low_rank_models_trained_here() -> None:
    with pytest.raises(ValidationError, match="--ensemble"):
        TrainSettings(corpus="c.jsonl", out="b", pairs="p.tsv", kind="symmetric", ensemble=2)
    with pytest.raises(ValidationError, match="--ensemble"):
        TrainSettings(corpus="c.jsonl", out="b", pairs="p.tsv", ray="local", ensemble=2)
