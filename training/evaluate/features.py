"""Tokenize each distinct text once per evaluation run, and featurize it for any vocabulary.

Tokenizing dominates the cost of an evaluation on long documents (Wikispeedia: ~15 s per pass
over the corpus). A document–document task uses every document as a query, and every scorer and
every tuning point would tokenize them again; `TokenTable` keeps each distinct text as a compact
int32 array of word ids instead, and `TextFeatures` turns those ids into the tf-idf rows of
`Vocabulary.featurize` with the same function (`ssi.vocab.tfidf_rows`, tested against it),
x_i = (1 + log tf_i) · idf_i, scaled to unit length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ssi.tokenize import tokenize
from ssi.vocab import TF_SCHEME, Vocabulary, tfidf_rows


class TokenTable:
    """Word ids (into one growing word list) of every text seen, each text tokenized once."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self._word_id: dict[str, int] = {}
        self._ids: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """int32 word ids of each text, in token order (repeats kept: they are the term counts)."""
        out: list[np.ndarray] = []
        word_id = self._word_id
        for text in texts:
            cached = self._ids.get(text)
            if cached is None:
                ids = []
                for word in tokenize(text):
                    wid = word_id.get(word)
                    if wid is None:
                        wid = word_id[word] = len(self.words)
                        self.words.append(word)
                    ids.append(wid)
                cached = np.asarray(ids, dtype=np.int32)
                self._ids[text] = cached
            out.append(cached)
        return out


class TextFeatures:
    """Unit tf-idf rows of texts for one vocabulary, memoized per distinct text."""

    def __init__(self, vocab: Vocabulary, tokens: TokenTable | None = None) -> None:
        self.vocab = vocab
        self.tokens = tokens if tokens is not None else TokenTable()
        self._to_vocab = np.zeros(0, dtype=np.int32)
        self._rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        # The fast path (memoized token ids) serves this tf scheme without a hashed block; else the vocabulary's own.
        self._fast = vocab.tf_scheme == TF_SCHEME == "log1p-idf-l2" and vocab.hashing is None  # no hashed block

    @property
    def size(self) -> int:
        return self.vocab.size

    def _vocab_ids(self) -> np.ndarray:
        """Map table word id -> vocabulary id (-1 when unknown), extended as the table grows."""
        words = self.tokens.words
        if self._to_vocab.shape[0] < len(words):
            new = [self.vocab.id_of(w) for w in words[self._to_vocab.shape[0] :]]
            extra = np.asarray([-1 if i is None else i for i in new], dtype=np.int32)
            self._to_vocab = np.concatenate([self._to_vocab, extra])
        return self._to_vocab

    def __call__(self, texts: Sequence[str]) -> sp.csr_matrix:
        """[len(texts), D] float32 CSR with sorted indices, equal to `vocab.featurize(texts)`."""
        if not self._fast:
            return self.vocab.featurize(list(texts))
        missing = [t for t in dict.fromkeys(texts) if t not in self._rows]
        if missing:
            token_ids = self.tokens.ids(missing)
            to_vocab = self._vocab_ids()
            lengths = np.asarray([ids.shape[0] for ids in token_ids], dtype=np.int64)
            flat = np.concatenate(token_ids) if token_ids else np.zeros(0, dtype=np.int32)
            made = tfidf_rows(to_vocab[flat].astype(np.int64), lengths, self.vocab.idf)
            for row, text in enumerate(missing):
                start, end = made.indptr[row], made.indptr[row + 1]
                self._rows[text] = (made.indices[start:end].astype(np.int32), made.data[start:end])
        rows = [self._rows[t] for t in texts]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([r[0].shape[0] for r in rows], out=indptr[1:])
        indices = np.concatenate([r[0] for r in rows]) if rows else np.zeros(0, dtype=np.int32)
        data = np.concatenate([r[1] for r in rows]) if rows else np.zeros(0, dtype=np.float32)
        matrix = sp.csr_matrix((data, indices, indptr), shape=(len(rows), self.vocab.size))
        matrix.has_sorted_indices = True
        return matrix
