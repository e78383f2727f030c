"""The diagonal (exact word match) term Σ_i w_i q_i d_i over every document sharing a word with q.

The documents' tf-idf vectors are held word-major (a CSC matrix, rows = documents, columns = words),
so a query touches only the posting lists of its own words: a sparse mat-vec instead of a pass over
the collection. This is the second source of candidates that makes the served ranking exact
(DESIGN.md, "Exactness of the served ranking"): the embedding index alone misses a document whose
score comes mostly from this term.

Rows are appended, never removed (deleted rows are masked by the caller). Appends go to a small
delta matrix; `appended` and `merged` return new objects instead of mutating, so a search holding
the old object is never disturbed and the costly merge runs outside the writers' exclusive section.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

DELTA_ROWS = 4096  # appended rows kept apart before a merge into the base matrix


def _csc(matrix: sp.spmatrix | sp.sparray, n_words: int) -> sp.csc_matrix:
    out = sp.csc_matrix(matrix, dtype=np.float32)
    if out.shape[1] != n_words:
        raise ValueError(f"tf-idf matrix has {out.shape[1]} columns, the vocabulary has {n_words} words")
    out.sort_indices()
    return out


class LexicalIndex:
    def __init__(self, weights: np.ndarray, base: sp.spmatrix, delta: sp.spmatrix | None = None) -> None:
        self.weights = np.asarray(weights, dtype=np.float32)
        self.n_words = self.weights.shape[0]
        self.nonnegative = bool((self.weights >= 0).all())
        self._positive = np.maximum(self.weights, 0)
        self._base = _csc(base, self.n_words)
        self._delta = _csc(delta if delta is not None else sp.csc_matrix((0, self.n_words)), self.n_words)

    @property
    def rows(self) -> int:
        return self._base.shape[0] + self._delta.shape[0]

    @property
    def needs_merge(self) -> bool:
        return self._delta.shape[0] >= DELTA_ROWS

    def appended(self, rows: sp.spmatrix) -> LexicalIndex:
        """A new index with `rows` (documents × words tf-idf) added after the current last row."""
        delta = sp.vstack([self._delta, sp.csr_matrix(rows, dtype=np.float32)], format="csc")
        return LexicalIndex(self.weights, self._base, delta)

    def merged(self) -> LexicalIndex:
        return LexicalIndex(self.weights, self.matrix())

    def matrix(self) -> sp.csc_matrix:
        """Every row's tf-idf vector as one CSC matrix (for snapshots and compaction)."""
        if self._delta.shape[0] == 0:
            return self._base
        return _csc(sp.vstack([self._base, self._delta], format="csc"), self.n_words)

    def scores(self, word_ids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, lexical, upper) for the rows sharing a word with the query q = (word_ids, values).

        rows are sorted; lexical[j] = Σ_i w_i q_i d_i for row j; upper[j] is the same sum over the
        positive w_i only, an upper bound of the lexical score of that row (equal to it when w ≥ 0),
        which is what the candidate rule needs when some weights are negative.
        """
        word_ids = np.asarray(word_ids, dtype=np.int64)
        q = np.asarray(values, dtype=np.float64)
        weighted = self.weights[word_ids].astype(np.float64) * q
        positive = self._positive[word_ids].astype(np.float64) * q
        row_parts: list[np.ndarray] = []
        val_parts: list[np.ndarray] = []
        pos_parts: list[np.ndarray] = []
        offset = 0
        for matrix in (self._base, self._delta):
            indptr, indices, data = matrix.indptr, matrix.indices, matrix.data
            for word, weight, pos_weight in zip(word_ids.tolist(), weighted.tolist(), positive.tolist(), strict=True):
                start, end = indptr[word], indptr[word + 1]
                if end > start:
                    postings = data[start:end].astype(np.float64)
                    row_parts.append(indices[start:end].astype(np.int64) + offset)
                    val_parts.append(postings * weight)
                    if not self.nonnegative:
                        pos_parts.append(postings * pos_weight)
            offset += matrix.shape[0]
        empty = np.zeros(0, dtype=np.float64)
        if not row_parts:
            return np.zeros(0, dtype=np.int64), empty, empty
        rows = np.concatenate(row_parts)
        vals = np.concatenate(val_parts)
        pos = np.concatenate(pos_parts) if pos_parts else None
        # Few postings: aggregate by sorting them; many: one dense pass over the rows is cheaper.
        if rows.shape[0] * 8 < self.rows:
            unique, inverse = np.unique(rows, return_inverse=True)
            lexical = np.bincount(inverse, weights=vals, minlength=unique.shape[0])
            upper = lexical if pos is None else np.bincount(inverse, weights=pos, minlength=unique.shape[0])
            return unique, lexical, upper
        present = np.zeros(self.rows, dtype=bool)
        present[rows] = True
        unique = np.flatnonzero(present)
        lexical = np.bincount(rows, weights=vals, minlength=self.rows)[unique]
        upper = lexical if pos is None else np.bincount(rows, weights=pos, minlength=self.rows)[unique]
        return unique, lexical, upper

    def select(self, rows: np.ndarray) -> LexicalIndex:
        """A new index holding only `rows`, renumbered 0..len(rows)-1 (compaction)."""
        kept = sp.csr_matrix(self.matrix())[np.asarray(rows, dtype=np.int64)]
        return LexicalIndex(self.weights, kept)
