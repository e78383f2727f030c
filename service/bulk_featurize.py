"""Tf-idf rows of many texts at once, without a Python string per word: what an index build featurizes with.

`Vocabulary.featurize` tokenizes each text (`ssi.tokenize.tokenize`: NFKC, case folding, then a regex
that returns every word as a new string) and looks every word up in a dict. Making ~6 million small
strings is most of a 100k-passage build, so `BulkFeaturizer` keeps the per-text normalisation
(`ssi.tokenize.normalized`) but finds the words and their vocabulary ids with array operations:

- the normalised texts are laid end to end, separated by a space, as one array of code points;
  a word is a maximal run of characters that `re`'s `\\w` matches (underscores were already turned
  into spaces), kept when at most MAX_WORD_CHARS long: exactly what the tokenizer's
  `\\b\\w{1,40}\\b` finds;
- a word of at most CODE_CHARS characters from [a-z0-9] gets an exact integer code (base 37,
  digits 1..36, so no two such words share one, and 37^12 < 2^64), all words' codes from one
  prefix sum over the characters (modulo 2^64); codes are looked up in an open-addressing table
  of the vocabulary's codable words;
- the rare other words (longer, or with a non-ASCII letter) are sliced out and looked up in the
  vocabulary's dict, as before.

The ids and per-text counts go through `ssi.vocab.tfidf_rows`, the one home of the weighting, so
the rows are the bytes `Vocabulary.featurize` gives (tests/service/test_index_build.py checks this
on varied Unicode text and every code point). A vocabulary with a correlated-hashing map needs the
tokens themselves and is featurized by `Vocabulary.featurize`.

A web page to /match is featurized here too, and with the open vocabulary on its new words (those with id −1,
a few in a hundred) are sliced out of the same normalised text as strings (`BulkFeaturizer.words`), so the page
is not tokenized and looked up a second time for them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import scipy.sparse as sp

from ssi.tokenize import MAX_WORD_CHARS, TOKENIZER_VERSION, normalized, tokenize
from ssi.vocab import Vocabulary

ARRAY_TOKENIZER = "words-nfkc-casefold-v1"  # the tokenizer `spans` reproduces; another one falls back
CODE_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
CODE_BASE = len(CODE_ALPHABET) + 1  # digit 0 is never used: codes of different lengths differ
CODE_CHARS = 12  # 37^12 < 2^64: a code computed modulo 2^64 is the exact code
CHUNK_CHARS = 1 << 18  # characters per array pass: its arrays stay in cache, and a batch of long documents is cut
_HASH_MULT = 0x9E3779B97F4A7C15  # Fibonacci hashing of a code to its table slot

# The code digit of each byte (0: not a code character, so no character between words has one).
_ASCII_DIGIT = np.zeros(256, dtype=np.uint8)
_ASCII_DIGIT[np.frombuffer(CODE_ALPHABET.encode(), dtype=np.uint8)] = np.arange(1, CODE_BASE, dtype=np.uint8)


def _word_characters(first: int, stop: int) -> np.ndarray:
    """Whether each code point in [first, stop) is a `\\w` character, asked of `re` itself (its class, its
    Unicode database); the runs of word characters among all code points are a few hundred."""
    chars = np.arange(first, stop, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    table = np.zeros(stop - first, dtype=bool)
    for match in re.finditer(r"\w+", chars):
        table[match.start() : match.end()] = True
    return table


_ASCII_WORD = np.concatenate((_word_characters(0, 128), np.zeros(128, dtype=bool)))


@functools.cache
def _unicode_word() -> np.ndarray:
    """`_word_characters` of every code point: once, on the first text with a character outside ASCII (~20 ms)."""
    return _word_characters(0, 0x110000)


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """CODE_BASE^i and CODE_BASE^-i modulo 2^64 for i < n (at least): kept for a chunk, made for a longer text."""
    size = 2 * CHUNK_CHARS  # a chunk: texts starting within CHUNK_CHARS, the last one usually short
    return _kept_powers(size) if n <= size else _powers_of(n)


@functools.lru_cache(maxsize=1)
def _kept_powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    return _powers_of(n)


def _powers_of(n: int) -> tuple[np.ndarray, np.ndarray]:
    """CODE_BASE^i and CODE_BASE^-i modulo 2^64 for i < n (the base is odd, so it has an inverse)."""
    inverse = pow(CODE_BASE, -1, 1 << 64)
    up = np.full(n, CODE_BASE, dtype=np.uint64)
    down = np.full(n, inverse, dtype=np.uint64)
    up[0] = down[0] = 1
    return np.cumprod(up, dtype=np.uint64), np.cumprod(down, dtype=np.uint64)


def vocabulary_codes(words: Sequence[str]) -> np.ndarray:
    """Each word's code (uint64; 0 for a word that has none: too long, or a character outside CODE_ALPHABET)."""
    if not words:
        return np.zeros(0, dtype=np.uint64)
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    starts = np.empty(len(words), dtype=np.int64)
    starts[0] = 1
    np.cumsum(lengths[:-1] + 1, out=starts[1:])
    starts[1:] += 1
    ends = starts + lengths
    joined = " " + " ".join(words) + " "
    chars = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    inside = np.ones(chars.shape[0], dtype=bool)  # every character of a word counts, whatever it is
    inside[starts - 1] = False
    inside[-1] = False
    codes = _codes(inside, _ASCII_DIGIT[np.minimum(chars, 255)], starts, ends)
    codes[lengths == 0] = 0
    return codes


