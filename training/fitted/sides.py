"""The two sides of the training pairs as term-count rows: what the EM kinds of paper 003 train on.

Paper 003 trains on (query, clicked title) pairs, a few words each. Here a pair's texts may be
whole articles (Wikipedia links), hundreds of distinct words each, and EM's cost grows with the
words of every pair (times the topics, or times the other side's words for IBM model 1): so each
side can be cut to its `pair_words` words of highest tf-idf weight, the words that say most about
it, keeping their counts. Counts are recovered from the tf-idf rows by `ssi.forms.query_likelihood.term_counts`,
the same function the forms score with, so training and scoring read a text alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ssi.forms.query_likelihood import term_counts


def top_words(X: sp.csr_matrix, C: sp.csr_matrix, keep: int | None) -> sp.csr_matrix:
    """C (count rows with X's pattern) restricted, row by row, to the `keep` entries of highest weight in X."""
    C = sp.csr_matrix(C, dtype=np.float32)
    if keep is None or np.diff(C.indptr).max(initial=0) <= keep:
        return C
    X = sp.csr_matrix(X[:, : C.shape[1]])
    X.eliminate_zeros()
    rows, cols, vals = [], [], []
    for r in range(C.shape[0]):
        s, e = C.indptr[r], C.indptr[r + 1]
        order = np.argsort(-X.data[s:e], kind="stable")[:keep]
        rows.append(np.full(order.shape[0], r))
        cols.append(C.indices[s:e][order])
        vals.append(C.data[s:e][order])
    out = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=C.shape, dtype=np.float32
    )
    out.sort_indices()
    return out


@dataclass(frozen=True)
class Sides:
    """Count rows of the pairs: row p of `query` and of `doc` are the two texts of pair p (either may be empty)."""

    query: sp.csr_matrix
    doc: sp.csr_matrix

    @property
    def n_pairs(self) -> int:
        return int(self.doc.shape[0])

    @property
    def n_words(self) -> int:
        return int(self.doc.shape[1])

    @property
    def tokens(self) -> float:
        return float(self.query.data.sum() + self.doc.data.sum())

    @classmethod
    def of_pairs(
        cls,
        X_queries: sp.csr_matrix,
        X_docs: sp.csr_matrix,
        query_rows: np.ndarray,
        doc_rows: np.ndarray,
        idf: np.ndarray,
        pair_words: int | None,
    ) -> Sides:
        """Pair p: query row `query_rows[p]` of X_queries against document row `doc_rows[p]` of X_docs."""
        query = top_words(X_queries, term_counts(X_queries, idf), pair_words)  # each text cut once, then repeated
        doc = query if X_docs is X_queries else top_words(X_docs, term_counts(X_docs, idf), pair_words)
        return cls(sp.csr_matrix(query[query_rows]), sp.csr_matrix(doc[doc_rows]))

    @classmethod
    def of_documents(cls, X_docs: sp.csr_matrix, idf: np.ndarray) -> Sides:
        """PLSA's training data: each document alone, with no query side."""
        doc = term_counts(X_docs, idf)
        return cls(sp.csr_matrix(doc.shape, dtype=np.float32), doc)

    def restricted(self, n_words: int) -> Sides:
        """Both sides cut to the word ids below `n_words` (the most frequent words: ids follow document frequency)."""
        return Sides(_first_columns(self.query, n_words), _first_columns(self.doc, n_words))


def _first_columns(C: sp.csr_matrix, n: int) -> sp.csr_matrix:
    out = sp.csr_matrix(C[:, :n], dtype=np.float32)
    out.sort_indices()
    return out
