"""The correlated-hashing map in the text pipeline: featurize appends h = H x_rare, and the map travels
in the bundle (hashed like every other file); a vocabulary or bundle without one behaves as before."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ssi.bundle import BundleError, load_bundle, write_bundle
from ssi.feature_hashing import TARGETS_FILE, CorrelatedHashing, HashingError
from ssi.forms import form_class
from ssi.vocab import Vocabulary
from training.encoder import build_encoder

WORDS = ["river", "water", "bank", "money", "boat"]  # ids by document frequency; the top 3 are hashed onto


def make_hashing() -> CorrelatedHashing:
    return CorrelatedHashing(
        n_frequent=3,
        features=["kayak", "boat", "river bank", "loan"],
        idf=np.array([2.0, 1.5, 3.0, 2.5], dtype=np.float32),
        targets=np.array([[0, 1], [1, 0], [2, 0], [2, -1]], dtype=np.int32),
        dice=np.array([[0.8, 0.5], [0.6, 0.4], [0.9, 0.7], [0.5, 0.0]], dtype=np.float32),
    )


def make_vocab() -> Vocabulary:
    return Vocabulary(WORDS, np.array([1.0, 1.1, 1.2, 1.3, 1.4], dtype=np.float32), hashing=make_hashing())


def test_featurize_appends_the_rare_features_spread_over_their_frequent_words() -> None:
    vocab = make_vocab()
    assert vocab.n_words == 5 and vocab.size == 8
    x = vocab.featurize(["Kayak on the river bank, kayak!"]).toarray()[0]
    plain = Vocabulary(WORDS, vocab.idf).featurize(["Kayak on the river bank, kayak!"]).toarray()[0]
    np.testing.assert_allclose(x[:5], plain)  # the word part is today's tf-idf, unchanged
    # Rare features: kayak twice (1 + log 2)·2.0 and the 2-gram "river bank" once 3.0, unit length.
    kayak, river_bank = (1 + math.log(2)) * 2.0, 3.0
    norm = math.hypot(kayak, river_bank)
    kayak, river_bank = kayak / norm, river_bank / norm
    expected = np.zeros(3)
    expected[[0, 1]] += kayak / 2  # kayak → river, water with weight 1/k
    expected[[2, 0]] += river_bank / 2  # "river bank" → bank, river
    np.testing.assert_allclose(x[5:], expected, rtol=1e-6)


def test_a_text_without_rare_features_has_an_empty_hashed_block() -> None:
    x = make_vocab().featurize(["water money", ""]).toarray()
    assert not x[:, 5:].any() and x[0, :5].any() and not x[1].any()


def test_only_the_listed_ngrams_are_hashed() -> None:
    words_only = make_hashing()
    words_only.ngrams = (1,)
    vocab = Vocabulary(WORDS, np.ones(5, dtype=np.float32), hashing=words_only)
    assert not vocab.featurize(["river bank"]).toarray()[0, 5:].any()


def test_the_map_round_trips_through_the_bundle(tmp_path: Path) -> None:
    vocab = make_vocab()
    cls = form_class("cfh")
    rng = np.random.default_rng(0)
    form = cls({k: rng.normal(size=s).astype(np.float32) for k, s in cls.shapes(4, vocab.size, F=3).items()})
    write_bundle(tmp_path / "b", form=form, vocab=vocab, encoder_onnx=build_encoder(form.query_map()))
    bundle = load_bundle(tmp_path / "b")
    hashing = bundle.vocab.hashing
    assert hashing is not None and hashing.features == vocab.hashing.features
    np.testing.assert_array_equal(hashing.targets, vocab.hashing.targets)
    np.testing.assert_array_equal(hashing.dice, vocab.hashing.dice)
    assert bundle.manifest.hashing == {
        "frequent": 3,
        "k": 2,
        "ngrams": [1, 2],
        "features": 4,
        "weights": "1/k (paper 001, eq. 6)",
    }
    assert bundle.manifest.vocab_size == 8 and bundle.manifest.index_dims == 8 and TARGETS_FILE in bundle.manifest.files
    texts = ["kayak river bank", "boat loan money"]
    np.testing.assert_array_equal(bundle.vocab.featurize(texts).toarray(), vocab.featurize(texts).toarray())
    assert hashing.rows_of("river bank") == [(2, pytest.approx(0.9)), (0, pytest.approx(0.7))]


def test_an_edited_map_is_refused(tmp_path: Path) -> None:
    vocab = make_vocab()
    cls = form_class("cfh")
    form = cls({k: np.zeros(s, dtype=np.float32) for k, s in cls.shapes(2, vocab.size, F=3).items()})
    write_bundle(tmp_path / "b", form=form, vocab=vocab, encoder_onnx=build_encoder(form.query_map()))
    np.save(tmp_path / "b" / TARGETS_FILE, np.zeros((4, 2), dtype=np.int32))
    with pytest.raises(BundleError, match=f"{TARGETS_FILE}: contents do not match"):
        load_bundle(tmp_path / "b")


def test_an_inconsistent_map_is_refused() -> None:
    good = make_hashing()
    with pytest.raises(HashingError, match="targets must be frequent-word ids"):
        CorrelatedHashing(3, good.features, good.idf, good.targets + 3, good.dice)
    with pytest.raises(HashingError, match="listed twice"):
        CorrelatedHashing(3, ["kayak", "kayak"], good.idf[:2], good.targets[:2], good.dice[:2])
    with pytest.raises(ValueError, match="targets 3 frequent words, the vocabulary has 2"):
        Vocabulary(["a", "b"], np.ones(2, dtype=np.float32), hashing=good)


def test_a_vocabulary_without_a_map_is_unchanged() -> None:
    vocab = Vocabulary(WORDS, np.ones(5, dtype=np.float32))
    assert vocab.hashing is None and vocab.size == vocab.n_words == 5
    assert vocab.featurize(["kayak river"]).shape == (1, 5)