@dataclass(frozen=True)
class Spans:
    """The words of some texts: positions in `text` (the normalised texts joined by spaces) and counts per text."""

    text: str
    starts: np.ndarray  # int64, first character of each word
    ends: np.ndarray  # int64, one past its last character
    counts: np.ndarray  # int64, words per text
    codes: np.ndarray  # uint64, each word's code, 0 for a word without one

    def words(self) -> list[list[str]]:
        """The words as strings, text by text (what `tokenize` returns; for tests and checks, not the fast path)."""
        flat = [self.text[a:b] for a, b in zip(self.starts.tolist(), self.ends.tolist(), strict=True)]
        bounds = np.concatenate(([0], np.cumsum(self.counts))).tolist()
        return [flat[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def spans(texts: Sequence[str]) -> Spans:
    """Where `ssi.tokenize.tokenize` finds its words in each of `texts` (its `normalized` texts), with arrays."""
    normal = [normalized(t) for t in texts]
    return _spans(normal, np.fromiter(map(len, normal), dtype=np.int64, count=len(normal)))


def _spans(normal: Sequence[str], lengths: np.ndarray) -> Spans:
    """`spans` of texts already normalised, of these lengths."""
    # Text k starts at offsets[k]: one space before each text and one after the last.
    offsets = np.empty(len(normal) + 1, dtype=np.int64)
    offsets[0] = 1
    np.cumsum(lengths + 1, out=offsets[1:])
    offsets[1:] += 1
    joined = " " + " ".join(normal) + " "
    if joined.isascii():
        chars = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        is_word = _ASCII_WORD[chars]
        digits = _ASCII_DIGIT[chars]
    else:
        chars = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        is_word = _unicode_word()[chars]
        digits = _ASCII_DIGIT[np.minimum(chars, 255)]  # every code character is ASCII
    # The separators are spaces, so the first and last characters are not word characters.
    edges = np.flatnonzero(is_word[1:] != is_word[:-1]) + 1
    starts, ends = edges[0::2], edges[1::2]
    codes = _codes(is_word, digits, starts, ends)
    length = ends - starts
    if (length > MAX_WORD_CHARS).any():  # a longer run is no word: `\b\w{1,40}\b` matches nowhere in it
        keep = length <= MAX_WORD_CHARS
        starts, ends, codes = starts[keep], ends[keep], codes[keep]
    counts = np.diff(np.searchsorted(starts, offsets))
    return Spans(text=joined, starts=starts, ends=ends, counts=counts, codes=codes)


def _codes(is_word: np.ndarray, digits: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each word's code (0 for none): 37^(end-1) * (P[end-1] - P[start-1]), P the prefix sums of digit_j * 37^-j.

    `starts`/`ends` must be every run of `is_word` (a word's start is after position 0), so that a
    character of `is_word` lies in exactly one of them.
    """
    n = digits.shape[0]
    up, down = _powers(n)
    prefix = np.multiply(digits, down[:n], dtype=np.uint64)
    np.cumsum(prefix, out=prefix)  # wraps modulo 2^64, as the products do
    last = ends - 1
    codes = up[last] * (prefix[last] - prefix[starts - 1])
    # A word has a code when it is short enough and every character of it is a code character.
    codes[ends - starts > CODE_CHARS] = 0
    uncodable = np.flatnonzero(is_word & (digits == 0))  # none in normalised ASCII: case folding leaves no capitals
    if uncodable.size:
        codes[np.searchsorted(starts, uncodable, side="right") - 1] = 0
    return codes


@dataclass(frozen=True)
class TextWords:
    """The words of some texts: each word's vocabulary id (−1: not in it) laid end to end, the words per text, and
    (where asked for) the words with id −1 in order, as `ssi.tokenize.tokenize` gives them: what a text's row and its
    new words for the open vocabulary (ssi.open_vocab.QueryWords) are both made from."""

    ids: np.ndarray  # int64
    counts: np.ndarray  # int64, words per text
    unknown: list[str] | None = None

    def per_text(self) -> list[tuple[np.ndarray, list[str]]]:
        """Each text's ids and its words with id −1 (`unknown`, which must have been asked for)."""
        if self.unknown is None:
            raise ValueError("these words were found without the unknown ones")
        if self.counts.shape[0] == 1:  # one page (/match): nothing to split
            return [(self.ids, self.unknown)]
        ids = np.split(self.ids, np.cumsum(self.counts)[:-1]) if self.counts.shape[0] else []
        bounds = np.cumsum([0, *((x < 0).sum() for x in ids)]).tolist()
        return [(x, self.unknown[a:b]) for x, a, b in zip(ids, bounds[:-1], bounds[1:], strict=True)]


def words_of_tokens(vocab: Vocabulary, token_lists: Sequence[Sequence[str]]) -> TextWords:
    """`TextWords` (unknown words included) of texts already tokenized, looked up word by word (`vocab.ids_of`):
    for texts too short for the arrays to pay, or a tokenizer they do not reproduce."""
    tokens = list(chain.from_iterable(token_lists))
    ids = vocab.ids_of(tokens)
    counts = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
    # a few in a hundred (nonzero itself: np.flatnonzero's Python layers added ~4 µs to a /match's page, cold)
    return TextWords(ids, counts, [tokens[i] for i in (ids < 0).nonzero()[0].tolist()])


@dataclass
class BulkFeaturizer:
    """`vocab.featurize_documents(texts)`, byte for byte, for large batches (an index build)."""

    vocab: Vocabulary
    _slot_codes: np.ndarray = field(init=False, repr=False)
    _slot_ids: np.ndarray = field(init=False, repr=False)
    _shift: np.uint64 = field(init=False, repr=False)
    _uncoded: dict[str, int] = field(init=False, repr=False)  # the words without a code (what such a word can be)

    def __post_init__(self) -> None:
        # A stemming vocabulary's words are stems, which a text's words are not: its tokens are looked up by
        # their stems (`_stemmed_ids`), so its table stays empty (198k stems would fill 16.8 MB for nothing).
        codes = vocabulary_codes(self.vocab.words if self.vocab.stemmer is None else [])
        coded = np.flatnonzero(codes)
        self._uncoded = {self.vocab.words[i]: i for i in np.flatnonzero(codes == 0).tolist()}
        bits = max(10, (4 * coded.size).bit_length())  # a table at most a quarter full: short probe runs
        self._shift = np.uint64(64 - bits)
        self._slot_codes = np.zeros(1 << bits, dtype=np.uint64)  # code 0 marks an empty slot: no word has it
        self._slot_ids = np.full(1 << bits, -1, dtype=np.int64)
        # Linear probing, all words at once: in each round, of the words aiming at one empty slot
        # the first takes it and the others (and those aiming at a full slot) move one slot on. So
        # every slot between a word's home and its place is full, which is what a lookup needs.
        keys, slot = codes[coded], self._home(codes[coded])
        pending = np.arange(coded.size)
        while pending.size:
            target = slot[pending]
            free = self._slot_codes[target] == 0
            _, first = np.unique(target, return_index=True)
            placed = np.zeros(pending.size, dtype=bool)
            placed[first] = True
            placed &= free
            self._slot_codes[target[placed]] = keys[pending[placed]]
            self._slot_ids[target[placed]] = coded[pending[placed]]
            pending = pending[~placed]
            slot[pending] = (slot[pending] + 1) & np.int64(self._slot_codes.shape[0] - 1)

    def _home(self, codes: np.ndarray) -> np.ndarray:
        """The slot where a code's probe run starts (Fibonacci hashing; uint64 products wrap modulo 2^64)."""
        return ((codes * np.uint64(_HASH_MULT)) >> self._shift).astype(np.int64)

    @property
    def uses_arrays(self) -> bool:
        """Whether the array path applies (else `featurize` is `vocab.featurize_documents`). A vocabulary's
        tokenizer is TOKENIZER_VERSION, with a stemmer or not (ssi.stemming checks it on load)."""
        return self.vocab.hashing is None and TOKENIZER_VERSION == ARRAY_TOKENIZER

    def featurize(self, texts: Sequence[str], documents: bool = True) -> sp.csr_matrix:
        """Document rows of `texts` (float32 CSR, sorted indices), identical to `vocab.featurize_documents(texts)`;
        with `documents` False query rows, identical to `vocab.featurize_queries(texts)` (a web page to /match)."""
        if not self.uses_arrays:
            return self.vocab.featurize_documents(texts) if documents else self.vocab.featurize_queries(texts)
        found = self.words(texts)
        return self.vocab.rows_from_ids(found.ids, found.counts, documents=documents)

    def words(self, texts: Sequence[str], unknown: bool = False) -> TextWords:
        """Every word of `texts` as its vocabulary id, found with arrays; with `unknown`, also the words the
        vocabulary lacks as strings (a page's new words for the open vocabulary: a few of its words, sliced out of
        the text the ids were found in rather than tokenized again)."""
        if not self.uses_arrays:
            return words_of_tokens(self.vocab, [tokenize(t) for t in texts])
        normal = [normalized(t) for t in texts]
        lengths = np.fromiter(map(len, normal), dtype=np.int64, count=len(normal))
        ids: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        counts: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
        missing: list[str] | None = [] if unknown else None
        for a, b in _chunks(lengths):
            found = _spans(normal[a:b], lengths[a:b])
            ids.append(self._ids(found) if self.vocab.stemmer is None else self._stemmed_ids(found))
            counts.append(found.counts)
            if missing is not None:
                at = np.flatnonzero(ids[-1] < 0)
                pairs = zip(found.starts[at].tolist(), found.ends[at].tolist(), strict=True)
                missing.extend(found.text[start:end] for start, end in pairs)
        return TextWords(np.concatenate(ids), np.concatenate(counts), missing)

    def _ids(self, found: Spans) -> np.ndarray:
        """Each word's vocabulary id (−1: not in it): coded words from the table, the others from the dict."""
        codes = found.codes
        mask = self._slot_codes.shape[0] - 1
        slot = self._home(codes)
        seen = self._slot_codes[slot]
        ids = self._slot_ids[slot]
        # Linear probing: go on while the slot holds another code; an empty slot (code 0) means absent.
        pending = np.flatnonzero((seen != codes) & (seen != 0))
        while pending.size:
            slot[pending] = (slot[pending] + 1) & mask
            seen = self._slot_codes[slot[pending]]
            ids[pending] = self._slot_ids[slot[pending]]
            pending = pending[(seen != codes[pending]) & (seen != 0)]
        # Words without a code (0) ended at an empty slot above; look them up by their text.
        other = np.flatnonzero(codes == 0)
        if other.size:
            get, text = self._uncoded.get, found.text
            ids[other] = [
                get(text[a:b], -1)
                for a, b in zip(found.starts[other].tolist(), found.ends[other].tolist(), strict=True)
            ]
        return ids

    def _stemmed_ids(self, found: Spans) -> np.ndarray:
        """Ids under a stemming vocabulary: each distinct coded word (a code is exact: one word, one code) is read
        out and looked up by its stem once per chunk; words without a code are looked up one by one."""
        codes, text = found.codes, found.text
        ids = np.empty(codes.shape[0], dtype=np.int64)
        coded = np.flatnonzero(codes)
        _, first, inverse = np.unique(codes[coded], return_index=True, return_inverse=True)
        at = coded[first]
        words = [text[a:b] for a, b in zip(found.starts[at].tolist(), found.ends[at].tolist(), strict=True)]
        ids[coded] = self.vocab.ids_of(words)[inverse]
        other = np.flatnonzero(codes == 0)
        if other.size:
            pairs = zip(found.starts[other].tolist(), found.ends[other].tolist(), strict=True)
            ids[other] = self.vocab.ids_of([text[a:b] for a, b in pairs])
        return ids


def _chunks(lengths: np.ndarray) -> list[tuple[int, int]]:
    """[a, b) ranges of consecutive texts, each starting in its own CHUNK_CHARS of the texts laid end to end."""
    if lengths.shape[0] == 0:
        return []
    begins = np.concatenate(([0], np.cumsum(lengths[:-1] + 1))) // CHUNK_CHARS
    bounds = [0, *(np.flatnonzero(np.diff(begins)) + 1).tolist(), lengths.shape[0]]
    return list(zip(bounds, bounds[1:], strict=False))
