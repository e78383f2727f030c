"""The bundle round-trips, and a corrupt or mismatched bundle is refused with a clear message."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ssi.bundle import MANIFEST, BundleError, load_bundle, read_manifest, write_bundle
from ssi.vocab import Vocabulary
from training.encoder import INPUT_NAME, build_encoder

TEXTS = ["alpha beta gamma", "beta gamma delta", "gamma delta epsilon", "alpha epsilon"]


@pytest.fixture
def bundle_dir(tmp_path: Path) -> Path:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    rng = np.random.default_rng(0)
    U = rng.normal(size=(3, vocab.size)).astype(np.float32)
    V = rng.normal(size=(3, vocab.size)).astype(np.float32)
    write_bundle(
        tmp_path / "bundle",
        kind="lowrank",
        vocab=vocab,
        U=U,
        V=V,
        lexical=np.ones(vocab.size),
        encoder_onnx=build_encoder(U),
        training={"lr": 0.1},
        data={"fingerprint": {"corpus": "abc"}},
        metrics={"valid": {"map": 0.5}},
    )
    return tmp_path / "bundle"


def test_round_trip(bundle_dir: Path) -> None:
    bundle = load_bundle(bundle_dir)
    assert bundle.manifest.kind == "lowrank"
    assert bundle.manifest.n_dims == 3 and bundle.manifest.vocab_size == bundle.vocab.size
    assert bundle.manifest.metrics == {"valid": {"map": 0.5}}
    original = Vocabulary.build(TEXTS, min_df=1)
    assert bundle.vocab.words == original.words
    assert np.array_equal(bundle.vocab.idf, original.idf)
    # The reloaded vocabulary featurizes exactly as the one it was written from.
    assert np.array_equal(bundle.vocab.featurize(TEXTS).toarray(), original.featurize(TEXTS).toarray())
    assert bundle.U.dtype == np.float32 and bundle.U.shape == (3, original.size)


def test_onnx_encoder_equals_numpy(bundle_dir: Path) -> None:
    bundle = load_bundle(bundle_dir)
    session = ort.InferenceSession(str(bundle.encoder_path), providers=["CPUExecutionProvider"])
    x = bundle.vocab.featurize_dense(TEXTS + ["nothing known here"])
    got = session.run(None, {INPUT_NAME: x})[0]
    assert got.shape == (5, 3)
    np.testing.assert_allclose(got, x @ np.asarray(bundle.U).T, atol=1e-5, rtol=0)


def test_rewrite_replaces_atomically(bundle_dir: Path) -> None:
    first = read_manifest(bundle_dir).content_hash
    vocab = Vocabulary.build(TEXTS, min_df=1)
    U = np.zeros((2, vocab.size), dtype=np.float32)
    write_bundle(
        bundle_dir, kind="symmetric", vocab=vocab, U=U, V=U, lexical=np.ones(vocab.size), encoder_onnx=build_encoder(U)
    )
    again = load_bundle(bundle_dir)
    assert again.manifest.kind == "symmetric" and again.content_hash != first
    assert [p.name for p in bundle_dir.parent.iterdir()] == ["bundle"]  # no temp folders left


def test_corrupt_array_is_refused(bundle_dir: Path) -> None:
    data = bytearray((bundle_dir / "V.npy").read_bytes())
    data[-1] ^= 0xFF
    (bundle_dir / "V.npy").write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"V.npy: contents do not match the manifest's hash"):
        load_bundle(bundle_dir)


def test_missing_file_is_refused(bundle_dir: Path) -> None:
    (bundle_dir / "encoder.onnx").unlink()
    with pytest.raises(BundleError, match="missing encoder.onnx"):
        load_bundle(bundle_dir)


def test_future_format_version_is_refused(bundle_dir: Path) -> None:
    manifest = json.loads((bundle_dir / MANIFEST).read_text())
    manifest["format_version"] = 99
    (bundle_dir / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="format version 99 is not supported"):
        load_bundle(bundle_dir)


def test_mismatched_shape_is_refused_even_with_matching_hashes(bundle_dir: Path) -> None:
    manifest = json.loads((bundle_dir / MANIFEST).read_text())
    manifest["n_dims"] = 4  # claims N = 4 while U.npy holds N = 3
    (bundle_dir / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"U.npy: expected float32 \(4, "):
        load_bundle(bundle_dir)


def test_other_text_pipeline_is_refused(bundle_dir: Path) -> None:
    manifest = json.loads((bundle_dir / MANIFEST).read_text())
    manifest["tokenizer"] = "some-other-tokenizer"
    (bundle_dir / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="made with text pipeline some-other-tokenizer"):
        load_bundle(bundle_dir)


def test_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no such directory"):
        load_bundle(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="missing manifest.json"):
        load_bundle(tmp_path / "empty")
    (tmp_path / "empty" / MANIFEST).write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        load_bundle(tmp_path / "empty")
