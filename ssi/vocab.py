"""Vocabulary with idf weights, and the tf-idf featurizer that turns texts into unit vectors.

A text becomes x with x_i = (1 + log tf_i) · idf_i over the D vocabulary words, scaled to unit
length (the representation of Bai et al., "Supervised Semantic Indexing", 2009). Word ids are
ordered by document frequency, most frequent first, so "the top-n words" is the id range [0, n).

A vocabulary with a correlated-hashing map (ssi.feature_hashing) appends the F-dimensional hashed
block of the text's rare words and 2-grams: rows are [x_D ; h], `size` = D + F.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat

import numpy as np
import scipy.sparse as sp

from ssi.feature_hashing import CorrelatedHashing
from ssi.tokenize import TOKENIZER_VERSION, tokenize

TF_SCHEME = "log1p-idf-l2"


def tfidf_rows(word_ids: np.ndarray, lengths: np.ndarray, idf: np.ndarray) -> sp.csr_matrix:
    """The TF_SCHEME rows of texts given as their word ids laid end to end: the one home of the weighting.

    `word_ids` holds each text's tokens as vocabulary ids (−1: not in the vocabulary), texts one
    after another, `lengths` how many tokens each text has. x_i = (1 + log tf_i) · idf_i, scaled to
    unit length; a text with no known word is an empty row. All texts at once: the (row, word)
    counts come from one sparse matrix that sums duplicates, the weights and norms are array
    operations (no numpy call per text, which bounded index builds before).
    """
    n_rows, n_words = lengths.shape[0], idf.shape[0]
    if n_rows == 1:
        return _one_tfidf_row(word_ids, idf)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), lengths)
    known = word_ids >= 0
    ids, rows = word_ids[known], rows[known]
    index_dtype = np.int32 if max(ids.shape[0], n_words) < np.iinfo(np.int32).max else np.int64
    counts = sp.csr_matrix(
        (np.ones(ids.shape[0], dtype=np.float64), (rows.astype(index_dtype), ids.astype(index_dtype))),
        shape=(n_rows, n_words),
    )
    counts.sum_duplicates()  # sorts each row's indices as well
    values = (1.0 + np.log(counts.data)).astype(np.float32) * idf[counts.indices]
    entry_rows = np.repeat(np.arange(n_rows), np.diff(counts.indptr))
    norms = np.sqrt(np.bincount(entry_rows, weights=values.astype(np.float64) ** 2, minlength=n_rows))
    values /= norms[entry_rows].astype(np.float32)  # every stored row has a positive norm
    # One index dtype for indices and indptr: scipy mutates mixed-dtype matrices badly in place.
    matrix = sp.csr_matrix(
        (values.astype(np.float32), counts.indices.astype(index_dtype), counts.indptr.astype(index_dtype)),
        shape=(n_rows, n_words),
    )
    matrix.has_sorted_indices = True
    return matrix


def _one_tfidf_row(word_ids: np.ndarray, idf: np.ndarray) -> sp.csr_matrix:
    """`tfidf_rows` of one text (a query) without the sparse count matrix, whose construction cost more
    than the rest of a query's featurizing; the same arithmetic in the same order, so a query gets the
    same bits alone as in a batch."""
    n_words = idf.shape[0]
    index_dtype = np.int32 if n_words < np.iinfo(np.int32).max else np.int64
    words, counts = np.unique(word_ids[word_ids >= 0], return_counts=True)
    values = (1.0 + np.log(counts.astype(np.float64))).astype(np.float32) * idf[words]
    if words.shape[0]:
        norm = np.sqrt(np.bincount(np.zeros(words.shape[0], dtype=np.int64), weights=values.astype(np.float64) ** 2))
        values /= norm.astype(np.float32)
    matrix = sp.csr_matrix(
        (values.astype(np.float32), words.astype(index_dtype), np.array([0, words.shape[0]], dtype=index_dtype)),
        shape=(1, n_words),
    )
    matrix.has_sorted_indices = True
    return matrix


@dataclass
class Vocabulary:
    """Words (id = position) with their idf; built once by the trainer, shipped in the bundle."""

    words: list[str]
    idf: np.ndarray
    tokenizer: str = TOKENIZER_VERSION
    tf_scheme: str = TF_SCHEME
    hashing: CorrelatedHashing | None = None  # correlated feature hashing: appends h = H x_rare (ssi.feature_hashing)
    _index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.idf = np.asarray(self.idf, dtype=np.float32)
        if len(self.words) != self.idf.shape[0]:
            raise ValueError(f"vocabulary has {len(self.words)} words but {self.idf.shape[0]} idf values")
        self._index = {w: i for i, w in enumerate(self.words)}
        if len(self._index) != len(self.words):
            raise ValueError("vocabulary has duplicate words")
        if self.hashing is not None and self.hashing.n_frequent > len(self.words):
            raise ValueError(
                f"the hashing map targets {self.hashing.n_frequent} frequent words, "
                f"the vocabulary has {len(self.words)}"
            )

    @property
    def size(self) -> int:
        """Width of a featurized row: the D words, plus F hashed slots with a correlated-hashing map."""
        return len(self.words) + (self.hashing.n_frequent if self.hashing is not None else 0)

    @property
    def n_words(self) -> int:
        """D, the words with their own tf-idf column."""
        return len(self.words)

    def feature_name(self, index: int) -> str:
        """What column `index` of a featurized row holds: a word, or "~w", the hashed slot of frequent word w."""
        n = len(self.words)
        return self.words[index] if index < n else f"~{self.words[index - n]}"

    def id_of(self, word: str) -> int | None:
        return self._index.get(word)

    @classmethod
    def build(cls, texts: Iterable[str], max_words: int = 30000, min_df: int = 2) -> Vocabulary:
        """Keep the `max_words` words of highest document frequency (ties broken by the word)."""
        return cls.build_from_tokens((tokenize(t) for t in texts), max_words=max_words, min_df=min_df)

    @classmethod
    def build_from_tokens(
        cls, token_lists: Iterable[Sequence[str]], max_words: int = 30000, min_df: int = 2
    ) -> Vocabulary:
        """`build` on texts already tokenized, so a trainer tokenizes a large corpus once."""
        df: Counter[str] = Counter()
        n_docs = 0
        for tokens in token_lists:
            df.update(set(tokens))
            n_docs += 1
        if n_docs == 0:
            raise ValueError("cannot build a vocabulary from no texts")
        kept = [(w, c) for w, c in df.items() if c >= min_df] or list(df.items())
        kept.sort(key=lambda wc: (-wc[1], wc[0]))
        kept = kept[:max_words]
        words = [w for w, _ in kept]
        idf = np.array([math.log((1 + n_docs) / (1 + c)) + 1.0 for _, c in kept], dtype=np.float32)
        return cls(words=words, idf=idf)

    @classmethod
    def interleaved(cls, first: Vocabulary, second: Vocabulary) -> Vocabulary:
        """Two languages' vocabularies as one: ranks taken in turn, a word both hold kept once (`first`'s idf).

        Cross-language retrieval (PSI paper, 000 section 4.2) has a query vocabulary and a document
        vocabulary; one index space over both lets every kind train unchanged, and taking the ranks in
        turn keeps "the top-n words" (the frequent-word restriction) about n/2 of each language's most
        frequent. Each idf is its own collection's.
        """
        if first.hashing is not None or second.hashing is not None:
            raise ValueError("two-language vocabularies do not take a correlated-hashing map")
        words: list[str] = []
        idf: list[float] = []
        seen: set[str] = set()
        for rank in range(max(len(first.words), len(second.words))):
            for vocab in (first, second):
                if rank < len(vocab.words) and vocab.words[rank] not in seen:
                    seen.add(vocab.words[rank])
                    words.append(vocab.words[rank])
                    idf.append(float(vocab.idf[rank]))
        return cls(words=words, idf=np.asarray(idf, dtype=np.float32))

    def featurize(self, texts: Sequence[str]) -> sp.csr_matrix:
        """Unit-length tf-idf rows (float32 CSR, sorted indices); a text with no known word is all zero."""
        return self.featurize_tokens([tokenize(t) for t in texts])

    def featurize_tokens(self, token_lists: Sequence[Sequence[str]]) -> sp.csr_matrix:
        """`featurize` on texts already tokenized."""
        words = self._word_rows(token_lists)
        if self.hashing is None:
            return words
        matrix = sp.hstack([words, self.hashing.hashed(token_lists)], format="csr", dtype=np.float32)
        matrix.sort_indices()
        return matrix

    def _word_rows(self, token_lists: Sequence[Sequence[str]]) -> sp.csr_matrix:
        """Unit tf-idf rows over the D words: every token looked up in one pass (dict.get mapped in C)."""
        lengths = np.fromiter((len(tokens) for tokens in token_lists), dtype=np.int64, count=len(token_lists))
        tokens = list(chain.from_iterable(token_lists))
        ids = np.fromiter(map(self._index.get, tokens, repeat(-1, len(tokens))), dtype=np.int64, count=len(tokens))
        return tfidf_rows(ids, lengths, self.idf)
