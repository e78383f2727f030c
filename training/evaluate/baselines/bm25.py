"""BM25 (the bm25s implementation, Lucene variant), on the words of `ssi.tokenize` (or their stems).

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
from ssi.stemming import NO_STEMMER, Stems
from training.evaluate.features import TokenTable
from training.evaluate.scorer import DEFAULT_BLOCK

DEFAULT_K1 = 1.5
DEFAULT_B = 0.75


class BM25Scorer:
    """BM25 over a fixed corpus; query texts are tokenized through the shared `TokenTable`.

    `stemmer` (ssi.stemming): the terms are the words' stems, as a stemming model's vocabulary counts them,
    so the BM25 a model is compared with sees the same terms (the table keeps the words themselves).
    """

    def __init__(
        self,
        docs: Sequence[Document],
        *,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        method: str = "lucene",
        tokens: TokenTable | None = None,
        block_size: int = DEFAULT_BLOCK,
        stemmer: str | None = None,
    ) -> None:
        self.k1, self.b, self.method = k1, b, method
        self.tokens = tokens if tokens is not None else TokenTable()
        self.block_size = block_size
        self._stems = Stems(stemmer) if stemmer not in (None, NO_STEMMER) else None
        self._term_id: dict[str, int] = {}
        self._term_of = np.zeros(0, dtype=np.int64)  # table word id -> term id
        doc_ids = [self._terms(ids) for ids in self.tokens.ids([d.full_text for d in docs])]
        seen = np.unique(np.concatenate(doc_ids)) if doc_ids else np.zeros(0, dtype=np.int64)
        # Term id -> BM25 column (-1: the term is in no document, so it scores nothing).
        self._column = np.full(len(self._term_id), -1, dtype=np.int64)
        self._column[seen] = np.arange(seen.shape[0])
        self.n_words = int(seen.shape[0])
        terms = list(self._term_id)
        vocab_dict = {terms[t]: i for i, t in enumerate(seen.tolist())}
        corpus_ids = [self._column[ids].tolist() for ids in doc_ids]
        self.retriever = bm25s.BM25(k1=k1, b=b, method=method)
        self.retriever.index((corpus_ids, vocab_dict), create_empty_token=False, show_progress=False)
        scores = self.retriever.scores
        # bm25s stores S as CSC [n_docs, n_words]; as CSR it is the document-term matrix.
        S = sp.csc_matrix(
            (scores["data"], scores["indices"], scores["indptr"]), shape=(scores["num_docs"], self.n_words)
        )
        self.docs = DocMatrix(S.tocsr())

    def _terms(self, table_ids: np.ndarray) -> np.ndarray:
        """Term ids of table word ids (a word's stem under the stemmer, else the word), extended as the table grows."""
        words = self.tokens.words
        if self._term_of.shape[0] < len(words):
            new = words[self._term_of.shape[0] :]
            terms = self._stems.stems(new) if self._stems is not None else new
            setdefault, term_id = self._term_id.setdefault, self._term_id
            extra = np.fromiter((setdefault(t, len(term_id)) for t in terms), dtype=np.int64, count=len(terms))
            self._term_of = np.concatenate([self._term_of, extra])
        return self._term_of[table_ids]

    @property
    def n_docs(self) -> int:
        return self.docs.n_docs

    def params(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b}

    def query_counts(self, query_texts: Sequence[str]) -> sp.csr_matrix:
        """Term counts of the queries over the BM25 columns (terms in no document dropped)."""
        ids = [self._terms(table_ids) for table_ids in self.tokens.ids(query_texts)]
        column = self._column
        if column.shape[0] < len(self._term_id):  # new terms from the queries: in no document
            column = np.concatenate([column, np.full(len(self._term_id) - column.shape[0], -1)])
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
