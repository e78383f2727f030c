"""`ssi train --ray ADDRESS --workers 2`: data-parallel training on Ray Train writes a bundle that learned (on the Ray
group's shared cluster; `--ray local`'s own instance: tests/cluster/test_ray_connect.py).

Skipped with a message when Ray is not installed (the `cluster` extra).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray.train", reason="needs the cluster extra: pip install -e .[cluster]")

from ssi.bundle import load_bundle  # noqa: E402
from tests.training.synonyms import held_out_map, make_synonym_corpus  # noqa: E402
from training.run import run_training  # noqa: E402
from training.settings import TrainSettings  # noqa: E402


def test_two_ray_workers_train_a_bundle_that_beats_tfidf(tmp_path: Path) -> None:
    """On the Ray group's shared cluster (tests/cluster/conftest.py), joined by its address as `--ray HOST:PORT` does.

    Slow: two Ray Train workers, each importing PyTorch."""
    from tests.cluster.conftest import shared_ray

    address = shared_ray().address
    data = make_synonym_corpus(tmp_path / "synonyms")
    settings = TrainSettings(
        corpus=data.corpus, pairs=data.train_pairs, valid_pairs=data.valid_pairs, out=tmp_path / "bundle",
        ray=address, workers=2, shuffle_buffer=64, epochs=40, n_dims=16, lr=0.1, seed=1, threads=1,
    )  # fmt: skip
    summary = run_training(settings, show_progress=False)
    bundle = load_bundle(tmp_path / "bundle")
    assert bundle.manifest.form == "lowrank" and bundle.manifest.training["config"]["workers"] == 2
    stream = summary["stream"]
    assert stream["workers"] == 2 and stream["pairs_held_peak"] <= 64
    ssi_map, tfidf_map = held_out_map(data, tmp_path / "bundle")
    assert tfidf_map < 0.1
    assert ssi_map > 0.8 and ssi_map > 8 * tfidf_map
    assert summary["valid"]["map"] == pytest.approx(ssi_map, abs=1e-6)  # rank 0's validation is the harness's
    assert not (tmp_path / ".bundle.ray-train").exists()  # Ray Train's storage is cleaned up
