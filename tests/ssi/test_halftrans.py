"""The half-transductive form (paper 004, eq. 2): f(x, y_i) = v_iᵀWφ(x) for a training document, (Wφ(y))ᵀWφ(x)
for any other; its document keys round-trip through the bundle, which refuses them missing or edited."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from ssi.bundle import DOCUMENTS, BundleError, load_bundle, write_bundle
from ssi.forms import DocumentKeys, FormError
from ssi.forms.halftrans import HalfTransductive
from ssi.products import DocMatrix
from ssi.vocab import Vocabulary
from training.encoder import build_encoder

# D = 4 words, N = 2 dimensions, written out so the expected scores can be read off by hand.
W = np.array([[1, 0, 2, 0], [0, 1, 0, -1]], dtype=np.float32)
X = sp.csr_matrix(np.array([[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1]], dtype=np.float32))
Q = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 0, 1, 0]], dtype=np.float32))
IDS = ["a", "b", "c"]


def tiny(trained: list[int]) -> HalfTransductive:
    """Free vectors for the rows `trained` of X: v = (10, 0), (0, 10), ..."""
    v = np.array([[10, 0], [0, 10], [5, 5]], dtype=np.float32)[: len(trained)]
    keys = DocumentKeys.of([IDS[i] for i in trained], X[trained])
    return HalfTransductive({"W": W, "v": v}, keys)


def test_reference_score_is_v_dot_w_q_and_w_d_for_documents_without_a_vector() -> None:
    form = tiny([0, 1])  # a, b trained; c is not
    # W q: q0 = (1, 1, 0, 0) -> (1, 1); q1 = (0, 0, 1, 0) -> (2, 0). W d of c = (0, -1).
    expected = np.array(
        [
            [10 * 1 + 0 * 1, 0 * 1 + 10 * 1, 0 * 1 + -1 * 1],
            [10 * 2 + 0 * 0, 0 * 2 + 10 * 0, 0 * 2 + -1 * 0],
        ],
        dtype=np.float32,
    )
    np.testing.assert_array_equal(form.reference_scores(Q, DocMatrix(X, ids=IDS)), expected)
    np.testing.assert_array_equal(form.embed_documents_of(X, IDS), [[10, 0], [0, 10], [0, -1]])
    # The served split: (query map q)·embed(d), no diagonal term.
    assert not form.lexical_weights().any()
    np.testing.assert_allclose((Q @ form.query_map().T) @ form.embed_documents_of(X, IDS).T, expected)


def test_without_ids_or_with_changed_text_every_document_falls_back_to_w_d() -> None:
    form = tiny([0, 1])
    functional = (Q @ W.T) @ (X @ W.T).T
    np.testing.assert_allclose(form.reference_scores(Q, DocMatrix(X)), functional)  # ids unknown
    changed = X.tolil()
    changed[1, 3] = 0.5  # document b's text is not the one its vector was learned for
    changed = changed.tocsr()
    embedded = form.embed_documents_of(changed, IDS)
    np.testing.assert_array_equal(embedded[0], [10, 0])
    np.testing.assert_allclose(embedded[1], W @ changed.toarray()[1])


def test_keys_must_match_the_free_vectors() -> None:
    with pytest.raises(FormError, match="needs its documents' ids"):
        HalfTransductive({"W": W, "v": np.zeros((2, 2), np.float32)})
    with pytest.raises(FormError, match="2 free vectors but 1 document ids"):
        HalfTransductive({"W": W, "v": np.zeros((2, 2), np.float32)}, DocumentKeys.of(["a"], X[:1]))
    with pytest.raises(FormError, match="unique"):
        DocumentKeys(("a", "a"), ("x", "y"))


def test_bundle_round_trips_ids_and_fingerprints(tmp_path: Path) -> None:
    texts = ["alpha beta gamma", "beta gamma delta", "gamma delta epsilon", "alpha epsilon"]
    vocab = Vocabulary.build(texts, min_df=1)
    Xt = vocab.featurize(texts)
    rng = np.random.default_rng(0)
    ids = ["C++", "x y", "東京", "last"]
    keys = DocumentKeys.of(ids[:3], Xt[:3])
    form = HalfTransductive(
        {"W": rng.normal(size=(3, vocab.size)).astype(np.float32), "v": rng.normal(size=(3, 3)).astype(np.float32)},
        keys,
    )
    write_bundle(tmp_path / "b", form=form, vocab=vocab, encoder_onnx=build_encoder(form.query_map()))
    bundle = load_bundle(tmp_path / "b")
    assert bundle.manifest.form == "halftrans" and bundle.manifest.documents == 3
    assert bundle.manifest.arrays == {"W": [3, vocab.size], "v": [3, 3]} and DOCUMENTS in bundle.manifest.files
    assert bundle.form.keys == keys
    docs = DocMatrix(Xt, ids=ids)
    Qt = vocab.featurize(["alpha gamma", "delta"])
    np.testing.assert_array_equal(bundle.form.reference_scores(Qt, docs), form.reference_scores(Qt, docs))
    assert np.array_equal(bundle.form.embed_documents_of(Xt, ids)[:3], form.values["v"])

    (tmp_path / "b" / DOCUMENTS).write_text("0000\tother\n", encoding="utf-8")
    with pytest.raises(BundleError, match="contents do not match the manifest's hash"):
        load_bundle(tmp_path / "b")
    (tmp_path / "b" / DOCUMENTS).unlink()
    with pytest.raises(BundleError, match=f"missing {DOCUMENTS}"):
        load_bundle(tmp_path / "b")
