"""BM25 (the bm25s implementation, Lucene variant), on the words of `ssi.tokenize`.

    f(q, d) = Σ_{t ∈ q} idf(t) · tf(t, d) · (k1 + 1) / (tf(t, d) + k1 · (1 − b + b · |d| / avgdl))

summed over query tokens with repeats (as bm25s does). BM25 keeps every corpus word (it has no
vocabulary cut-off); the tokenizer is the project's, so it sees the same words as the other
scorers. bm25s precomputes the per-(document, word) terms as a sparse matrix S; all queries of a
block are then scored at once as counts(Q) Sᵀ instead of bm25s's per-query loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import bm25s
import numpy as np
import scipy.sparse as sp

from ssi.products import DocMatrix
from ssi.records import Document
from training.evaluate.features import TokenTable
from training.evaluate.scorer import DEFAULT_BLOCK

DEFAULT_K1 = 1.5
DEFAULT_B = 0.75


class BM25Scorer:
    """BM25 over a fixed corpus; query texts are tokenized through the shared `TokenTable`."""

    def __init__(
        self,
        docs: Sequence[Document],
        *,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        method: str = "lucene",
        tokens: TokenTable | None = None,
        block_size: int = DEFAULT_BLOCK,
    ) -> None:
        self.k1, self.b, self.method = k1, b, method
        self.tokens = tokens if tokens is not None else TokenTable()
        self.block_size = block_size
        doc_ids = self.tokens.ids([d.full_text for d in docs])
        seen = np.unique(np.concatenate(doc_ids)) if doc_ids else np.zeros(0, dtype=np.int32)
        # Table word id -> BM25 column (-1: the word is in no document, so it scores nothing).
        self._column = np.full(len(self.tokens.words), -1, dtype=np.int64)
        self._column[seen] = np.arange(seen.shape[0])
        self.n_words = int(seen.shape[0])
        vocab_dict = {self.tokens.words[w]: i for i, w in enumerate(seen.tolist())}
        corpus_ids = [self._column[ids].tolist() for ids in doc_ids]
        self.retriever = bm25s.BM25(k1=k1, b=b, method=method)
        self.retriever.index((corpus_ids, vocab_dict), create_empty_token=False, show_progress=False)
        scores = self.retriever.scores
        # bm25s stores S as CSC [n_docs, n_words]; as CSR it is the document-term matrix.
        S = sp.csc_matrix(
            (scores["data"], scores["indices"], scores["indptr"]), shape=(scores["num_docs"], self.n_words)
        )
        self.docs = DocMatrix(S.tocsr())

    @property
    def n_docs(self) -> int:
        return self.docs.n_docs

    def params(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b}

    def query_counts(self, query_texts: Sequence[str]) -> sp.csr_matrix:
        """Term counts of the queries over the BM25 columns (words in no document dropped)."""
        ids = self.tokens.ids(query_texts)
        column = self._column
        if column.shape[0] < len(self.tokens.words):  # new words from the queries: in no document
            column = np.concatenate([column, np.full(len(self.tokens.words) - column.shape[0], -1)])
        indptr = np.zeros(len(ids) + 1, dtype=np.int64)
        cols: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        for row, token_ids in enumerate(ids):
            mapped = column[token_ids] if token_ids.shape[0] else np.zeros(0, dtype=np.int64)
            uniq, counts = np.unique(mapped[mapped >= 0], return_counts=True)
            cols.append(uniq)
            vals.append(counts.astype(np.float32))
            indptr[row + 1] = indptr[row] + uniq.shape[0]
        indices = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
        data = np.concatenate(vals) if vals else np.zeros(0, dtype=np.float32)
        return sp.csr_matrix((data, indices, indptr), shape=(len(ids), self.n_words))

    def score(self, query_texts: Sequence[str]) -> np.ndarray:
        texts = list(query_texts)
        out = np.empty((len(texts), self.n_docs), dtype=np.float32)
        for start in range(0, len(texts), self.block_size):
            stop = min(start + self.block_size, len(texts))
            out[start:stop] = self.docs.products(self.query_counts(texts[start:stop]))
        return out
