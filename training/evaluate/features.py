"""Tokenize each distinct text once per evaluation run, and featurize it for any vocabulary.

Tokenizing dominates the cost of an evaluation on long documents (Wikispeedia: ~15 s per pass
over the corpus). A document–document task uses every document as a query, and every scorer and
every tuning point would tokenize them again; `TokenTable` keeps each distinct text as a compact
int32 array of word ids instead, and `TextFeatures` turns those ids into the tf-idf rows of
`Vocabulary.featurize_queries` / `featurize_documents` with the same function
(`Vocabulary.rows_from_ids`, tested against them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ssi.tokenize import tokenize
from ssi.vocab import Vocabulary


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
    """Rows of texts for one vocabulary, memoized per distinct text and side.

    Called, it gives query rows; `documents` gives document rows. Under tf-idf they are the same rows
    (one memo); under BM25 (ssi.weighting) a text has a row for each side.
    """

    def __init__(self, vocab: Vocabulary, tokens: TokenTable | None = None) -> None:
        self.vocab = vocab
        self.tokens = tokens if tokens is not None else TokenTable()
        self._to_vocab = np.zeros(0, dtype=np.int32)
        self._rows: dict[tuple[str, bool], tuple[np.ndarray, np.ndarray]] = {}
        # The fast path (memoized token ids) serves the words' weighting; a hashed block needs the vocabulary's own.
        self._fast = vocab.hashing is None

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
        """[len(texts), D] float32 CSR with sorted indices, equal to `vocab.featurize_queries(texts)`."""
        return self._featurized(texts, documents=False)

    def documents(self, texts: Sequence[str]) -> sp.csr_matrix:
        """Equal to `vocab.featurize_documents(texts)`."""
        return self._featurized(texts, documents=True)

    def _featurized(self, texts: Sequence[str], documents: bool) -> sp.csr_matrix:
        if not self._fast:
            texts = list(texts)
            return self.vocab.featurize_documents(texts) if documents else self.vocab.featurize_queries(texts)
        side = documents and not self.vocab.symmetric  # tf-idf: one row for both sides
        missing = [t for t in dict.fromkeys(texts) if (t, side) not in self._rows]
        if missing:
            token_ids = self.tokens.ids(missing)
            to_vocab = self._vocab_ids()
            lengths = np.asarray([ids.shape[0] for ids in token_ids], dtype=np.int64)
            flat = np.concatenate(token_ids) if token_ids else np.zeros(0, dtype=np.int32)
            made = self.vocab.rows_from_ids(to_vocab[flat].astype(np.int64), lengths, documents=documents)
            for row, text in enumerate(missing):
                start, end = made.indptr[row], made.indptr[row + 1]
                self._rows[(text, side)] = (made.indices[start:end].astype(np.int32), made.data[start:end])
        rows = [self._rows[(t, side)] for t in texts]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([r[0].shape[0] for r in rows], out=indptr[1:])
        indices = np.concatenate([r[0] for r in rows]) if rows else np.zeros(0, dtype=np.int32)
        data = np.concatenate([r[1] for r in rows]) if rows else np.zeros(0, dtype=np.float32)
        matrix = sp.csr_matrix((data, indices, indptr), shape=(len(rows), self.vocab.size))
        matrix.has_sorted_indices = True
        return matrix
