"""The DICE map counted on a corpus equals a count by hand: co-occurring documents over document frequencies."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from ssi.tokenize import bigrams, tokenize
from ssi.vocab import Vocabulary
from training.dice import build_correlated_hashing, dice_top_k

TEXTS = [
    "river bank water fish",
    "bank money loan",
    "river water boat",
    "money loan interest rate",
    "fish boat water river",
    "river bank loan",
]
F = 4


def by_hand(features: list[str], token_sets: list[set[str]], frequent: list[str], k: int) -> dict[str, list]:
    """Each feature's top k frequent words by DICE = 2·|both| / (|docs(i)| + |docs(j)|), ties to the more frequent."""
    out = {}
    for feature in features:
        docs_i = {d for d, s in enumerate(token_sets) if feature in s}
        scored = []
        for j, word in enumerate(frequent):
            docs_j = {d for d, s in enumerate(token_sets) if word in s}
            both = len(docs_i & docs_j)
            if both:
                scored.append((Fraction(2 * both, len(docs_i) + len(docs_j)), -j, j))
        scored.sort(reverse=True)
        out[feature] = [(j, float(score)) for score, _, j in scored[:k]]
    return out


@pytest.mark.parametrize("ngrams", [(1,), (2,), (1, 2)])
def test_dice_map_equals_a_count_by_hand(ngrams: tuple[int, ...]) -> None:
    tokens = [tokenize(t) for t in TEXTS]
    vocab = Vocabulary.build_from_tokens(tokens, min_df=1)
    hashing = build_correlated_hashing(tokens, vocab, n_frequent=F, k=2, ngrams=ngrams, min_df=2)
    sets = [set(t) | set(bigrams(t)) for t in tokens]
    words = {w for t in tokens for w in t} - set(vocab.words[:F])
    pairs = {b for t in tokens for b in bigrams(t)}
    expected_features = (words if 1 in ngrams else set()) | (
        {b for b in pairs if sum(b in s for s in sets) >= 2} if 2 in ngrams else set()
    )
    assert set(hashing.features) == expected_features and len(hashing.features) == len(expected_features)
    assert hashing.info["2grams"] == sum(" " in f for f in expected_features)
    expected = by_hand(hashing.features, sets, vocab.words[:F], k=2)
    for row, feature in enumerate(hashing.features):
        got = [(int(t), float(s)) for t, s in zip(hashing.targets[row], hashing.dice[row], strict=True) if t >= 0]
        assert [t for t, _ in got] == [t for t, _ in expected[feature]], feature
        np.testing.assert_allclose([s for _, s in got], [s for _, s in expected[feature]], rtol=1e-6)


def test_features_without_k_co_occurring_frequent_words_are_padded() -> None:
    # Feature 0 is in document 0 only, which has one frequent word; feature 1 in no document with any.
    targets, dice = dice_top_k([np.array([0]), np.array([1])], [np.array([2]), np.array([], dtype=np.int64)], 3, 2)
    assert targets.tolist() == [[2, -1], [-1, -1]]
    assert dice[0, 0] == pytest.approx(2 * 1 / (1 + 1)) and dice[0, 1] == 0 and not dice[1].any()


def test_bad_settings_are_refused() -> None:
    tokens = [tokenize(t) for t in TEXTS]
    vocab = Vocabulary.build_from_tokens(tokens, min_df=1)
    with pytest.raises(ValueError, match="frequent words must be 1 to"):
        build_correlated_hashing(tokens, vocab, n_frequent=vocab.n_words + 1)
    with pytest.raises(ValueError, match="n-grams must be 1 and/or 2"):
        build_correlated_hashing(tokens, vocab, n_frequent=2, ngrams=(3,))
