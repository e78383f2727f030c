"""The tokenizer both halves use, so a query is cut into words exactly as in training.

Words are maximal runs of letters and digits after Unicode NFKC normalisation and case folding;
punctuation and underscores separate words. Changing this changes every model: bump
`TOKENIZER_VERSION`, which bundles record and the service checks.
"""

from __future__ import annotations

import re
import unicodedata

TOKENIZER_VERSION = "words-nfkc-casefold-v1"

MAX_WORD_CHARS = 40
# Whole runs of at most MAX_WORD_CHARS word characters: a longer run matches nowhere (no boundary inside it).
_WORD = re.compile(rf"\b\w{{1,{MAX_WORD_CHARS}}}\b")


def normalized(text: str) -> str:
    """The text the words are found in: NFKC, case folded, underscores turned into spaces.

    Underscores are word characters to `\\w`; turning them into spaces first is twice as fast as a
    pattern that excludes them. (service.bulk_featurize finds the same words in it with arrays, for
    this TOKENIZER_VERSION only: a new version turns that path off until it is brought along.)
    """
    return unicodedata.normalize("NFKC", text).casefold().replace("_", " ")


def tokenize(text: str) -> list[str]:
    """Split `text` into lower-cased words; over-long runs (hashes, base64) are dropped."""
    return _WORD.findall(normalized(text))


def bigrams(tokens: list[str]) -> list[str]:
    """Adjacent word pairs joined by a space ("new york"): the 2-gram features of correlated hashing."""
    return [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]
