"""Nearest words: the closest word embeddings (Euclidean), never the word itself or a word without one."""

from __future__ import annotations

import numpy as np
import pytest

from ssi.forms import form_class
from ssi.vocab import Vocabulary
from ssi.words import WordsError, nearest_words

TEXTS = ["river bank water", "money bank loan", "stream water flow", "loan credit money", "piano lute pitch"]


@pytest.fixture
def vocab() -> Vocabulary:
    return Vocabulary.build(TEXTS, min_df=1)


def embed(vocab: Vocabulary, points: dict[str, tuple[float, float]]) -> np.ndarray:
    """A 2 × D table whose column for each named word is its point; other words have no embedding."""
    table = np.zeros((2, vocab.size), dtype=np.float32)
    for word, point in points.items():
        table[:, vocab.id_of(word)] = point
    return table


def test_neighbours_are_the_closest_columns_of_the_word_table(vocab: Vocabulary) -> None:
    V = embed(vocab, {"money": (1, 0), "loan": (1.1, 0), "credit": (1.5, 0.2), "river": (-1, 3), "piano": (9, 9)})
    form = form_class("lowrank")({"U": np.ones_like(V), "V": V})
    got = nearest_words(form, vocab, "Money", k=3)
    assert [n.word for n in got] == ["loan", "credit", "river"]  # "piano" is farther, the rest have no embedding
    assert got[0].distance == pytest.approx(0.1, abs=1e-6)
    assert all(a.distance <= b.distance for a, b in zip(got, got[1:], strict=False))


def test_symmetric_form_reads_its_one_table(vocab: Vocabulary) -> None:
    U = embed(vocab, {"water": (0, 1), "stream": (0, 1.2), "bank": (5, 5)})
    form = form_class("symmetric")({"U": U})
    assert [n.word for n in nearest_words(form, vocab, "water", k=5)] == ["stream", "bank"]


def test_refusals_say_why(vocab: Vocabulary) -> None:
    V = embed(vocab, {"money": (1, 0), "loan": (1.1, 0)})
    form = form_class("lowrank")({"U": V, "V": V})
    with pytest.raises(WordsError, match="not in the model's vocabulary"):
        nearest_words(form, vocab, "zebra")
    with pytest.raises(WordsError, match="has no embedding"):
        nearest_words(form, vocab, "river")
    with pytest.raises(WordsError, match="give one word"):
        nearest_words(form, vocab, "money loan")
    diagonal = form_class("diagonal")({"w": np.ones(vocab.size, dtype=np.float32)})
    with pytest.raises(WordsError, match="form 'diagonal' has no word embeddings"):
        nearest_words(diagonal, vocab, "money")
