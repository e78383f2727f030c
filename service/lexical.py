"""The diagonal (exact word match) term l(d) = Σ_i w_i q_i d_i, over the documents sharing a word with q.

The documents' tf-idf vectors are held word-major (a CSC matrix, rows = documents, columns = words),
so a query touches only the posting lists of its own words: a sparse mat-vec instead of a pass over
the collection. This is the second source of candidates that makes the served ranking exact
(DESIGN.md, "Exactness of the served ranking"): the embedding index alone misses a document whose
score comes mostly from this term.

Only documents whose l⁺ (the sum over positive weights) can exceed a threshold θ are ever wanted
(see service.rerank), so `LexicalQuery.above` prunes like MaxScore (Turtle & Flood, 1995): each query
word i can add at most m_i = max(w_i q_i, 0) · max_d d_i; the words of smallest m_i whose bounds sum
to at most θ are "low" — a document holding only low words cannot pass — so only the posting lists
of the other words are scanned, and the low words' exact contributions are looked up (binary search
in their sorted posting lists) for the few documents that survive. Frequent words have a small idf,
hence a small m_i, so their long posting lists are the ones skipped.

Rows are appended, never removed (deleted rows are masked by the caller). Appends go to a small
delta matrix; `appended` and `merged` return new objects instead of mutating, so a search holding
the old object is never disturbed and the costly merge runs outside the writers' exclusive section.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

DELTA_ROWS = 4096  # appended rows kept apart before a merge into the base matrix

Scored = tuple[np.ndarray, np.ndarray, np.ndarray]  # rows (sorted), l, l⁺


def _csc(matrix: sp.spmatrix | sp.sparray, n_words: int) -> sp.csc_matrix:
    out = sp.csc_matrix(matrix, dtype=np.float32)
    if out.shape[1] != n_words:
        raise ValueError(f"tf-idf matrix has {out.shape[1]} columns, the vocabulary has {n_words} words")
    if not out.has_sorted_indices:
        out = out.copy()  # its arrays may be a snapshot's, memory-mapped read-only
        out.sort_indices()
    return out


def _column_max(matrix: sp.csc_matrix) -> np.ndarray:
    """max_d X[d, i] for every word i (0 for a word in no document); tf-idf values are ≥ 0."""
    out = np.zeros(matrix.shape[1], dtype=np.float32)
    counts = np.diff(matrix.indptr)
    nonempty = np.flatnonzero(counts)
    if nonempty.size:
        out[nonempty] = np.maximum.reduceat(matrix.data, matrix.indptr[nonempty])
    return out


def _row_norm_max(matrix: sp.csc_matrix) -> float:
    """max_d ‖X[d]‖ (1 for unit tf-idf rows; 0 for none)."""
    if matrix.nnz == 0:
        return 0.0
    squares = np.bincount(matrix.indices, weights=matrix.data.astype(np.float64) ** 2, minlength=matrix.shape[0])
    return float(np.sqrt(squares.max()))


def _empty() -> Scored:
    nothing = np.zeros(0, dtype=np.float64)
    return np.zeros(0, dtype=np.int64), nothing, nothing


class LexicalIndex:
    def __init__(
        self,
        weights: np.ndarray,
        base: sp.spmatrix,
        delta: sp.spmatrix | None = None,
        base_column_max: np.ndarray | None = None,
        base_row_norm_max: float | None = None,
    ) -> None:
        self.weights = np.asarray(weights, dtype=np.float32)
        self.n_words = self.weights.shape[0]
        self.nonnegative = bool((self.weights >= 0).all())
        self._base = _csc(base, self.n_words)
        self._delta = _csc(delta if delta is not None else sp.csc_matrix((0, self.n_words)), self.n_words)
        self._base_column_max = _column_max(self._base) if base_column_max is None else base_column_max
        self.column_max = np.maximum(self._base_column_max, _column_max(self._delta))
        self._base_row_norm_max = _row_norm_max(self._base) if base_row_norm_max is None else base_row_norm_max
        self.row_norm_max = max(self._base_row_norm_max, _row_norm_max(self._delta))

    @property
    def rows(self) -> int:
        return self._base.shape[0] + self._delta.shape[0]

    @property
    def needs_merge(self) -> bool:
        return self._delta.shape[0] >= DELTA_ROWS

    def parts(self) -> list[tuple[sp.csc_matrix, int]]:
        """(matrix, first row) of the base and the delta."""
        return [(self._base, 0), (self._delta, self._base.shape[0])]

    def appended(self, rows: sp.spmatrix) -> LexicalIndex:
        """A new index with `rows` (documents × words tf-idf) added after the current last row."""
        delta = sp.vstack([self._delta, sp.csr_matrix(rows, dtype=np.float32)], format="csc")
        return LexicalIndex(self.weights, self._base, delta, self._base_column_max, self._base_row_norm_max)

    def merged(self) -> LexicalIndex:
        return LexicalIndex(self.weights, self.matrix())

    def matrix(self) -> sp.csc_matrix:
        """Every row's tf-idf vector as one CSC matrix (for snapshots and compaction)."""
        if self._delta.shape[0] == 0:
            return self._base
        return _csc(sp.vstack([self._base, self._delta], format="csc"), self.n_words)

    def select(self, rows: np.ndarray) -> LexicalIndex:
        """A new index holding only `rows`, renumbered 0..len(rows)-1 (compaction)."""
        kept = sp.csr_matrix(self.matrix())[np.asarray(rows, dtype=np.int64)]
        return LexicalIndex(self.weights, kept)

    def query(self, word_ids: np.ndarray, values: np.ndarray) -> LexicalQuery:
        return LexicalQuery(self, word_ids, values)

    def scores(self, word_ids: np.ndarray, values: np.ndarray) -> Scored:
        """(rows, l, l⁺) for every row sharing a word with q (no pruning)."""
        return self.query(word_ids, values).above(-np.inf)


