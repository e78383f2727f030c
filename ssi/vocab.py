"""Vocabulary with idf weights, and the featurizer that turns texts into weighted rows.

By default a text becomes x with x_i = (1 + log tf_i) · idf_i over the D vocabulary words, scaled to
unit length (the representation of Bai et al., "Supervised Semantic Indexing", 2009), the same for a
query and a document. A BM25 vocabulary (ssi.weighting) weighs the two sides differently so that q·d
ranks as BM25 does: `featurize_queries` and `featurize_documents` say which side a text is on.
Word ids are ordered by document frequency, most frequent first, so "the top-n words" is the id
range [0, n). With a stemmer (ssi.stemming, named in `tokenizer`) the vocabulary's words are stems and
every token is looked up by its stem: this is the one place stemming happens.

A vocabulary with a correlated-hashing map (ssi.feature_hashing) appends the F-dimensional hashed
block of the text's rare words and 2-grams: rows are [x_D ; h], `size` = D + F.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ssi.feature_hashing import CorrelatedHashing
from ssi.products import DocMatrix
from ssi.stemming import MEMO_WORDS, Stems, stemmer_of, tokenizer_name
from ssi.tokenize import TOKENIZER_VERSION, tokenize
from ssi.weighting import BM25_SCHEME, TFIDF_SCHEME, Bm25, Lexical, average_length, bm25_idf

TF_SCHEME = TFIDF_SCHEME  # the tf-idf weighting (ssi.weighting); a BM25 vocabulary records BM25_SCHEME


def _index_dtype(n_entries: int, n_words: int) -> type[np.signedinteger]:
    return np.int32 if max(n_entries, n_words) < np.iinfo(np.int32).max else np.int64


class TermCounts(NamedTuple):
    """Each text's word counts in CSR parts (sorted indices, float64 counts): what a weighting reweighs."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.data.shape[0])


def term_counts(word_ids: np.ndarray, lengths: np.ndarray, n_words: int) -> TermCounts:
    """Each text's word counts (sorted indices), from its word ids laid end to end.

    `word_ids` holds each text's tokens as vocabulary ids (−1: not in the vocabulary), texts one
    after another, `lengths` how many tokens each text has. All texts at once: one sparse matrix
    that sums duplicates (no numpy call per text, which bounded index builds before); one text (a
    query) by np.unique, whose cost is below the sparse matrix's construction.
    """
    n_rows = lengths.shape[0]
    if n_rows == 1:
        words, counts = np.unique(word_ids[word_ids >= 0], return_counts=True)
        indptr = np.array([0, words.shape[0]], dtype=np.int64)
        return TermCounts(indptr, words, counts.astype(np.float64), (1, n_words))
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), lengths)
    known = word_ids >= 0
    ids, rows = word_ids[known], rows[known]
    index_dtype = _index_dtype(ids.shape[0], n_words)
    counts = sp.csr_matrix(
        (np.ones(ids.shape[0], dtype=np.float64), (rows.astype(index_dtype), ids.astype(index_dtype))),
        shape=(n_rows, n_words),
    )
    counts.sum_duplicates()  # sorts each row's indices as well
    return TermCounts(counts.indptr, counts.indices, counts.data, (n_rows, n_words))


def _rows_like(counts: TermCounts | sp.csr_matrix, values: np.ndarray) -> sp.csr_matrix:
    """float32 CSR with `counts`' pattern and `values`, one index dtype for indices and indptr
    (scipy mutates mixed-dtype matrices badly in place)."""
    index_dtype = _index_dtype(counts.nnz, counts.shape[1])
    matrix = sp.csr_matrix(
        (values.astype(np.float32), counts.indices.astype(index_dtype), counts.indptr.astype(index_dtype)),
        shape=counts.shape,
    )
    matrix.has_sorted_indices = True
    return matrix


def _unit_rows(counts: TermCounts | sp.csr_matrix, values: np.ndarray) -> sp.csr_matrix:
    """`values` (float32, one per entry of `counts`) scaled to unit length per row; empty rows stay empty."""
    entry_rows = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    norms = np.sqrt(np.bincount(entry_rows, weights=values.astype(np.float64) ** 2, minlength=counts.shape[0]))
    values /= norms[entry_rows].astype(np.float32)  # every stored row has a positive norm
    return _rows_like(counts, values)


