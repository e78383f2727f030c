"""Half-transductive ranking (`--kind halftrans`, paper 004 §2.3): it learns what tf-idf cannot see, its update
is the gradient of eq. (6) with the γ-weighted regularizer, and its training scores are the exported form's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ssi.bundle import load_bundle
from ssi.corpus import read_corpus
from ssi.forms import DocumentKeys
from ssi.products import DocMatrix
from ssi.vocab import Vocabulary
from tests.training.synonyms import TEXTS, SynonymCorpus, held_out_map, train
from training.loss import margin_ranking
from training.models import ModelShape, make_model
from training.models.block import Block, SparseRows, Triples

IDS = [f"doc-{i}" for i in range(len(TEXTS))]


def test_learns_synonyms_that_tfidf_cannot_see(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    out = tmp_path / "ht"
    summary = train(
        synonyms, out, "--kind", "halftrans", "--gamma", "1", "--epochs", "40", "--dims", "16", "--lr", "0.1"
    )
    bundle = load_bundle(out)
    docs = read_corpus(synonyms.corpus)
    assert bundle.manifest.form == "halftrans" and 0 < bundle.manifest.documents <= len(docs)
    assert set(bundle.form.keys.ids) <= {d.id for d in docs}
    learned, tfidf = held_out_map(synonyms, out)
    assert tfidf < 0.1 and learned > 0.8 and learned > 8 * tfidf
    assert summary["valid"]["map"] == pytest.approx(learned, abs=1e-6)  # trainer and harness agree


def block_and_model(gamma: float, seed: int = 1):
    vocab = Vocabulary.build(TEXTS, min_df=1)
    X = vocab.featurize(TEXTS)
    shape = ModelShape(
        vocab_size=vocab.size, n_dims=3, n_words=vocab.size, init_scale=0.3, lr=0.1, seed=seed, gamma=gamma,
        documents=DocumentKeys.of(IDS, X),
    )  # fmt: skip
    queries = [0, 2, 5]
    block = Block(
        queries=SparseRows.of(X[queries], vocab.size), docs=SparseRows.of(X, vocab.size), gram=None,
        doc_rows=np.arange(len(TEXTS)),
    )  # fmt: skip
    return make_model("halftrans", shape), block, X, queries


def test_update_is_the_gradient_of_eq_6(monkeypatch: pytest.MonkeyPatch) -> None:
    """∂/∂W and ∂/∂v handed to the optimiser equal autograd of γ·R(k) + R(vᵀWφ(x)) over the block's triples."""
    gamma = 0.7
    model, block, X, _ = block_and_model(gamma)
    rng = np.random.default_rng(2)
    for _ in range(3):  # move v off zero first (each document then has a free vector)
        model.scores(block)
        model.update(block, torch.from_numpy(rng.normal(size=(3, len(TEXTS))).astype(np.float32)))
    assert model.has_vector.all()
    triples = Triples(
        query=torch.tensor([0, 0, 1, 2, 2]), pos=torch.tensor([1, 4, 3, 2, 3]), neg=torch.tensor([2, 3, 0, 1, 4]),
        valid=torch.tensor([True, True, True, True, False]), margin=1.0,
    )  # fmt: skip
    S = model.scores(block)
    _, coeff, _ = margin_ranking(S, triples.query, triples.pos, triples.neg, triples.valid, triples.margin)
    block.triples = triples

    W = model.W.clone().requires_grad_(True)
    v = model.v.clone().requires_grad_(True)
    Xq = torch.from_numpy(X[[0, 2, 5]].toarray())
    Xd = torch.from_numpy(X.toarray())
    EQ = Xq @ W
    t, p, n, valid = triples.query, triples.pos, triples.neg, triples.valid

    def hinge(scores: torch.Tensor) -> torch.Tensor:
        return torch.clamp(1 - scores[t, p] + scores[t, n], min=0)[valid].sum() / valid.sum()

    objective = gamma * hinge(EQ @ (Xd @ W).T) + hinge(EQ @ v.T)  # eq. (6)
    objective.backward()

    got: dict[str, torch.Tensor] = {}
    monkeypatch.setattr(model.opt_W, "step", lambda grad, rows: got.__setitem__("W", grad.clone()))
    monkeypatch.setattr(
        model.opt_v, "step_rows", lambda g, rows: got.__setitem__("v", torch.zeros_like(model.v).index_copy(
            0, torch.from_numpy(rows.astype(np.int64)), g))
    )  # fmt: skip
    model.update(block, coeff)
    torch.testing.assert_close(got["W"], W.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got["v"], v.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_training_scores_equal_the_exported_forms_reference_score(gamma: float) -> None:
    model, block, X, queries = block_and_model(gamma)
    rng = np.random.default_rng(3)
    n = len(TEXTS)
    for _ in range(6):
        S = model.scores(block)
        neg = torch.from_numpy(rng.integers(0, n, size=6))
        pos = torch.from_numpy(rng.integers(0, n, size=6))
        block.triples = Triples(torch.arange(3).repeat_interleave(2), pos, neg, torch.ones(6, dtype=torch.bool), 1.0)
        _, coeff, _ = margin_ranking(S, block.triples.query, block.triples.pos, neg, block.triples.valid)
        coeff[:, 3] = 0.0  # document 3 never moves: it keeps scoring (and is exported) as W d
        model.update(block, coeff)
    form = model.export()
    assert len(form.keys) == int(model.has_vector.sum()) >= 1 and "doc-3" not in form.keys.ids
    np.testing.assert_allclose(
        model.scores(block), form.reference_scores(X[queries], DocMatrix(X, ids=IDS)), rtol=1e-4, atol=1e-5
    )
    # Export re-centred the free vectors on their documents' functional embeddings (mean over documents).
    trained = X[[IDS.index(doc_id) for doc_id in form.keys.ids]]
    np.testing.assert_allclose(form.values["v"].mean(axis=0), (trained @ form.values["W"].T).mean(axis=0), atol=1e-5)
