"""Every model kind: its training scores equal the bundle form it exports, gradients stay sparse,
and a few steps lower the loss."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ssi.vocab import Vocabulary
from training.loss import margin_ranking
from training.models import REGISTRY, ModelShape, make_model
from training.models.block import Block, SparseRows

TEXTS = [
    "red apple fruit sweet",
    "green apple fruit sour",
    "car engine wheel road",
    "truck engine wheel cargo",
    "apple pie recipe sweet",
    "road trip car music",
]


def make_block(X: sp.csr_matrix, queries: list[int], n_words: int, with_gram: bool) -> Block:
    Xq = X[queries]
    gram = np.asarray((Xq @ X.T).toarray(), dtype=np.float32) if with_gram else None
    return Block(queries=SparseRows.of(Xq, n_words), docs=SparseRows.of(X, n_words), gram=gram)


def exported_scores(export, Xq: sp.csr_matrix, Xd: sp.csr_matrix) -> np.ndarray:
    """f(q, d) = (U q)·(V d) + Σ_i w_i q_i d_i, the bundle's scoring form, in plain numpy."""
    Q, D = Xq.toarray(), Xd.toarray()
    return (Q @ export.U.T) @ (D @ export.V.T).T + (Q * export.lexical) @ D.T


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_training_scores_equal_exported_form(kind: str) -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    X = vocab.featurize(TEXTS)
    shape = ModelShape(vocab_size=vocab.size, n_dims=4, n_words=vocab.size, init_scale=0.3, lr=0.1, seed=1)
    model = make_model(kind, shape)
    block = make_block(X, [0, 2], vocab.size, model.needs_gram)
    # A few updates first, so V (zero at start) and the learned weights are not at their start.
    rng = np.random.default_rng(0)
    for _ in range(3):
        model.scores(block)
        model.update(block, rng.normal(size=(2, X.shape[0])).astype(np.float32) * 0.1)
    S = model.scores(block)
    expected = exported_scores(model.export(), X[[0, 2]], X)
    np.testing.assert_allclose(S, expected, rtol=1e-4, atol=1e-5)


def test_frequent_word_restriction_keeps_rare_words_on_the_diagonal() -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    X = vocab.featurize(TEXTS)
    shape = ModelShape(vocab_size=vocab.size, n_dims=3, n_words=4, init_scale=0.3, lr=0.1, seed=0)
    model = make_model("lowrank", shape)
    block = make_block(X, [0, 1], 4, True)
    model.scores(block)
    model.update(block, np.ones((2, X.shape[0]), dtype=np.float32))
    export = model.export()
    assert np.all(export.U[:, 4:] == 0) and np.all(export.V[:, 4:] == 0)
    assert np.any(export.V[:, :4] != 0)
    assert np.all(export.lexical == 1)
    np.testing.assert_allclose(model.scores(block), exported_scores(export, X[[0, 1]], X), rtol=1e-4, atol=1e-5)


def test_update_touches_only_rows_of_words_in_the_block() -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    X = vocab.featurize(TEXTS)
    model = make_model(
        "lowrank", ModelShape(vocab_size=vocab.size, n_dims=4, n_words=vocab.size, init_scale=0.3, lr=0.1, seed=0)
    )
    U0, V0 = model.U.clone(), model.V.clone()
    # Query "red apple fruit sweet" against documents 2 and 3 only (car/truck words).
    block = Block(
        queries=SparseRows.of(X[[0]], vocab.size),
        docs=SparseRows.of(X[[2, 3]], vocab.size),
        gram=np.zeros((1, 2), dtype=np.float32),
    )
    model.scores(block)
    model.V += 0.01  # make V non-zero so U's gradient is non-zero too
    V0 = model.V.clone()
    model.scores(block)
    model.update(block, np.array([[1.0, -1.0]], dtype=np.float32))
    q_words = set(X[0].indices)
    d_words = set(X[2].indices) | set(X[3].indices)
    changed_U = set(np.flatnonzero((model.U != U0).any(dim=1).numpy()))
    changed_V = set(np.flatnonzero((model.V != V0).any(dim=1).numpy()))
    assert changed_U and changed_U <= q_words
    assert changed_V and changed_V <= d_words


def test_margin_ranking_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(3)
    S = rng.normal(size=(2, 5)).astype(np.float64)
    tq = np.array([0, 0, 1, 1])
    tp = np.array([1, 1, 2, 0])
    tn = np.array([3, 4, 4, 4])
    valid = np.array([True, True, True, False])
    loss, coeff, _ = margin_ranking(S, tq, tp, tn, valid, margin=1.0)
    eps = 1e-6
    for i in range(2):
        for j in range(5):
            bumped = S.copy()
            bumped[i, j] += eps
            numeric = (margin_ranking(bumped, tq, tp, tn, valid)[0] - loss) / eps
            assert coeff[i, j] == pytest.approx(numeric, abs=1e-4)


def test_fullw_refuses_a_large_vocabulary() -> None:
    with pytest.raises(ValueError, match="needs a small vocabulary"):
        make_model("fullw", ModelShape(vocab_size=50_000, n_dims=10, n_words=50_000, init_scale=0, lr=0.1, seed=0))


def test_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown model kind 'nope'"):
        make_model("nope", ModelShape(vocab_size=10, n_dims=2, n_words=10, init_scale=0, lr=0.1, seed=0))


def test_rows_of_words_no_training_query_reached_export_as_zero() -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    X = vocab.featurize(TEXTS)
    model = make_model(
        "lowrank", ModelShape(vocab_size=vocab.size, n_dims=4, n_words=vocab.size, init_scale=0.3, lr=0.1, seed=0)
    )
    model.V += 0.01
    block = make_block(X, [0], vocab.size, True)  # only "red apple fruit sweet" is ever a query
    model.scores(block)
    model.update(block, np.linspace(-1, 1, X.shape[0], dtype=np.float32)[None, :])
    U = model.export().U
    seen = set(X[0].indices)
    for word in range(vocab.size):
        assert np.any(U[:, word] != 0) == (word in seen), vocab.words[word]
