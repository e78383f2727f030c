"""Hash kernels (`--kind hashkernel`): they learn what tf-idf cannot see, export a bundle without an
encoder that `ssi eval` ranks, and the trainer's block scores are the exported form's reference score."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from ssi.bundle import load_bundle
from ssi.forms.hashkernel import PRIME
from ssi.products import DocMatrix
from tests.training.synonyms import SynonymCorpus, held_out_map, train
from training.models import ModelShape, make_model
from training.models.block import Block, SparseRows
from training.models.hashkernel import _accumulate

D, H = 60, 37


def unit_rows(n: int, density: float, seed: int) -> sp.csr_matrix:
    X = sp.random(n, D, density=density, random_state=np.random.default_rng(seed), dtype=np.float32, format="csr")
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).ravel()
    return sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X, dtype=np.float32)


def shape(hash_size: int = H, lr: float = 0.1) -> ModelShape:
    return ModelShape(vocab_size=D, n_dims=1, n_words=D, init_scale=0.0, lr=lr, seed=0, hash_size=hash_size)


def test_hash_kernels_learn_synonyms_that_tfidf_cannot_see(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    out = tmp_path / "hk"
    summary = train(synonyms, out, "--kind", "hashkernel", "--hash-size", "4096", "--epochs", "10", "--lr", "0.1")
    bundle = load_bundle(out)
    assert bundle.manifest.form == "hashkernel" and bundle.manifest.arrays["W"] == [4096]
    assert bundle.manifest.index_dims == 0 and not bundle.encoder_path.exists()
    learned, tfidf = held_out_map(synonyms, out)
    assert tfidf < 0.1 and learned > 0.8 and learned > 8 * tfidf
    assert summary["valid"]["map"] == pytest.approx(learned, abs=1e-6)  # trainer and harness agree


def test_block_scores_start_at_tfidf_and_equal_the_exported_reference_score() -> None:
    Q, X = unit_rows(7, 0.2, 1), unit_rows(25, 0.15, 2)
    block = Block(queries=SparseRows.of(Q, D), docs=SparseRows.of(X, D), gram=None)
    model = make_model("hashkernel", shape())
    np.testing.assert_allclose(model.scores(block), (Q @ X.T).toarray(), atol=1e-6)  # W = 0, w = 1: tf-idf
    rng = np.random.default_rng(3)
    for _ in range(5):
        model.scores(block)
        coeff = (rng.random((7, 25)) < 0.1) * rng.normal(size=(7, 25))
        model.update(block, torch.from_numpy(coeff.astype(np.float32)))
    form = model.export()
    assert form.hash_size == H and np.any(form.values["W"] != 0) and np.any(form.values["w"] != 1)
    np.testing.assert_allclose(model.scores(block), form.reference_scores(Q, DocMatrix(X)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dense_share", [0.0, 1.0])  # whole windows of W, or the touched words one by one
def test_gradient_is_each_pair_product_added_into_its_bucket(dense_share: float) -> None:
    Q, X = unit_rows(5, 0.2, 4), unit_rows(9, 0.2, 5)
    coeff = np.random.default_rng(6).normal(size=(5, 9)).astype(np.float32)
    coeff[:, ::2] = 0.0
    grad_W, grad_w = np.zeros(H, np.float32), np.zeros(D, np.float32)
    parts = [
        np.asarray(a, dtype=t)
        for m in (Q, X)
        for a, t in ((m.indptr, np.int64), (m.indices, np.int64), (m.data, np.float32))
    ]
    _accumulate(*parts, coeff, grad_W, grad_w, dense_share)
    expected_W, expected_w = np.zeros(H), np.zeros(D)
    q_rows, d_rows = Q.toarray().astype(np.float64), X.toarray().astype(np.float64)
    for b, p in np.ndindex(*coeff.shape):
        for i in np.flatnonzero(q_rows[b]):
            expected_w[i] += coeff[b, p] * q_rows[b, i] * d_rows[p, i]
            for j in np.flatnonzero(d_rows[p]):
                expected_W[(i * PRIME + j) % H] += coeff[b, p] * q_rows[b, i] * d_rows[p, j]
    np.testing.assert_allclose(grad_W, expected_W, atol=1e-5)
    np.testing.assert_allclose(grad_w, expected_w, atol=1e-5)
