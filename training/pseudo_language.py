"""A seeded pseudo-language: a stand-in for the second language of cross-language retrieval.

The PSI paper (000, section 4.2, Table 6) ranks English Wikipedia articles for Japanese query
articles, learning the correspondence between the two vocabularies from linked pairs alone, with no
translation tool. `../shared/data` holds no bilingual corpus, so the second language here is made
up — and documented as synthetic: every source word gets a random dictionary entry drawn once from
a seed,

- most words become one invented word (`one_word`), the rest two or three synonyms chosen at random
  per occurrence (`synonyms`), as a real language has several words for one meaning;
- some words are merged with another word into one invented word (`merged`: homonyms, a real
  language's missing distinctions);
- a few words are dropped (`dropped`: words the other language has no word for).

Invented words are strings of consonant–vowel syllables never found in the source text, so the two
vocabularies share no word: the diagonal q·d of SSI is zero across languages (the paper drops it
for this task) and tf-idf between the languages ranks at random. The inverse dictionary gives the
"translate, then tf-idf" comparison (the paper's word-based translation row): each invented word
back to its source word(s), merged words to all their sources, dropped words lost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"


@dataclass(frozen=True)
class PseudoLanguageSpec:
    """Shares of the source words given each kind of dictionary entry, and the seed of every draw."""

    merged: float = 0.10  # share of words folded into another word's invented word
    dropped: float = 0.03  # share of words with no translation
    synonyms: float = 0.25  # share of the rest with 2–3 invented synonyms (one drawn per occurrence)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("merged", "dropped", "synonyms"):
            share = getattr(self, name)
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"{name} must be a share in [0, 1], got {share}")
        if self.merged + self.dropped > 1.0:
            raise ValueError(f"merged + dropped shares exceed 1 ({self.merged} + {self.dropped})")


@dataclass(frozen=True)
class PseudoLanguage:
    """The dictionary: each source word's invented word(s) (empty: dropped), and the inverse map."""

    forward: dict[str, tuple[str, ...]]
    inverse: dict[str, tuple[str, ...]]
    spec: PseudoLanguageSpec

    @classmethod
    def build(cls, token_lists: Iterable[Sequence[str]], spec: PseudoLanguageSpec) -> PseudoLanguage:
        """Draw the dictionary for every word of `token_lists` (most frequent first, so a seed is stable)."""
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        if not counts:
            raise ValueError("cannot make a pseudo-language from texts with no words")
        words = sorted(counts, key=lambda w: (-counts[w], w))
        rng = np.random.default_rng(spec.seed)
        draw = rng.random(len(words))
        inventor = _Inventor(rng, taken=set(counts))
        forward: dict[str, tuple[str, ...]] = {}
        merge_into: list[int] = []
        for i, word in enumerate(words):
            if draw[i] < spec.dropped:
                forward[word] = ()
            elif draw[i] < spec.dropped + spec.merged and i > 0:
                merge_into.append(i)  # resolved below, once the words it may join have entries
            else:
                n = int(rng.integers(2, 4)) if rng.random() < spec.synonyms else 1
                forward[word] = tuple(inventor.word() for _ in range(n))
        translated = [w for w in words if forward.get(w)]
        for i in merge_into:
            partner = translated[int(rng.integers(0, len(translated)))] if translated else None
            forward[words[i]] = (forward[partner][0],) if partner is not None else (inventor.word(),)
        inverse: dict[str, list[str]] = {}
        for word in words:
            for target in forward[word]:
                inverse.setdefault(target, []).append(word)
        return cls(forward, {t: tuple(s) for t, s in inverse.items()}, spec)

    def translate(self, tokens: Sequence[str], rng: np.random.Generator) -> list[str]:
        """The tokens in the pseudo-language: a synonym drawn per occurrence, dropped words left out."""
        out: list[str] = []
        for token in tokens:
            targets = self.forward.get(token, ())
            if len(targets) == 1:
                out.append(targets[0])
            elif targets:
                out.append(targets[int(rng.integers(0, len(targets)))])
        return out

    def back_translate(self, tokens: Sequence[str]) -> list[str]:
        """Word-by-word translation back with the inverse dictionary (every source of a merged word)."""
        return [source for token in tokens for source in self.inverse.get(token, ())]

    def summary(self) -> dict[str, int]:
        entries = Counter(
            "dropped" if not t else ("synonyms" if len(t) > 1 else "one word") for t in self.forward.values()
        )
        return {
            "source_words": len(self.forward),
            "invented_words": len(self.inverse),
            "dropped": entries["dropped"],
            "with_synonyms": entries["synonyms"],
            "one_word": entries["one word"],
            "invented_words_shared_by_several_sources": sum(len(s) > 1 for s in self.inverse.values()),
        }


class _Inventor:
    """Fresh invented words: 2–4 consonant–vowel syllables, never a source word, never reused."""

    def __init__(self, rng: np.random.Generator, taken: set[str]) -> None:
        self.rng = rng
        self.taken = set(taken)

    def word(self) -> str:
        while True:
            n = int(self.rng.integers(2, 5))
            letters = self.rng.integers(0, [len(CONSONANTS), len(VOWELS)] * n)
            word = "".join((CONSONANTS if k % 2 == 0 else VOWELS)[int(letter)] for k, letter in enumerate(letters))
            if word not in self.taken:
                self.taken.add(word)
                return word
