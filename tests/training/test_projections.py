"""The linear projections of paper 003 (`--kind lsa`, `cl-lsa`, `opca`, `s2net`): each fits, exports the
`projection` form, loads, and its recorded validation MAP is the harness's MAP of the exported bundle;
the supervised ones learn the synonym corpus's topics that tf-idf cannot see; what each fit computes
is checked against a plain dense computation; the ONNX encoder outputs A q/‖A q‖."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import scipy.linalg
import scipy.sparse as sp
import torch

from ssi.bundle import load_bundle
from ssi.corpus import read_corpus, read_pairs
from ssi.encoder_io import run_encoder
from ssi.forms.projection import Projection
from ssi.products import DocMatrix
from ssi.vocab import Vocabulary
from tests.training.synonyms import SynonymCorpus, held_out_map, train
from training.evaluate.baselines.lsi import LsiBasis
from training.fitted.cl_lsa import concatenated_gram
from training.fitted.opca import opca_map, reduced_covariances
from training.fitted.projections import PairRows
from training.fitted.s2net import draw_negatives, s2net_loss, torch_sparse

N = 16
S2NET = ("--epochs", "40", "--eval-every", "10", "--negatives-per-positive", "4")
EXTRA = {"lsa": (), "cl-lsa": (), "opca": (), "s2net": S2NET}
# (kind, combined with tf-idf) trained once for the module: every kind alone, two of them combined too.
RUNS = [("lsa", False), ("lsa", True), ("cl-lsa", False), ("opca", False), ("s2net", False), ("s2net", True)]


@pytest.fixture(scope="module")
def trained(synonyms: SynonymCorpus, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], tuple]:
    """The RUNS: (summary, bundle folder) of each."""
    root = tmp_path_factory.mktemp("projections")
    out: dict[tuple[str, bool], tuple] = {}
    for kind, combined in RUNS:
        folder = root / f"{kind}-{combined}"
        flag = "--combine-tfidf" if combined else "--no-combine-tfidf"
        out[kind, combined] = (train(synonyms, folder, "--kind", kind, "--dims", str(N), flag, *EXTRA[kind]), folder)
    return out


@pytest.mark.parametrize(("kind", "combined"), RUNS)
def test_each_kind_exports_a_projection_whose_recorded_map_the_harness_reproduces(
    kind: str, combined: bool, trained: dict, synonyms: SynonymCorpus
) -> None:
    summary, folder = trained[kind, combined]
    bundle = load_bundle(folder)
    assert bundle.manifest.form == "projection" and bundle.manifest.index_dims == N
    assert bundle.manifest.training["config"]["kind"] == kind
    valid = bundle.manifest.metrics["valid"]
    w = bundle.form.values["w"]
    assert np.all(w == np.float32(valid["tfidf_weight"]))  # one weight c for every word
    assert valid["beta"] == pytest.approx(1 / (1 + valid["tfidf_weight"]))
    if not combined:
        assert valid["tfidf_weight"] == 0 and valid["map"] == valid["map_alone"]
    else:  # the tuned combination is at least as good as either part on validation
        assert valid["map"] >= max(valid["map_alone"], valid["map_tfidf"]) - 1e-12
    learned, tfidf = held_out_map(synonyms, folder)
    assert summary["valid"]["map"] == pytest.approx(learned, abs=1e-6)  # fit and harness agree
    assert (folder / "history.png").exists()


@pytest.mark.parametrize("kind", ["cl-lsa", "opca", "s2net"])
def test_supervised_projections_learn_what_tfidf_cannot_see(kind: str, trained: dict, synonyms: SynonymCorpus) -> None:
    """Held-out links join documents that share only filler words: tf-idf is near chance, the pairs teach
    the topics. LSA (no pairs) cannot, and is the floor."""
    _, folder = trained[kind, False]
    learned, tfidf = held_out_map(synonyms, folder)
    lsa, _ = held_out_map(synonyms, trained["lsa", False][1])
    assert tfidf < 0.1 and learned > 0.4 and learned > 5 * tfidf and learned > 3 * lsa


def test_the_onnx_encoder_outputs_the_unit_query_projection(trained: dict) -> None:
    _, folder = trained["s2net", True]
    bundle = load_bundle(folder)
    session = ort.InferenceSession(str(bundle.encoder_path), providers=["CPUExecutionProvider"])
    texts = ["left0w1 left0w2 common3", "right5w0", "nothing known here", "common1 common2 common1"]
    x = bundle.vocab.featurize(texts)
    got = run_encoder(lambda feed: session.run(None, dict(feed))[0], x)
    x = x.toarray()
    A = bundle.form.values["A"].astype(np.float64)
    projected = x.astype(np.float64) @ A.T
    norms = np.linalg.norm(projected, axis=1, keepdims=True)
    expected = np.divide(projected, norms, out=np.zeros_like(projected), where=norms > 0)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert np.all(got[2] == 0) and np.linalg.norm(got[0]) == pytest.approx(1, abs=1e-5)  # unknown words: zero


def test_lsa_is_the_truncated_svd_of_the_documents(trained: dict, synonyms: SynonymCorpus) -> None:
    bundle = load_bundle(trained["lsa", True][1])
    X = bundle.vocab.featurize([d.full_text for d in read_corpus(synonyms.corpus)])
    A, B = bundle.form.values["A"], bundle.form.values["B"]
    np.testing.assert_array_equal(A, B)
    np.testing.assert_allclose(A @ A.T, np.eye(N), atol=1e-4)  # orthonormal rows
    # They span the top-N right singular subspace: X keeps Σ of the top N squared singular values.
    s = np.linalg.svd(X.toarray(), compute_uv=False)
    assert np.linalg.norm(X @ A.T) ** 2 == pytest.approx(float((s[:N] ** 2).sum()), rel=1e-4)
    np.testing.assert_allclose(np.abs(A), np.abs(LsiBasis.fit(X, N).components), atol=1e-4)


def synonym_pairs(synonyms: SynonymCorpus) -> tuple[Vocabulary, PairRows]:
    docs = read_corpus(synonyms.corpus)
    vocab = Vocabulary.build([d.full_text for d in docs], min_df=2)
    X = vocab.featurize([d.full_text for d in docs])
    row = {d.id: i for i, d in enumerate(docs)}
    links = read_pairs(synonyms.train_pairs)
    q = np.asarray([row[p.query_id] for p in links], dtype=np.int64)
    d = np.asarray([row[p.doc_id] for p in links], dtype=np.int64)
    return vocab, PairRows(X, q, X, d)


def test_cl_lsa_operator_is_the_centred_gram_of_the_concatenated_pairs(synonyms: SynonymCorpus) -> None:
    _, pairs = synonym_pairs(synonyms)
    Z = sp.hstack([pairs.XQ[pairs.q_rows], pairs.XD[pairs.d_rows]]).toarray().astype(np.float64)
    Z -= Z.mean(axis=0)
    V = np.random.default_rng(0).normal(size=(Z.shape[1], 3))
    np.testing.assert_allclose(concatenated_gram(pairs)(V), Z.T @ (Z @ V), rtol=1e-8, atol=1e-8)


def test_cl_lsa_maps_are_the_halves_of_the_top_principal_directions(trained: dict, synonyms: SynonymCorpus) -> None:
    bundle = load_bundle(trained["cl-lsa", False][1])
    _, pairs = synonym_pairs(synonyms)
    Z = sp.hstack([pairs.XQ[pairs.q_rows], pairs.XD[pairs.d_rows]]).toarray().astype(np.float64)
    Z -= Z.mean(axis=0)
    values = np.linalg.eigvalsh(Z.T @ Z)[::-1]
    C = np.hstack([bundle.form.values["A"], bundle.form.values["B"]]).astype(np.float64)  # N × 2D
    np.testing.assert_allclose(C @ C.T, np.eye(N), atol=1e-4)
    # The captured variance is the top-N eigenvalue sum: the concatenated rows span the top subspace.
    assert np.trace(C @ Z.T @ Z @ C.T) == pytest.approx(values[:N].sum(), rel=1e-5)


def test_opca_solves_the_generalized_eigenproblem_of_eq_23(synonyms: SynonymCorpus) -> None:
    """In the reduced basis P, Σ and Σ_n are the texts' covariance and the pairs' noise covariance
    (eq. 24), and each exported direction a = Pᵀb satisfies P Σ Pᵀ b = λ (P Σ_n Pᵀ + δ I) b."""
    _, pairs = synonym_pairs(synonyms)
    X = pairs.XD
    P = LsiBasis.fit(X, 40).components.astype(np.float64)
    sigma, noise = reduced_covariances(P, X, pairs)
    Y = X.toarray() @ P.T
    np.testing.assert_allclose(sigma, np.cov(Y.T, bias=True), atol=1e-6)
    E = Y[pairs.q_rows] - Y[pairs.d_rows]
    np.testing.assert_allclose(noise, E.T @ E / pairs.size, atol=1e-6)
    ridge = 0.1
    A = opca_map(sigma, noise, P, 5, ridge).astype(np.float64)
    b = A @ P.T  # back to basis coordinates (P has orthonormal rows)
    regularised = noise + ridge * np.trace(noise) / P.shape[0] * np.eye(P.shape[0])
    top = scipy.linalg.eigh(sigma, regularised, eigvals_only=True)[::-1][:5]
    for row, value in zip(b, top, strict=True):
        np.testing.assert_allclose(sigma @ row, value * (regularised @ row), atol=1e-4 * value)


def test_s2net_loss_is_eq_21_on_the_cosines_the_form_ranks_by(synonyms: SynonymCorpus) -> None:
    vocab, pairs = synonym_pairs(synonyms)
    rng = np.random.default_rng(2)
    A = rng.normal(size=(4, vocab.size)).astype(np.float32)
    B = rng.normal(size=(4, vocab.size)).astype(np.float32)
    negatives = draw_negatives(pairs.d_rows, pairs.XD.shape[0], 3, rng)
    assert np.all(negatives != pairs.d_rows[:, None]) and negatives.max() < pairs.XD.shape[0]
    gamma = 10.0
    loss = s2net_loss(
        torch.from_numpy(A), torch.from_numpy(B), torch_sparse(pairs.XQ), torch_sparse(pairs.XD),
        torch.from_numpy(pairs.q_rows), torch.from_numpy(pairs.d_rows), torch.from_numpy(negatives), gamma,
    )  # fmt: skip
    cos = Projection({"A": A, "B": B, "w": np.zeros(vocab.size, np.float32)}).reference_scores(
        pairs.XQ, DocMatrix(pairs.XD)
    )
    q = pairs.q_rows
    delta = cos[q, pairs.d_rows][:, None] - cos[q[:, None], negatives]
    assert float(loss) == pytest.approx(float(np.log1p(np.exp(-gamma * delta)).mean()), rel=1e-5)


def test_s2net_history_shows_its_loss_falling_and_starts_from_lsa(trained: dict) -> None:
    summary, folder = trained["s2net", False]
    history = load_bundle(folder).manifest.training["history"]
    losses = [row["loss"] for row in history if "loss" in row]
    assert len(losses) == 40 and losses[-1] < 0.5 * losses[0]
    lsa_map = load_bundle(trained["lsa", False][1]).manifest.metrics["valid"]["map"]
    assert history[0]["step"] == 0 and history[0]["map"] == pytest.approx(lsa_map, abs=1e-9)
    assert summary["valid"]["map"] == max(row["map"] for row in history if "map" in row)


def test_a_projection_needs_pairs(tmp_path: Path, synonyms: SynonymCorpus) -> None:
    """No usable training pair (every one points at an unknown document): a clear error, no traceback."""
    from typer.testing import CliRunner

    from ssi_cli.main import build_app

    bad = tmp_path / "pairs.tsv"
    bad.write_text("left-0-0\tnowhere\n", encoding="utf-8")
    args = ["train", "--corpus", str(synonyms.corpus), "--pairs", str(bad), "--out", str(tmp_path / "b")]
    result = CliRunner().invoke(build_app(), [*args, "--kind", "cl-lsa", "--no-progress"])
    assert result.exit_code != 0 and "no usable training pairs" in result.output
