"""Every model kind: its training scores equal the reference score of the form it exports, gradients
stay sparse, and warm starts begin exactly where the trained model was."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from ssi.forms import DocumentKeys, Form
from ssi.products import DocMatrix
from ssi.tokenize import tokenize
from ssi.vocab import Vocabulary
from tests.training.synonyms import TEXTS
from training.dice import HashingPlan
from training.loss import margin_ranking
from training.models import REGISTRY, ModelShape, make_model
from training.models.block import Block, SparseRows


def make_block(X: sp.csr_matrix, queries: list[int], n_words: int, with_gram: bool) -> Block:
    Xq = X[queries]
    gram = torch.from_numpy(np.asarray((Xq @ X.T).toarray(), dtype=np.float32)) if with_gram else None
    rows = np.arange(X.shape[0])
    return Block(queries=SparseRows.of(Xq, n_words), docs=SparseRows.of(X, n_words), gram=gram, doc_rows=rows)


def doc_ids(n: int) -> list[str]:
    return [f"doc-{i}" for i in range(n)]


def exported_scores(export: Form, Xq: sp.csr_matrix, Xd: sp.csr_matrix) -> np.ndarray:
    """f(q, d) as the exported form defines it (its reference score)."""
    return export.reference_scores(Xq, DocMatrix(Xd, ids=doc_ids(Xd.shape[0])))


def shape_of(vocab: Vocabulary, n_dims: int = 4, seed: int = 1, n_words: int | None = None) -> ModelShape:
    documents = DocumentKeys.of(doc_ids(len(TEXTS)), vocab.featurize(TEXTS))  # halftrans: one vector per text
    return ModelShape(
        vocab_size=vocab.size,
        n_dims=n_dims,
        n_words=n_words or vocab.size,
        init_scale=0.3,
        lr=0.1,
        seed=seed,
        documents=documents,
    )


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_training_scores_equal_exported_form(kind: str) -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    n_words = vocab.size
    if kind == "cfh":  # rows [x_D ; h]: the other words and 2-grams hashed onto the top 4 (training.dice)
        vocab, n_words = HashingPlan(4, k=2, min_df=1).build([tokenize(t) for t in TEXTS], vocab), 4
    X = vocab.featurize(TEXTS)
    model = make_model(kind, shape_of(vocab, n_words=n_words))
    assert model.export().name == kind
    block = make_block(X, [0, 2], n_words, model.needs_gram)
    # A few updates first, so V (zero at start) and the learned weights are not at their start.
    rng = np.random.default_rng(0)
    for _ in range(3):
        model.scores(block)
        model.update(block, torch.from_numpy(rng.normal(size=(2, X.shape[0])).astype(np.float32) * 0.1))
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
    model.update(block, torch.from_numpy(np.ones((2, X.shape[0]), dtype=np.float32)))
    export = model.export()
    U, V = export.values["U"], export.values["V"]
    assert np.all(U[:, 4:] == 0) and np.all(V[:, 4:] == 0)
    assert np.any(V[:, :4] != 0)
    assert np.all(export.lexical_weights() == 1)
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
        gram=torch.zeros(1, 2),
    )
    model.scores(block)
    model.V += 0.01  # make V non-zero so U's gradient is non-zero too
    V0 = model.V.clone()
    model.scores(block)
    model.update(block, torch.from_numpy(np.array([[1.0, -1.0]], dtype=np.float32)))
    q_words = set(X[0].indices)
    d_words = set(X[2].indices) | set(X[3].indices)
    changed_U = set(np.flatnonzero((model.U != U0).any(dim=1).numpy()))
    changed_V = set(np.flatnonzero((model.V != V0).any(dim=1).numpy()))
    assert changed_U and changed_U <= q_words
    assert changed_V and changed_V <= d_words


def test_margin_ranking_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(3)
    S = torch.from_numpy(rng.normal(size=(2, 5)).astype(np.float64))
    tq = torch.tensor([0, 0, 1, 1])
    tp = torch.tensor([1, 1, 2, 0])
    tn = torch.tensor([3, 4, 4, 4])
    valid = torch.tensor([True, True, True, False])
    loss, coeff, _ = margin_ranking(S, tq, tp, tn, valid, margin=1.0)
    eps = 1e-6
    for i in range(2):
        for j in range(5):
            bumped = S.clone()
            bumped[i, j] += eps
            numeric = (float(margin_ranking(bumped, tq, tp, tn, valid)[0]) - float(loss)) / eps
            assert float(coeff[i, j]) == pytest.approx(numeric, abs=1e-4)


def test_fullw_refuses_a_large_vocabulary() -> None:
    with pytest.raises(ValueError, match="needs a small vocabulary"):
        make_model("fullw", ModelShape(vocab_size=50_000, n_dims=10, n_words=50_000, init_scale=0, lr=0.1, seed=0))


def test_unknown_kind() -> None:
    shape = ModelShape(vocab_size=10, n_dims=2, n_words=10, init_scale=0, lr=0.1, seed=0)
    with pytest.raises(ValueError, match="unknown --kind 'nope'"):
        make_model("nope", shape)
    with pytest.raises(ValueError, match="--kind lsa is fitted"):
        make_model("lsa", shape)


def test_rows_of_words_no_training_query_reached_export_as_zero() -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    X = vocab.featurize(TEXTS)
    model = make_model(
        "lowrank", ModelShape(vocab_size=vocab.size, n_dims=4, n_words=vocab.size, init_scale=0.3, lr=0.1, seed=0)
    )
    model.V += 0.01
    block = make_block(X, [0], vocab.size, True)  # only "red apple fruit sweet" is ever a query
    model.scores(block)
    model.update(block, torch.from_numpy(np.linspace(-1, 1, X.shape[0], dtype=np.float32)[None, :]))
    U = model.export().values["U"]
    seen = set(X[0].indices)
    for word in range(vocab.size):
        assert np.any(U[:, word] != 0) == (word in seen), vocab.words[word]


def _trained_lowrank(X: sp.csr_matrix, vocab: Vocabulary) -> Form:
    model = make_model("lowrank", shape_of(vocab))
    block = make_block(X, [0, 1, 2], vocab.size, True)
    rng = np.random.default_rng(4)
    for _ in range(3):
        model.scores(block)
        model.update(block, torch.from_numpy(rng.normal(size=(3, X.shape[0])).astype(np.float32)))
    return model.export()


@pytest.mark.parametrize("kind", ["lowrank", "psi3"])
def test_warm_start_begins_exactly_at_the_trained_lowrank_model(kind: str) -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    X = vocab.featurize(TEXTS)
    init = _trained_lowrank(X, vocab)
    model = make_model(kind, shape_of(vocab, seed=9), init)
    block = make_block(X, [3, 4], vocab.size, True)
    np.testing.assert_allclose(model.scores(block), exported_scores(init, X[[3, 4]], X), rtol=1e-4, atol=1e-5)
    # ... and training moves on from there (PSI-3's cubic term starts at zero but is learned).
    model.update(block, torch.from_numpy(np.linspace(-1, 1, 2 * X.shape[0], dtype=np.float32).reshape(2, -1)))
    assert not np.allclose(model.scores(block), exported_scores(init, X[[3, 4]], X))
    if kind == "psi3":
        assert np.any(model.export().values["Y3"] != 0)


def test_warm_start_rate_scale_zero_freezes_the_degree_two_tables() -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    X = vocab.featurize(TEXTS)
    init = _trained_lowrank(X, vocab)
    model = make_model("psi3", shape_of(vocab, seed=9), init, warm_lr_scale=0.0)
    U0, V0 = model.U.clone(), model.V.clone()
    block = make_block(X, [3, 4], vocab.size, True)
    for _ in range(2):
        model.scores(block)
        model.update(block, torch.from_numpy(np.linspace(-1, 1, 2 * X.shape[0], dtype=np.float32).reshape(2, -1)))
    assert np.array_equal(model.U.numpy(), U0.numpy()) and np.array_equal(model.V.numpy(), V0.numpy())
    assert np.any(model.Y3.numpy() != 0) and np.any(model.export().values["V3"] != 0)


def test_warm_start_refusals() -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    init = _trained_lowrank(vocab.featurize(TEXTS), vocab)
    with pytest.raises(ValueError, match="trains from scratch"):
        make_model("diagonal", shape_of(vocab), init)
    with pytest.raises(ValueError, match="N = 4, this model N = 8"):
        make_model("psi3", shape_of(vocab, n_dims=8), init)
    symmetric = make_model("symmetric", shape_of(vocab)).export()
    with pytest.raises(ValueError, match="warm-starts from a 'lowrank' bundle, got 'symmetric'"):
        make_model("psi3", shape_of(vocab), symmetric)
    restricted = ModelShape(vocab_size=vocab.size, n_dims=4, n_words=3, init_scale=0.3, lr=0.1, seed=0)
    with pytest.raises(ValueError, match="beyond the top 3"):
        make_model("psi3", restricted, init)