def tfidf_rows(counts: TermCounts, idf: np.ndarray) -> sp.csr_matrix:
    """The TF_SCHEME rows of texts given as their word counts (`term_counts`): x_i = (1 + log tf_i) · idf_i,
    scaled to unit length; a text with no known word is an empty row."""
    values = (1.0 + np.log(counts.data)).astype(np.float32) * idf[counts.indices]
    return _unit_rows(counts, values)


def bm25_rows(
    counts: TermCounts, lengths: np.ndarray, idf: np.ndarray, bm25: Bm25, *, documents: bool
) -> sp.csr_matrix:
    """The BM25_SCHEME rows (ssi.weighting) of texts given as their word counts (`term_counts`): saturated term
    frequencies for `documents`, else unit idf·qtf.

    A document's length is all its tokens (`lengths`, words outside the vocabulary included).
    """
    if documents:
        per_entry = np.repeat(lengths, np.diff(counts.indptr))
        return _rows_like(counts, bm25.document_values(counts.data, per_entry))
    return _unit_rows(counts, counts.data.astype(np.float32) * idf[counts.indices])


@dataclass
class Vocabulary:
    """Words (id = position) with their idf; built once by the trainer, shipped in the bundle."""

    words: list[str]
    idf: np.ndarray
    tokenizer: str = TOKENIZER_VERSION
    tf_scheme: str = TF_SCHEME
    hashing: CorrelatedHashing | None = None  # correlated feature hashing: appends h = H x_rare (ssi.feature_hashing)
    bm25: Bm25 | None = None  # the BM25 weighting's parameters (tf_scheme BM25_SCHEME); None: tf-idf
    _index: dict[str, int] = field(init=False, repr=False)
    _stems: Stems | None = field(init=False, repr=False)
    _token_ids: dict[str, int] = field(init=False, repr=False)  # with a stemmer: each word met, its stem's id or -1
    _spellings: dict[str, str] = field(init=False, repr=False)  # with a stemmer: each word `spelled`, its stem

    def __post_init__(self) -> None:
        self.idf = np.asarray(self.idf, dtype=np.float32)
        stemmer = stemmer_of(self.tokenizer)
        self._stems = Stems(stemmer) if stemmer is not None else None
        self._token_ids = {}
        self._spellings = {}
        if self._stems is not None and self.hashing is not None:
            raise ValueError("correlated feature hashing works on the words themselves: it does not take a stemmer")
        if self.tf_scheme not in (TFIDF_SCHEME, BM25_SCHEME):
            raise ValueError(f"unknown tf scheme {self.tf_scheme!r} (this build has {TFIDF_SCHEME}, {BM25_SCHEME})")
        if (self.tf_scheme == BM25_SCHEME) != (self.bm25 is not None):
            raise ValueError(f"tf scheme {self.tf_scheme} and BM25 parameters {self.bm25} do not go together")
        if self.bm25 is not None and self.hashing is not None:
            raise ValueError("correlated feature hashing is built on tf-idf rows: it does not take the BM25 weighting")
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
    def lexical(self) -> Lexical:
        """The weighting's name: "bm25" or "tfidf"."""
        return "bm25" if self.bm25 is not None else "tfidf"

    @property
    def symmetric(self) -> bool:
        """Whether a query and a document with the same words get the same row (tf-idf: yes; BM25: no)."""
        return self.bm25 is None

    @property
    def stemmer(self) -> str | None:
        """The Snowball stemmer the words went through (None: the tokenizer's words as they are)."""
        return None if self._stems is None else self._stems.language

    @property
    def n_words(self) -> int:
        """D, the words with their own tf-idf column."""
        return len(self.words)

    def feature_name(self, index: int) -> str:
        """What column `index` of a featurized row holds: a word, or "~w", the hashed slot of frequent word w."""
        n = len(self.words)
        return self.words[index] if index < n else f"~{self.words[index - n]}"

    def id_of(self, word: str) -> int | None:
        """The id of a word as the tokenizer gives it (stemmed here when the vocabulary stems)."""
        return self._index.get(word if self._stems is None else self._stems.stem(word))

    def spelled(self, tokens: list[str]) -> list[str]:
        """Tokens as this vocabulary spells its words (stemmed where it stems): how a word it lacks is named in
        the open vocabulary (ssi.open_vocab). A stemming vocabulary remembers each token's stem (`_spellings`, as
        `ids_of` its id): a page's new words are spelled at every /match, and a dict lookup costs less there than
        a call into the stemmer (35 µs against ~8 for a 2 kB page's ~9, right after another page's ranking)."""
        if self._stems is None:
            return list(tokens)
        memo = self._spellings
        missing = [token for token in tokens if token not in memo]
        if missing:
            if len(memo) + len(missing) > MEMO_WORDS:
                memo.clear()
            memo.update(zip(missing, self._stems.stems(missing), strict=True))
        get, stem = memo.get, self._stems.stem
        return [get(token) or stem(token) for token in tokens]  # stem: emptied by another thread meanwhile

    def ids_of(self, tokens: list[str]) -> np.ndarray:
        """int64 ids of tokens as the tokenizer gives them (−1: not in the vocabulary), in one pass (dict.get
        mapped in C). A stemming vocabulary stems each word once and remembers its id (`_token_ids`)."""
        if self._stems is None:
            get = self._index.get
            return np.fromiter(map(get, tokens, repeat(-1, len(tokens))), dtype=np.int64, count=len(tokens))
        memo = self._token_ids
        missing = set(tokens).difference(memo)
        if len(memo) + len(missing) > MEMO_WORDS:
            memo.clear()
            missing = set(tokens)
        if missing:
            words = list(missing)
            stems = self._stems.stems(words)
            memo.update(zip(words, map(self._index.get, stems, repeat(-1, len(stems))), strict=True))
        return np.fromiter(map(memo.__getitem__, tokens), dtype=np.int64, count=len(tokens))

    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        max_words: int = 30000,
        min_df: int = 2,
        bm25: Bm25 | None = None,
        stemmer: str | None = None,
    ) -> Vocabulary:
        """Keep the `max_words` words of highest document frequency (ties broken by the word).

        `bm25`: weigh the BM25 way with its k1 and b (its avg_len is replaced by the texts' mean length).
        `stemmer`: a Snowball stemmer's name (ssi.stemming): the words kept are stems.
        """
        return cls.build_from_tokens(
            (tokenize(t) for t in texts), max_words=max_words, min_df=min_df, bm25=bm25, stemmer=stemmer
        )

    @classmethod
    def build_from_tokens(
        cls,
        token_lists: Iterable[Sequence[str]],
        max_words: int = 30000,
        min_df: int = 2,
        bm25: Bm25 | None = None,
        stemmer: str | None = None,
    ) -> Vocabulary:
        """`build` on texts already tokenized, so a trainer tokenizes a large corpus once."""
        tokenizer = tokenizer_name(stemmer)
        language = stemmer_of(tokenizer)
        stems = Stems(language) if language is not None else None
        df: Counter[str] = Counter()
        n_docs = 0
        n_tokens = 0
        for tokens in token_lists:
            df.update(set(tokens) if stems is None else set(stems.stems(list(tokens))))
            n_docs += 1
            n_tokens += len(tokens)
        if n_docs == 0:
            raise ValueError("cannot build a vocabulary from no texts")
        kept = [(w, c) for w, c in df.items() if c >= min_df] or list(df.items())
        kept.sort(key=lambda wc: (-wc[1], wc[0]))
        kept = kept[:max_words]
        words = [w for w, _ in kept]
        if bm25 is None:
            idf = np.array([math.log((1 + n_docs) / (1 + c)) + 1.0 for _, c in kept], dtype=np.float32)
            return cls(words=words, idf=idf, tokenizer=tokenizer)
        fitted = Bm25(k1=bm25.k1, b=bm25.b, avg_len=average_length(n_tokens, n_docs))
        idf = bm25_idf(np.array([c for _, c in kept], dtype=np.float64), n_docs)
        return cls(words=words, idf=idf, tokenizer=tokenizer, tf_scheme=BM25_SCHEME, bm25=fitted)

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
        if first.bm25 is not None or second.bm25 is not None:
            raise ValueError("two-language vocabularies are weighted by tf-idf (each side's idf is its own language's)")
        if first.stemmer is not None or second.stemmer is not None:
            raise ValueError("two-language vocabularies take no stemmer (one stemmer cannot serve both languages)")
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

    def featurize_queries(self, texts: Sequence[str]) -> sp.csr_matrix:
        """Query rows (float32 CSR, sorted indices, unit length); a text with no known word is all zero."""
        return self.featurize_tokens([tokenize(t) for t in texts], documents=False)

    def featurize_documents(self, texts: Sequence[str]) -> sp.csr_matrix:
        """Document rows (float32 CSR, sorted indices): unit tf-idf, or BM25's saturated term frequencies."""
        return self.featurize_tokens([tokenize(t) for t in texts], documents=True)

    def featurize(self, texts: Sequence[str]) -> sp.csr_matrix:
        """Rows of a symmetric weighting (tf-idf), where a query's row is a document's; a BM25 vocabulary
        refuses, so no caller can take a document's row for a query's or back without saying which."""
        if not self.symmetric:
            raise ValueError("a BM25 vocabulary weighs queries and documents apart: featurize_queries/_documents")
        return self.featurize_tokens([tokenize(t) for t in texts], documents=True)

    def featurize_tokens(self, token_lists: Sequence[Sequence[str]], *, documents: bool) -> sp.csr_matrix:
        """`featurize_documents` (or `featurize_queries`) on texts already tokenized."""
        words = self._word_rows(token_lists, documents)
        if self.hashing is None:
            return words
        matrix = sp.hstack([words, self.hashing.hashed(token_lists)], format="csr", dtype=np.float32)
        matrix.sort_indices()
        return matrix

    def semantic_rows(self, documents: sp.csr_matrix) -> sp.csr_matrix:
        """The rows a form's semantic part embeds, from document rows: the rows themselves under tf-idf; under
        BM25 each row's saturated term frequencies times idf, scaled to unit length — a tf-idf vector with BM25's
        saturation, so V d does not grow with a document's length as the raw BM25 row would make it."""
        if self.bm25 is None:
            return documents
        documents = sp.csr_matrix(documents, dtype=np.float32)
        return _unit_rows(documents, documents.data * self.idf[documents.indices])

    def doc_matrix(self, documents: sp.csr_matrix, ids: Sequence[str] | None = None) -> DocMatrix:
        """Document rows prepared for scoring (ssi.products.DocMatrix) with their semantic rows."""
        semantic = None if self.bm25 is None else self.semantic_rows(documents)
        return DocMatrix(documents, ids=ids, semantic=semantic)

    def rows_from_ids(self, word_ids: np.ndarray, lengths: np.ndarray, *, documents: bool) -> sp.csr_matrix:
        """The weighted rows over the D words of texts given as vocabulary ids laid end to end (−1: unknown
        word, counted in a document's length)."""
        return self.rows_from_counts(self.term_counts(word_ids, lengths), lengths, documents=documents)

    def term_counts(self, word_ids: np.ndarray, lengths: np.ndarray) -> TermCounts:
        """Each text's counts of the D words (`term_counts`), from its vocabulary ids laid end to end: what its
        row is weighed from, and a query's bundle words and their counts for the open vocabulary (ssi.open_vocab)."""
        return term_counts(word_ids, lengths, self.idf.shape[0])

    def rows_from_counts(self, counts: TermCounts, lengths: np.ndarray, *, documents: bool) -> sp.csr_matrix:
        """`rows_from_ids` from the texts' word counts (`term_counts`) and token counts: the one place the weighting
        is chosen."""
        if self.bm25 is None:
            return tfidf_rows(counts, self.idf)
        return bm25_rows(counts, lengths, self.idf, self.bm25, documents=documents)

    def _word_rows(self, token_lists: Sequence[Sequence[str]], documents: bool) -> sp.csr_matrix:
        """Rows over the D words: every token looked up in one pass (dict.get mapped in C)."""
        lengths = np.fromiter((len(tokens) for tokens in token_lists), dtype=np.int64, count=len(token_lists))
        return self.rows_from_ids(self.ids_of(list(chain.from_iterable(token_lists))), lengths, documents=documents)
