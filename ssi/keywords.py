"""Keyword queries cut from a text: the one sampler the evaluation harness, `ssi bench` and the tests share.

The evaluation protocol (DESIGN.md) asks keyword queries of n random words of the query document
with a fixed seed; using one function everywhere means the README's keyword table, the serving
benchmark and the tests ask the same kind of question.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from ssi.tokenize import tokenize


def keyword_query(text: str, n_words: int, seed: int, key: str, tokens: Sequence[str] | None = None) -> str:
    """n distinct words of `text`, drawn uniformly without replacement and kept in text order.

    The generator is seeded by (seed, crc32(key)), so a query's words depend only on the seed and
    the query id, not on which other queries are asked or in which order they come.
    Distinct words, not token positions: a user typing keywords does not repeat "the".
    `tokens`, when given, is `tokenize(text)` already computed.
    """
    words = list(dict.fromkeys(tokenize(text) if tokens is None else tokens))
    if len(words) <= n_words:
        return " ".join(words)
    picked = np.sort(_rng(seed, key).choice(len(words), size=n_words, replace=False))
    return " ".join(words[i] for i in picked)


def typed_words_query(text: str, n_words: int, seed: int, key: str, tokens: Sequence[str] | None = None) -> str:
    """n words at random positions of `text` (without replacement, in text order): a word comes as often as
    the text uses it, so stop words ("the", "of") come often and may repeat. The workload a service meets
    from users pasting or typing words of real text, where stop words have the longest posting lists; the
    distinct-word sampler above under-draws them. Seeded like `keyword_query`."""
    words = list(tokenize(text) if tokens is None else tokens)
    if len(words) <= n_words:
        return " ".join(words)
    picked = np.sort(_rng(seed, key).choice(len(words), size=n_words, replace=False))
    return " ".join(words[i] for i in picked)


def _rng(seed: int, key: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(key.encode("utf-8"))])
