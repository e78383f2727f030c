"""Scorers against brute-force oracles: featurizer, products, tf-idf, BM25, LSI, mix, Rocchio, model forms."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest
import scipy.sparse as sp

from ssi import products
from ssi.forms.diagonal import Diagonal
from ssi.forms.lowrank import LowRank
from ssi.forms.noidentity import NoIdentity
from ssi.products import DocMatrix
from ssi.records import Document, Pair
from ssi.tokenize import tokenize
from ssi.vocab import Vocabulary
from training.evaluate.baselines import BaselineContext
from training.evaluate.baselines.bm25 import BM25Scorer
from training.evaluate.baselines.lsi import LsiBasis, LsiScorer
from training.evaluate.baselines.lsi_mix import LsiMixScorer
from training.evaluate.baselines.query_expansion import RocchioScorer
from training.evaluate.baselines.tfidf import TfidfScorer
from training.evaluate.features import TextFeatures, TokenTable
from training.evaluate.form_scorer import FormScorer
from training.evaluate.harness import evaluate
from training.evaluate.metrics import MAP
from training.evaluate.tasks import doc_doc_task
from training.evaluate.tuning import build_baseline

TOPICS = [
    "cat dog pet fur paw tail vet leash kitten puppy",
    "star planet orbit moon comet galaxy telescope sun",
    "bread flour oven yeast dough bake crust butter",
    "river boat water fish bridge shore current bank",
]
COMMON = "the of and a to in is it".split()


def make_docs(n: int = 40, seed: int = 0) -> list[Document]:
    """Documents mostly about one topic each, with common words everywhere and some repeats."""
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)].split()
        words = rng.choice(topic, size=25).tolist() + rng.choice(COMMON, size=15).tolist()
        words += rng.choice(" ".join(TOPICS).split(), size=5).tolist()
        docs.append(Document(f"d{i}", f"Doc {i} {topic[0]}", " ".join(rng.permutation(words).tolist())))
    return docs


QUERIES = ["cat dog", "planet orbit telescope the", "bread oven", "boat boat water", "nothing known here", ""]


@pytest.fixture()
def corpus() -> tuple[list[Document], Vocabulary, TextFeatures]:
    docs = make_docs()
    vocab = Vocabulary.build([d.full_text for d in docs], max_words=40, min_df=1)
    return docs, vocab, TextFeatures(vocab)


def dense(vocab: Vocabulary, texts: list[str]) -> np.ndarray:
    return vocab.featurize(texts).toarray().astype(np.float64)


def test_text_features_equal_the_vocabulary_featurizer(corpus) -> None:
    docs, vocab, features = corpus
    texts = [d.full_text for d in docs] + QUERIES
    got = features(texts)
    assert (got != vocab.featurize(texts)).nnz == 0
    assert (features(texts) != got).nnz == 0  # memoized rows come back the same
    assert got.dtype == np.float32 and got.has_sorted_indices


def test_token_table_tokenizes_each_distinct_text_once() -> None:
    table = TokenTable()
    first = table.ids(["a b a", "c"])
    again = table.ids(["a b a"])
    assert first[0] is again[0] and len(table) == 2
    assert [table.words[i] for i in first[0]] == tokenize("a b a")


@pytest.mark.parametrize("speedup", [1e-9, 1e9])  # force the all-sparse and the dense/sparse split paths
def test_doc_matrix_products_equal_the_plain_product(corpus, monkeypatch, speedup: float) -> None:
    docs, vocab, features = corpus
    monkeypatch.setattr(products, "DENSE_SPEEDUP", speedup)
    X = features([d.full_text for d in docs])
    before = (X.data.copy(), X.indices.copy(), X.indptr.copy())
    matrix = DocMatrix(X, min_df_fraction=0.3)
    assert matrix.dense_cols.shape[0] > 0
    Q = features(QUERIES + [docs[0].full_text])
    w = np.random.default_rng(0).uniform(0, 2, vocab.size).astype(np.float32)
    np.testing.assert_allclose(matrix.products(Q), (Q @ X.T).toarray(), atol=1e-6)
    np.testing.assert_allclose(matrix.products(Q, w), (Q.multiply(w) @ X.T).toarray(), atol=1e-6)
    # Building and using the matrix must not touch the caller's arrays.
    for array, copy in zip((X.data, X.indices, X.indptr), before, strict=True):
        np.testing.assert_array_equal(array, copy)


def test_tfidf_scorer_equals_brute_force_cosine(corpus) -> None:
    docs, vocab, features = corpus
    scorer = TfidfScorer(features, docs, block_size=4)  # several blocks
    D = dense(vocab, [d.full_text for d in docs])
    Q = dense(vocab, QUERIES)
    cos = (Q @ D.T) / np.maximum(np.linalg.norm(Q, axis=1, keepdims=True) * np.linalg.norm(D, axis=1), 1e-12)
    np.testing.assert_allclose(scorer.score(QUERIES), cos, atol=1e-6)


def test_tfidf_memo_returns_the_same_read_only_scores(corpus) -> None:
    docs, _, features = corpus
    memo = TfidfScorer(features, docs, memo_bytes=1 << 20)
    first = memo.score(QUERIES)
    assert memo.score(list(QUERIES)) is first and not first.flags.writeable
    np.testing.assert_array_equal(first, TfidfScorer(features, docs).score(QUERIES))


def test_bm25_scorer_equals_bm25s_on_the_same_tokens() -> None:
    docs = make_docs()
    scorer = BM25Scorer(docs, k1=1.2, b=0.6)
    oracle = bm25s.BM25(k1=1.2, b=0.6, method="lucene")
    oracle.index([tokenize(d.full_text) for d in docs], show_progress=False)
    got = scorer.score(QUERIES)
    for row, query in enumerate(QUERIES):
        known = [t for t in tokenize(query) if t in oracle.vocab_dict]
        expected = oracle.get_scores(known) if known else np.zeros(len(docs))
        np.testing.assert_allclose(got[row], expected, rtol=1e-5, atol=1e-6)
    assert got[QUERIES.index("nothing known here")].max() == 0.0


def test_lsi_scorer_is_tfidf_similarity_in_the_top_singular_space(corpus) -> None:
    docs, vocab, features = corpus
    X = features([d.full_text for d in docs])
    basis = LsiBasis.fit(X, k=5)
    _, s, vt = np.linalg.svd(X.toarray().astype(np.float64), full_matrices=False)
    np.testing.assert_allclose(basis.singular_values, s[:5], rtol=1e-4)
    P = vt[:3].T
    q, d = dense(vocab, QUERIES[:4]) @ P, X.toarray() @ P
    # A singular vector's sign is arbitrary, but it flips on both sides: the scores do not change.
    np.testing.assert_allclose(LsiScorer(features, X, basis, k=3).score(QUERIES[:4]), q @ d.T, atol=1e-5)
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (d / np.linalg.norm(d, axis=1, keepdims=True)).T
    cosine = LsiScorer(features, X, basis, k=3, normalize=True)
    np.testing.assert_allclose(cosine.score(QUERIES[:4]), cos, atol=1e-4)


def test_lsi_basis_from_arpack_matches_the_dense_svd() -> None:
    rng = np.random.default_rng(0)
    X = sp.random(510, 520, density=0.02, random_state=1, format="csr", dtype=np.float32)
    X.data[:] = rng.uniform(0.1, 1.0, X.nnz)
    basis = LsiBasis.fit(X, k=4)  # min(shape) > 500: the ARPACK path
    s = np.linalg.svd(X.toarray().astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(basis.singular_values, s[:4], rtol=1e-3)
    assert np.all(np.diff(basis.singular_values) <= 0)


def test_lsi_mix_is_the_alpha_mixture(corpus) -> None:
    docs, _, features = corpus
    tfidf = TfidfScorer(features, docs)
    lsi = LsiScorer(features, tfidf.X, LsiBasis.fit(tfidf.X, k=4), k=4)
    mix = LsiMixScorer(tfidf, lsi, alpha=0.25)
    expected = 0.25 * lsi.score(QUERIES) + 0.75 * tfidf.score(QUERIES)
    np.testing.assert_allclose(mix.score(QUERIES), expected, atol=1e-6)


def test_rocchio_equals_a_brute_force_expansion(corpus) -> None:
    docs, vocab, features = corpus
    tfidf = TfidfScorer(features, docs)
    scorer = RocchioScorer(tfidf, fb_docs=3, fb_weight=0.5, fb_terms=None)
    D = dense(vocab, [d.full_text for d in docs])
    for query in QUERIES[:4]:
        q = dense(vocab, [query])[0]
        first = D @ q
        top = np.argsort(-first, kind="stable")[:3]
        expanded = q + 0.5 * D[top].mean(axis=0)
        expected = D @ expanded / np.linalg.norm(expanded)
        np.testing.assert_allclose(scorer.score([query])[0], expected, atol=1e-5)


def test_rocchio_term_cut_keeps_the_heaviest_expansion_words(corpus) -> None:
    docs, _, features = corpus
    scorer = RocchioScorer(TfidfScorer(features, docs), fb_docs=5, fb_weight=1.0, fb_terms=2)
    Q = features(["cat"])
    expanded = scorer.expand(Q)
    assert expanded.nnz <= Q.nnz + 2


def random_ssi(vocab_size: int, n_dims: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((n_dims, vocab_size)).astype(np.float32)
    V = rng.standard_normal((n_dims, vocab_size)).astype(np.float32)
    return U, V


def test_form_scorer_equals_numpy_f_of_q_and_d(corpus) -> None:
    docs, vocab, _ = corpus
    U, V = random_ssi(vocab.size)
    scorer = FormScorer(vocab, LowRank({"U": U, "V": V}), docs, block_size=4)
    Q, D = dense(vocab, QUERIES), dense(vocab, [d.full_text for d in docs])
    np.testing.assert_allclose(scorer.score(QUERIES), (Q @ U.T) @ (V @ D.T) + Q @ D.T, rtol=1e-4, atol=1e-4)
    without_identity = FormScorer(vocab, NoIdentity({"U": U, "V": V}), docs)
    np.testing.assert_allclose(without_identity.score(QUERIES), (Q @ U.T) @ (V @ D.T), rtol=1e-4, atol=1e-4)
    w = np.random.default_rng(1).uniform(0.5, 1.5, vocab.size).astype(np.float32)
    diagonal = FormScorer(vocab, Diagonal({"w": w}), docs)
    np.testing.assert_allclose(diagonal.score(QUERIES), (Q * w) @ D.T, rtol=1e-4, atol=1e-4)


def test_form_scorer_refuses_a_form_of_another_vocabulary(corpus) -> None:
    docs, vocab, _ = corpus
    U, V = random_ssi(vocab.size - 1)
    with pytest.raises(ValueError, match="D = "):
        FormScorer(vocab, LowRank({"U": U, "V": V}), docs)


def link_task(docs: list[Document]):
    """Each document links to the next two of its topic (valid) and the third (train)."""
    n, k = len(docs), len(TOPICS)
    valid = [Pair(docs[i].id, docs[(i + k) % n].id) for i in range(n)]
    valid += [Pair(docs[i].id, docs[(i + 2 * k) % n].id) for i in range(n)]
    train = [Pair(docs[i].id, docs[(i + 3 * k) % n].id) for i in range(n)]
    return doc_doc_task(docs, valid, train)


def test_evaluate_runs_every_scorer_on_the_same_queries(corpus) -> None:
    docs, _, features = corpus
    task = link_task(docs)
    ctx = BaselineContext(docs, features, lsi_k_grid=(2, 4), block_size=8)
    scorers = {name: build_baseline(name, ctx)[0] for name in ("tfidf", "bm25", "lsi", "lsi-mix", "qe")}
    table = evaluate(task, scorers, block_size=16)
    assert list(table.results) == ["tfidf", "bm25", "lsi", "lsi-mix", "qe"]
    for result in table.results.values():
        assert all(v.shape == (task.n_queries,) for v in result.per_query.values())
        assert 0.0 <= result.summary[MAP].mean <= 1.0
    assert table.ratio("tfidf") == pytest.approx(1.0)
    # Topic words make the linked documents findable: far better than a random ranking.
    assert table.results["tfidf"].summary[MAP].mean > 0.3


def test_tuning_picks_the_best_grid_point(corpus) -> None:
    docs, _, features = corpus
    task = link_task(docs)
    ctx = BaselineContext(docs, features, lsi_k_grid=(1, 2, 4))
    scorer, result = build_baseline("lsi", ctx, tune_on=task)
    values = dict((p["k"], v) for p, v in result.grid)
    assert sorted(values) == [1, 2, 4]
    assert result.chosen["k"] == max(values, key=lambda k: (values[k], -k))
    assert scorer.k == result.chosen["k"]
