"""Tokenizer and tf-idf properties both halves rely on."""

from __future__ import annotations

import numpy as np
import pytest

from ssi.tokenize import tokenize
from ssi.vocab import Vocabulary


def test_tokenize_folds_case_normalizes_and_splits_on_punctuation() -> None:
    assert tokenize("Hello, WORLD! foo_bar C++ 2007") == ["hello", "world", "foo", "bar", "c", "2007"]
    # NFKC: the ligature and the full-width letters become plain letters; casefold: ß -> ss
    assert tokenize("ﬁne ＡＢＣ Straße") == ["fine", "abc", "strasse"]
    assert tokenize("Café café") == ["café", "café"]


def test_tokenize_drops_overlong_runs_and_handles_empty() -> None:
    assert tokenize("") == []
    assert tokenize("  ...  ") == []
    assert tokenize("a" * 41 + " ok") == ["ok"]


def test_vocabulary_orders_by_document_frequency_and_caps_size() -> None:
    texts = ["apple banana", "apple cherry", "apple banana", "durian"]
    vocab = Vocabulary.build(texts, max_words=2, min_df=1)
    assert vocab.words == ["apple", "banana"]
    assert vocab.idf[0] < vocab.idf[1]  # the more common word weighs less


def test_min_df_drops_rare_words() -> None:
    vocab = Vocabulary.build(["a b", "a c", "a b"], min_df=2)
    assert set(vocab.words) == {"a", "b"}


def test_featurize_rows_are_unit_length_tfidf() -> None:
    vocab = Vocabulary.build(["x y z", "x y", "x"], min_df=1)
    X = vocab.featurize(["x x y", "nothing known", "z"])
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).ravel()
    assert norms == pytest.approx([1.0, 0.0, 1.0], abs=1e-6)
    row = X[0].toarray().ravel()
    x, y = vocab.id_of("x"), vocab.id_of("y")
    expected = np.array([(1 + np.log(2)) * vocab.idf[x], 1.0 * vocab.idf[y]])
    expected /= np.linalg.norm(expected)
    assert row[[x, y]] == pytest.approx(expected, rel=1e-6)
    assert X.dtype == np.float32 and X.has_sorted_indices


def test_featurize_tokens_matches_featurize() -> None:
    texts = ["the cat sat", "a dog; the cat!"]
    vocab = Vocabulary.build(texts, min_df=1)
    a = vocab.featurize(texts).toarray()
    b = vocab.featurize_tokens([tokenize(t) for t in texts], documents=True).toarray()
    assert np.array_equal(a, b)


def test_a_text_alone_gets_the_same_bits_as_in_a_batch() -> None:
    """One query is featurized by its own short path; the service batches concurrent queries, so a
    query's vector (and its ranking) must not depend on what it was batched with."""
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(60)]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(0, 40)))) for _ in range(50)]
    texts += ["", "nothing known here", "w1 w1 w1 w2"]
    vocab = Vocabulary.build(texts, min_df=1)
    batch = vocab.featurize(texts)
    for row, text in enumerate(texts):
        alone = vocab.featurize([text])
        assert alone.shape == (1, vocab.size) and alone.has_sorted_indices
        np.testing.assert_array_equal(alone.indices, batch[row].indices)
        np.testing.assert_array_equal(alone.data, batch[row].data)
