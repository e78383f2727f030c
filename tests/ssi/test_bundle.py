"""The bundle round-trips every form, reads version 1, and refuses a corrupt or mismatched bundle clearly."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from ssi.bundle import MANIFEST, BundleError, content_hash, load_bundle, read_manifest, write_bundle
from ssi.encoder_io import run_encoder
from ssi.forms import FORMS, DocumentKeys, Form
from ssi.products import DocMatrix
from ssi.vocab import Vocabulary
from ssi.weighting import Bm25
from training.encoder import build_encoder, form_encoder

TEXTS = ["alpha beta gamma", "beta gamma delta", "gamma delta epsilon", "alpha epsilon"]

HASH_SIZE = 23  # H of the hash-kernel form's W
HASHED = 2  # F of the correlated-hashing form: the last 2 columns are its hashed slots
SERVED = sorted(name for name, cls in FORMS.items() if cls.served_exactly)


def random_form(name: str, n_dims: int, vocab_size: int, seed: int = 0) -> Form:
    rng = np.random.default_rng(seed)
    cls = FORMS[name]
    keys = DocumentKeys(("first", "second"), ("0" * 16, "1" * 16))  # a keyed form's (halftrans) documents
    shapes = cls.shapes(n_dims, vocab_size, H=HASH_SIZE, T=len(keys), F=HASHED)
    arrays = {k: rng.normal(size=shape).astype(np.float32) for k, shape in shapes.items()}
    return cls(arrays, keys) if cls.keyed else cls(arrays)


def write_form(path: Path, form: Form, vocab: Vocabulary) -> None:
    encoder = form_encoder(form) if form.served_exactly else None
    write_bundle(path, form=form, vocab=vocab, encoder_onnx=encoder)


@pytest.fixture
def bundle_dir(tmp_path: Path) -> Path:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    write_bundle(
        tmp_path / "bundle",
        form=random_form("lowrank", 3, vocab.size),
        vocab=vocab,
        encoder_onnx=build_encoder(random_form("lowrank", 3, vocab.size).query_map()),
        training={"lr": 0.1},
        data={"fingerprint": {"corpus": "abc"}},
        metrics={"valid": {"map": 0.5}},
    )
    return tmp_path / "bundle"


def test_round_trip(bundle_dir: Path) -> None:
    bundle = load_bundle(bundle_dir)
    assert bundle.manifest.form == "lowrank" and bundle.manifest.format_version == 3
    assert bundle.manifest.n_dims == 3 and bundle.manifest.index_dims == 3
    assert bundle.manifest.vocab_size == bundle.vocab.size
    assert bundle.manifest.metrics == {"valid": {"map": 0.5}}
    original = Vocabulary.build(TEXTS, min_df=1)
    assert bundle.vocab.words == original.words
    assert np.array_equal(bundle.vocab.idf, original.idf)
    # The reloaded vocabulary featurizes exactly as the one it was written from.
    assert np.array_equal(bundle.vocab.featurize(TEXTS).toarray(), original.featurize(TEXTS).toarray())
    expected = random_form("lowrank", 3, original.size)
    for name in ("U", "V"):
        assert bundle.form.values[name].dtype == np.float32
        assert np.array_equal(bundle.form.values[name], expected.values[name])


@pytest.mark.parametrize("name", sorted(FORMS))
def test_every_form_round_trips_with_the_same_scores(tmp_path: Path, name: str) -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    form = random_form(name, 4, vocab.size, seed=1)
    write_form(tmp_path / name, form, vocab)
    bundle = load_bundle(tmp_path / name)
    assert bundle.manifest.form == name and type(bundle.form) is type(form)
    docs = DocMatrix(vocab.featurize(TEXTS))
    Q = vocab.featurize(["alpha gamma", "delta", "epsilon beta beta"])
    np.testing.assert_array_equal(bundle.form.reference_scores(Q, docs), form.reference_scores(Q, docs))


@pytest.mark.parametrize("name", SERVED)
def test_onnx_encoder_equals_the_query_map(tmp_path: Path, name: str) -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    write_form(tmp_path / name, random_form(name, 3, vocab.size), vocab)
    bundle = load_bundle(tmp_path / name)
    session = ort.InferenceSession(str(bundle.encoder_path), providers=["CPUExecutionProvider"])
    x = bundle.vocab.featurize(TEXTS + ["nothing known here"])
    got = run_encoder(lambda feed: session.run(None, dict(feed))[0], x)
    assert got.shape == (5, bundle.manifest.index_dims)
    np.testing.assert_allclose(got, bundle.form.embed_queries(x), atol=1e-5, rtol=0)


def test_a_form_not_served_exactly_is_bundled_without_an_encoder(tmp_path: Path) -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    form = random_form("hashkernel", 1, vocab.size)
    write_form(tmp_path / "hk", form, vocab)
    bundle = load_bundle(tmp_path / "hk")
    assert bundle.manifest.index_dims == 0 and bundle.manifest.arrays == {"W": [HASH_SIZE], "w": [vocab.size]}
    assert not bundle.encoder_path.exists() and "encoder.onnx" not in bundle.manifest.files
    with pytest.raises(ValueError, match="form 'hashkernel' has no query encoder"):
        write_bundle(tmp_path / "x", form=form, vocab=vocab, encoder_onnx=b"onnx")
    lowrank = random_form("lowrank", 3, vocab.size)
    with pytest.raises(ValueError, match="form 'lowrank' is served exactly: it needs its query encoder"):
        write_bundle(tmp_path / "y", form=lowrank, vocab=vocab, encoder_onnx=None)


def test_rewrite_replaces_atomically(bundle_dir: Path) -> None:
    first = read_manifest(bundle_dir).content_hash
    vocab = Vocabulary.build(TEXTS, min_df=1)
    write_form(bundle_dir, random_form("symmetric", 2, vocab.size), vocab)
    again = load_bundle(bundle_dir)
    assert again.manifest.form == "symmetric" and again.content_hash != first
    assert [p.name for p in bundle_dir.parent.iterdir()] == ["bundle"]  # no temp folders left


def _write_v1(path: Path, kind: str, vocab: Vocabulary, U: np.ndarray, V: np.ndarray, w: np.ndarray) -> None:
    """A version-1 bundle as the previous trainer wrote it: U, V, lexical in one scoring form."""
    path.mkdir()
    lines = (f"{t}\t{i!r}\n" for t, i in zip(vocab.words, vocab.idf.tolist(), strict=True))
    (path / "vocab.tsv").write_text("".join(lines))
    for name, array in (("U.npy", U), ("V.npy", V), ("lexical.npy", w)):
        np.save(path / name, array.astype(np.float32))
    (path / "encoder.onnx").write_bytes(build_encoder(U))
    files = {
        name: hashlib.sha256((path / name).read_bytes()).hexdigest()
        for name in ("vocab.tsv", "U.npy", "V.npy", "lexical.npy", "encoder.onnx")
    }
    manifest = {
        "format": "ssi-bundle", "format_version": 1, "kind": kind, "n_dims": U.shape[0], "vocab_size": vocab.size,
        "tokenizer": vocab.tokenizer, "tf_scheme": vocab.tf_scheme, "files": files,
        "content_hash": content_hash(files), "created_at": "2026-11-01T00:00:00+00:00",
    }  # fmt: skip
    (path / MANIFEST).write_text(json.dumps(manifest))


def test_version_1_bundles_still_load_as_their_form(tmp_path: Path) -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    rng = np.random.default_rng(3)
    U, V = (rng.normal(size=(3, vocab.size)).astype(np.float32) for _ in range(2))
    _write_v1(tmp_path / "lowrank", "lowrank", vocab, U, V, np.ones(vocab.size))
    bundle = load_bundle(tmp_path / "lowrank")
    assert bundle.manifest.form == "lowrank" and bundle.manifest.format_version == 1
    assert np.array_equal(bundle.form.values["U"], U) and np.array_equal(bundle.form.values["V"], V)
    w = rng.random(vocab.size).astype(np.float32)
    zeros = np.zeros((1, vocab.size), dtype=np.float32)
    _write_v1(tmp_path / "diagonal", "diagonal", vocab, zeros, zeros, w)
    diagonal = load_bundle(tmp_path / "diagonal")
    assert diagonal.manifest.form == "diagonal" and np.array_equal(diagonal.form.lexical_weights(), w)


def test_version_1_bundle_that_does_not_fit_its_kind_is_refused_with_the_fix(tmp_path: Path) -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    U = np.ones((2, vocab.size), dtype=np.float32)
    _write_v1(tmp_path / "odd", "lowrank", vocab, U, U, np.full(vocab.size, 0.5))
    with pytest.raises(BundleError, match="re-export it with `ssi train`"):
        load_bundle(tmp_path / "odd")


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


def bm25_bundle(path: Path, k1: float) -> Path:
    vocab = Vocabulary.build(TEXTS, min_df=1, bm25=Bm25(k1=k1, b=0.75))
    write_form(path, random_form("lowrank", 3, vocab.size), vocab)
    return path


def test_bundles_that_weight_words_differently_never_share_a_content_hash(tmp_path: Path) -> None:
    """Same arrays and vocabulary, BM25's k1 alone differs: a cached index snapshot keyed by the hash must not be
    reused across them, and a manifest whose k1 was edited by hand no longer verifies."""
    first, second = bm25_bundle(tmp_path / "k1-09", 0.9), bm25_bundle(tmp_path / "k1-15", 1.5)
    a, b = load_bundle(first), load_bundle(second)
    assert a.manifest.files == b.manifest.files and a.content_hash != b.content_hash
    manifest = json.loads((first / MANIFEST).read_text())
    manifest["lexical"]["k1"] = 1.5
    (first / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="content hash does not match"):
        load_bundle(first)


def test_a_format_2_bundle_whose_hash_covers_its_files_alone_still_loads(tmp_path: Path) -> None:
    path = bm25_bundle(tmp_path / "old", 1.2)
    manifest = json.loads((path / MANIFEST).read_text())
    manifest.update(format_version=2, content_hash=content_hash(manifest["files"]))
    (path / MANIFEST).write_text(json.dumps(manifest))
    loaded = load_bundle(path)
    assert loaded.manifest.format_version == 2 and loaded.vocab.bm25 == Bm25(
        k1=1.2, b=0.75, avg_len=loaded.vocab.bm25.avg_len
    )


def test_future_format_version_is_refused(bundle_dir: Path) -> None:
    manifest = json.loads((bundle_dir / MANIFEST).read_text())
    manifest["format_version"] = 99
    (bundle_dir / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="format version 99 is not supported"):
        load_bundle(bundle_dir)


def test_mismatched_shape_is_refused_even_with_matching_hashes(bundle_dir: Path) -> None:
    manifest = json.loads((bundle_dir / MANIFEST).read_text())
    manifest["n_dims"] = 4  # claims N = 4 while U.npy holds N = 3
    manifest["arrays"] = {"U": [4, manifest["vocab_size"]], "V": [4, manifest["vocab_size"]]}
    (bundle_dir / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"U.npy: expected float32 \(4, "):
        load_bundle(bundle_dir)


def test_other_text_pipeline_is_refused(bundle_dir: Path) -> None:
    manifest = json.loads((bundle_dir / MANIFEST).read_text())
    manifest["tokenizer"] = "some-other-tokenizer"
    (bundle_dir / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="made with text pipeline some-other-tokenizer"):
        load_bundle(bundle_dir)


def test_unknown_form_is_refused(bundle_dir: Path) -> None:
    manifest = json.loads((bundle_dir / MANIFEST).read_text())
    manifest["form"] = "psi9"
    (bundle_dir / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="unknown model form 'psi9'"):
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
