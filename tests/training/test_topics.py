"""The EM kinds of paper 003 (`--kind plsa, bltm, bltm-pr, bltm-1v, translation`): they learn what
tf-idf cannot see, EM never lowers its objective, the bundle loads and its reference score is what the
fit measured, and the service refuses it with a clear message (its score is no inner product)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from service.embedding import Embedder
from ssi.bundle import BundleError, load_bundle
from ssi.forms.query_likelihood import term_counts
from ssi.forms.topics import TopicModel
from ssi.forms.translation import WordTranslation
from ssi.products import DocMatrix
from ssi.vocab import Vocabulary
from tests.training.synonyms import TEXTS, SynonymCorpus, held_out_map, train
from training.fitted.ibm1 import top_translations
from training.fitted.topic_em import _project

FAST = ("--dims", "12", "--em-iterations", "25")


def history(bundle_dir: Path) -> list[dict[str, float]]:
    return json.loads((bundle_dir / "manifest.json").read_text())["training"]["history"]


@pytest.mark.parametrize(
    ("kind", "form", "monotone"),
    [
        ("bltm", "topic-lm", True),
        ("bltm-pr", "topic-lm", False),  # EM climbs the regularized objective, not eq. 3 itself
        ("bltm-1v", "topic-lm", False),
        ("translation", "word-translation", True),
    ],
)
def test_pair_models_learn_synonyms_that_tfidf_cannot_see(
    synonyms: SynonymCorpus, tmp_path: Path, kind: str, form: str, monotone: bool
) -> None:
    """Slow: fits each language-model kind by EM on the synonym corpus and ranks its validation pairs."""
    out = tmp_path / kind
    summary = train(synonyms, out, "--kind", kind, *FAST)
    bundle = load_bundle(out)
    assert bundle.manifest.form == form and bundle.manifest.index_dims == 0 and not bundle.encoder_path.exists()
    learned, tfidf = held_out_map(synonyms, out)
    assert tfidf < 0.1 and learned > 0.3 and learned > 5 * tfidf
    assert summary["valid"]["map"] == pytest.approx(learned, abs=1e-6)  # the fit's score is the bundle's
    assert summary["valid"]["map_unigram"] < 0.1  # the unigram model alone sees no synonyms either
    rows = history(out)
    assert [r["step"] for r in rows] == list(range(26)) and (out / "history.png").stat().st_size > 0
    ll = [r["log_likelihood"] for r in rows]
    assert ll[-1] > ll[0]
    if monotone:
        assert all(b >= a - 1e-9 for a, b in zip(ll, ll[1:], strict=False)), ll


def test_plsa_learns_document_topics_and_never_lowers_its_objective(synonyms: SynonymCorpus, tmp_path: Path) -> None:
    """PLSA sees no pairs: it finds each side's topics, which rank a topic's documents of the same side."""
    out = tmp_path / "plsa"
    summary = train(synonyms, out, "--kind", "plsa", *FAST)
    ll = [r["log_likelihood"] for r in history(out)]
    assert all(b >= a - 1e-9 for a, b in zip(ll, ll[1:], strict=False)) and ll[-1] > ll[0] + 0.1
    learned, tfidf = held_out_map(synonyms, out)
    assert learned > tfidf and summary["valid"]["map"] == pytest.approx(learned, abs=1e-6)
    with pytest.raises(BundleError, match="form 'topic-lm' cannot be ranked from an inner-product index"):
        Embedder(load_bundle(out), threads=1)


def test_a_fixed_lambda_is_stored_and_the_service_refuses_the_translation_model(
    synonyms: SynonymCorpus, tmp_path: Path
) -> None:
    out = tmp_path / "wtm"
    summary = train(synonyms, out, "--kind", "translation", "--em-iterations", "3", "--lm-lambda", "0.3")
    bundle = load_bundle(out)
    assert isinstance(bundle.form, WordTranslation) and bundle.form.mixture["lambda"] == pytest.approx(0.3)
    assert summary["valid"]["lambda"] == pytest.approx(0.3)
    with pytest.raises(BundleError, match="form 'word-translation' cannot be ranked from an inner-product index"):
        Embedder(bundle, threads=1)


def test_term_counts_are_recovered_from_tfidf_rows() -> None:
    vocab = Vocabulary.build(TEXTS + ["apple apple apple car road road"], min_df=1)
    counts = term_counts(vocab.featurize(["apple apple apple car road road", "sweet"]), vocab.idf).toarray()
    expected = np.zeros_like(counts)
    for word, n in (("apple", 3), ("car", 1), ("road", 2)):
        expected[0, vocab.id_of(word)] = n
    expected[1, vocab.id_of("sweet")] = 1
    np.testing.assert_allclose(counts, expected, rtol=1e-5)


def test_topic_form_scores_the_query_likelihood_of_its_folded_in_documents() -> None:
    """reference_scores against eqs. 14–16 written out word by word, with P(z|d) folded in by plain EM."""
    vocab = Vocabulary.build(TEXTS, min_df=1)
    rng = np.random.default_rng(0)
    k, n = 3, vocab.size
    phi_q, phi_d = rng.dirichlet(np.ones(n), size=k), rng.dirichlet(np.ones(n), size=k)
    background = rng.dirichlet(np.ones(n))
    lam, alpha, iterations, prior = 0.4, 0.2, 7, 1.1
    form = TopicModel(
        {
            "query_words": phi_q.astype(np.float32),
            "doc_words": phi_d.astype(np.float32),
            "background": background.astype(np.float32),
            "idf": vocab.idf,
            "mixture": np.array([lam, alpha, iterations, prior], dtype=np.float32),
        }
    )
    X = vocab.featurize(TEXTS)
    Q = vocab.featurize(["apple car sweet sweet", "road"])
    got = form.reference_scores(Q, DocMatrix(X))
    C, Cq = term_counts(X, vocab.idf).toarray(), term_counts(Q, vocab.idf).toarray()
    expected = np.zeros((2, len(TEXTS)))
    for d in range(len(TEXTS)):
        theta = np.full(k, 1.0 / k)
        for _ in range(iterations):
            post = phi_d.T * theta  # n × k
            post /= post.sum(axis=1, keepdims=True)
            acc = (C[d][:, None] * post).sum(axis=0) + prior - 1
            theta = acc / acc.sum()
        p = alpha * background + (1 - alpha) * (lam * C[d] / C[d].sum() + (1 - lam) * theta @ phi_q)
        expected[:, d] = Cq @ np.log(p)
    np.testing.assert_allclose(got, expected, rtol=1e-4)


def test_word_translation_form_applies_its_top_k_table() -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    n = vocab.size
    rng = np.random.default_rng(1)
    table = rng.random((n, n)).astype(np.float32)  # target-major P(w|w') before pruning
    targets, probs = top_translations(table / table.sum(axis=0), n, 4)
    assert targets.shape == (n, 4) and np.allclose(probs.sum(axis=1), 1.0)
    form = WordTranslation(
        {
            "targets": targets,
            "probs": probs,
            "background": np.full(n, 1.0 / n, dtype=np.float32),
            "idf": vocab.idf,
            "mixture": np.array([0.0, 0.5], dtype=np.float32),
        }
    )
    T = np.zeros((n, n))
    for source in range(n):
        T[source, targets[source].astype(int)] = probs[source]
    X, Q = vocab.featurize(TEXTS), vocab.featurize(["fruit engine", "wheel wheel"])
    P_ml = term_counts(X, vocab.idf).toarray()
    P_ml /= P_ml.sum(axis=1, keepdims=True)
    expected = term_counts(Q, vocab.idf).toarray() @ np.log(0.5 / n + 0.5 * P_ml @ T).T
    np.testing.assert_allclose(form.reference_scores(Q, DocMatrix(X)), expected, rtol=1e-4)


def test_posterior_regularization_gives_both_sides_the_same_topic_shares() -> None:
    rng = np.random.default_rng(2)
    k = 4
    rq, rd = rng.dirichlet(np.ones(k), size=5), rng.dirichlet(np.ones(k) * 0.5, size=9)
    cq, cd = rng.integers(1, 4, size=5).astype(np.float64), rng.integers(1, 4, size=9).astype(np.float64)
    pq, pd = np.empty_like(rq), np.empty_like(rd)
    before = np.abs(cq @ rq / cq.sum() - cd @ rd / cd.sum()).max()
    _project(rq, 5, cq, rd, 9, cd, 10, pq, pd)
    after = np.abs(cq @ pq / cq.sum() - cd @ pd / cd.sum()).max()
    assert before > 0.05 and after < 1e-4
    np.testing.assert_allclose(pq.sum(axis=1), 1.0) and np.testing.assert_allclose(pd.sum(axis=1), 1.0)


def test_empty_queries_and_documents_score_zero() -> None:
    vocab = Vocabulary.build(TEXTS, min_df=1)
    n = vocab.size
    form = TopicModel(
        {
            "query_words": np.full((2, n), 1.0 / n, dtype=np.float32),
            "doc_words": np.full((2, n), 1.0 / n, dtype=np.float32),
            "background": np.full(n, 1.0 / n, dtype=np.float32),
            "idf": vocab.idf,
            "mixture": np.array([0.5, 0.1, 5, 1.1], dtype=np.float32),
        }
    )
    Q = vocab.featurize(["nothing known", "apple"])
    scores = form.reference_scores(Q, DocMatrix(sp.vstack([vocab.featurize(["zzz"]), vocab.featurize(TEXTS)])))
    assert np.all(scores[0] == 0) and np.all(np.isfinite(scores))