class LexicalQuery:
    """The diagonal term of one query q = (word_ids, values) against one LexicalIndex."""

    def __init__(self, index: LexicalIndex, word_ids: np.ndarray, values: np.ndarray) -> None:
        self.words = np.asarray(word_ids, dtype=np.int64)
        q = np.asarray(values, dtype=np.float64)
        self.weight = index.weights[self.words].astype(np.float64) * q  # w_i q_i
        self.positive = np.maximum(self.weight, 0.0)
        self.bound = self.positive * index.column_max[self.words]  # m_i: the most word i can add
        # The most l⁺ can be for any row: Σ m_i, and (Cauchy–Schwarz) max_i w_i⁺ · ‖q‖ · max_d ‖d‖,
        # which is max w⁺ for unit tf-idf vectors; service.rerank prunes the pool with it.
        w_max = float(np.maximum(index.weights[self.words], 0.0).max(initial=0.0))
        cauchy = w_max * float(np.linalg.norm(q)) * index.row_norm_max
        self.max_gain = float(min(self.bound.sum(), cauchy))
        self.nonnegative = index.nonnegative
        self.n_rows = index.rows
        self._parts = index.parts()
        # The first scan of posting lists, reused when the caller raises the threshold (a wider pool).
        self._scanned: tuple[float, np.ndarray, float, Scored] | None = None

    def for_rows(self, rows: np.ndarray, words: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact (l, l⁺) of the given rows (any order), over all query words or the given positions."""
        rows = np.asarray(rows, dtype=np.int64)
        lexical = np.zeros(rows.shape[0], dtype=np.float64)
        upper = np.zeros(rows.shape[0], dtype=np.float64)
        if rows.shape[0] == 0:
            return lexical, upper
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        chosen = range(self.words.shape[0]) if words is None else words.tolist()
        for matrix, first in self._parts:
            lo, hi = np.searchsorted(sorted_rows, [first, first + matrix.shape[0]])
            if hi <= lo:
                continue
            indptr, indices, data = matrix.indptr, matrix.indices, matrix.data
            # Same dtype as the postings, or searchsorted would copy each long posting list to convert it.
            local = (sorted_rows[lo:hi] - first).astype(indices.dtype)
            for j in chosen:
                word = self.words[j]
                start, end = indptr[word], indptr[word + 1]
                if end == start:
                    continue
                postings = indices[start:end]
                at = np.searchsorted(postings, local)
                at_clipped = np.minimum(at, postings.shape[0] - 1)
                hit = postings[at_clipped] == local
                if not hit.any():
                    continue
                values = data[start:end][at_clipped[hit]].astype(np.float64)
                targets = order[lo:hi][hit]
                lexical[targets] += self.weight[j] * values
                upper[targets] += self.positive[j] * values
        return lexical, upper

    def above(self, threshold: float) -> Scored:
        """Every row whose l⁺ can exceed `threshold`, with its exact l and l⁺ (rows sorted; may hold others).

        Rows sharing no word with q (l⁺ = 0) are never listed, so callers use it with threshold ≥ 0
        (or -inf, which lists every row sharing a word). A call with a higher threshold than an
        earlier one reuses that call's scan: its low words' bound still bounds what it skipped.
        """
        if self._scanned is not None and threshold >= self._scanned[0]:
            _, low, low_total, (rows, lexical, upper) = self._scanned
        else:
            order = np.argsort(self.bound, kind="stable")
            prefix = np.cumsum(self.bound[order])
            n_low = int(np.searchsorted(prefix, threshold, side="right")) if np.isfinite(threshold) else 0
            low, high = order[:n_low], order[n_low:]
            low_total = float(prefix[n_low - 1]) if n_low else 0.0
            rows, lexical, upper = self._aggregate(high) if high.shape[0] else _empty()
            self._scanned = (threshold, low, low_total, (rows, lexical, upper))
        if rows.shape[0] and np.isfinite(threshold):
            keep = upper + low_total > threshold
            rows, lexical, upper = rows[keep], lexical[keep], upper[keep]
        if low.shape[0] and rows.shape[0]:
            extra_lexical, extra_upper = self.for_rows(rows, low)
            lexical, upper = lexical + extra_lexical, upper + extra_upper
        return rows, lexical, upper

    def _postings(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
        """The posting lists of the query words at `positions`, laid end to end: (rows, w_i q_i d_i, w_i⁺ q_i d_i)
        (the last None when every weight is ≥ 0); None when none of them is in any row."""
        row_parts: list[np.ndarray] = []
        val_parts: list[np.ndarray] = []
        pos_parts: list[np.ndarray] = []
        for matrix, first in self._parts:
            indptr, indices, data = matrix.indptr, matrix.indices, matrix.data
            for j in positions.tolist():
                word = self.words[j]
                start, end = indptr[word], indptr[word + 1]
                if end > start:
                    # float32 and the postings' own int32 ids: these arrays can hold most of the collection.
                    postings = data[start:end]
                    row_parts.append(indices[start:end] + np.int32(first) if first else indices[start:end])
                    val_parts.append(postings * np.float32(self.weight[j]))
                    if not self.nonnegative:
                        pos_parts.append(postings * np.float32(self.positive[j]))
        if not row_parts:
            return None
        pos = np.concatenate(pos_parts) if pos_parts else None
        return np.concatenate(row_parts), np.concatenate(val_parts), pos

    def everywhere(self) -> np.ndarray:
        """l(d) of every row, float64 [rows] (0 where no query word occurs): one pass over the query's
        posting lists into a dense array, for callers that scan the collection anyway (a flat index)."""
        found = self._postings(np.arange(self.words.shape[0]))
        if found is None:
            return np.zeros(self.n_rows, dtype=np.float64)
        rows, vals, _ = found
        return np.bincount(rows, weights=vals, minlength=self.n_rows)

    def _aggregate(self, positions: np.ndarray) -> Scored:
        """Σ over the posting lists of the query words at `positions`, for every row they hold."""
        found = self._postings(positions)
        if found is None:
            return _empty()
        rows, vals, pos = found
        # Few postings: aggregate by sorting them; many: one dense pass over the rows is cheaper.
        if rows.shape[0] * 8 < self.n_rows:
            unique, inverse = np.unique(rows, return_inverse=True)
            lexical = np.bincount(inverse, weights=vals, minlength=unique.shape[0])
            upper = lexical if pos is None else np.bincount(inverse, weights=pos, minlength=unique.shape[0])
            return unique.astype(np.int64), lexical, upper
        present = np.zeros(self.n_rows, dtype=bool)
        present[rows] = True
        unique = np.flatnonzero(present)
        lexical = np.bincount(rows, weights=vals, minlength=self.n_rows)[unique]
        upper = lexical if pos is None else np.bincount(rows, weights=pos, minlength=self.n_rows)[unique]
        return unique, lexical, upper
