"""Nearest words: the words closest to a word in a trained model's embedding space.

A document's embedding is V d = Σ_i V·i d_i, so column V·i embeds word i, and words the model learned
to treat alike lie close together (PSI paper, Table 5: the five words at the smallest Euclidean
distance). The form names its word table (`Form.word_array`); words whose column is zero — beyond the
frequent-word restriction, or never reached in training — have no embedding and are never listed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ssi.forms import Form
from ssi.tokenize import tokenize
from ssi.vocab import Vocabulary


class WordsError(ValueError):
    """The word or the model cannot give neighbours; the message says why."""


class NotOneWord(WordsError):
    """The text is not exactly one word after tokenizing."""


class UnknownWord(WordsError):
    """The word is not in the vocabulary, or has no embedding."""


class NoWordEmbeddings(WordsError):
    """The model form has no word table (diagonal, full W)."""


@dataclass(frozen=True, slots=True)
class Neighbour:
    word: str
    distance: float


def nearest_words(form: Form, vocab: Vocabulary, word: str, k: int = 5) -> list[Neighbour]:
    """The `k` words whose embeddings are closest (Euclidean) to that of `word`, nearest first."""
    if form.word_array is None:
        raise NoWordEmbeddings(f"form '{form.name}' has no word embeddings")
    tokens = tokenize(word)
    if len(tokens) != 1:
        raise NotOneWord(f"give one word, got {word!r} ({len(tokens)} tokens after tokenizing)")
    word_id = vocab.id_of(tokens[0])
    if word_id is None:
        raise UnknownWord(f"'{tokens[0]}' is not in the model's vocabulary")
    table = np.asarray(form.values[form.word_array], dtype=np.float32).T  # D × N: a row per word
    embedded = np.flatnonzero(np.any(table != 0, axis=1))
    if not np.any(table[word_id] != 0):
        raise UnknownWord(f"'{tokens[0]}' has no embedding in this model (a rare word: it counts only as itself)")
    distances = np.linalg.norm(table[embedded] - table[word_id], axis=1)
    order = [i for i in np.argsort(distances, kind="stable").tolist() if embedded[i] != word_id][:k]
    return [Neighbour(vocab.words[int(embedded[i])], float(distances[i])) for i in order]
