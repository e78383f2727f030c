"""Word stems: the vocabulary's terms when a Snowball stemmer is part of the text pipeline.

BM25 with Porter-style stemming is the classic scorer users compare with (Lucene's English analyzer,
Pyserini's BM25); without it "claims" and "claim" are two words. On SciFact's 809 train claims the
BM25 lexical part alone goes from NDCG@10 0.668 to 0.697 with the Snowball English stemmer
(docs/results/without-labels.md has the command). The stemmer belongs to the contract: a bundle records it
in its tokenizer name (`words-nfkc-casefold-v1+snowball-english`), and the vocabulary maps every
token through it, so the trainer, `ssi eval` and the service see the same terms. Stemming is applied
once, to the tokenizer's words: Snowball is not idempotent, so a stem is never stemmed again.
"""

from __future__ import annotations

import Stemmer

from ssi.tokenize import TOKENIZER_VERSION

_SNOWBALL = "+snowball-"
NO_STEMMER = "none"
DEFAULT_STEMMER = "english"
STEMMERS: tuple[str, ...] = (NO_STEMMER, *sorted(Stemmer.algorithms()))
# A long-running service meets unbounded new words (typos, ids): a vocabulary's memo of each word's id
# (ssi.vocab) is emptied past this size.
MEMO_WORDS = 1_000_000


def tokenizer_name(stemmer: str | None) -> str:
    """The tokenizer a bundle records: the words of ssi.tokenize, then the stemmer when there is one."""
    if stemmer in (None, NO_STEMMER):
        return TOKENIZER_VERSION
    check_stemmer(stemmer)
    return f"{TOKENIZER_VERSION}{_SNOWBALL}{stemmer}"


def stemmer_of(tokenizer: str) -> str | None:
    """The stemmer named in a recorded tokenizer (None: none); ValueError for a tokenizer this build lacks."""
    if tokenizer == TOKENIZER_VERSION:
        return None
    base, sep, stemmer = tokenizer.partition(_SNOWBALL)
    if base != TOKENIZER_VERSION or not sep or stemmer not in STEMMERS[1:]:
        raise ValueError(f"unknown tokenizer {tokenizer!r} (this build has {TOKENIZER_VERSION}, + a stemmer or not)")
    return stemmer


def check_stemmer(stemmer: str) -> str:
    """`stemmer` when this build has it, else a ValueError naming the ones it has."""
    if stemmer not in STEMMERS:
        raise ValueError(f"unknown stemmer {stemmer!r}: one of {', '.join(STEMMERS)}")
    return stemmer


class Stems:
    """One Snowball stemmer by its name (PyStemmer, which keeps a small cache of its own)."""

    def __init__(self, language: str) -> None:
        self.language = check_stemmer(language)
        self._stemmer = Stemmer.Stemmer(language)

    def __reduce__(self) -> tuple[type[Stems], tuple[str]]:
        """Pickled by its name (the C stemmer is not picklable): a vocabulary goes to Ray workers and to the
        index build's featurizing processes."""
        return (Stems, (self.language,))

    def stem(self, word: str) -> str:
        """The word's stem, or the word itself where the algorithm leaves nothing (porter stems "s" to "", which no
        vocabulary can hold)."""
        return self._stemmer.stemWord(word) or word

    def stems(self, words: list[str]) -> list[str]:
        return [stem or word for stem, word in zip(self._stemmer.stemWords(words), words, strict=True)]
