"""The diagonal (exact word match) term l(d) = Σ_i w_i q_i d_i, over the documents sharing a word with q.

The documents' tf-idf vectors are held word-major (a CSC matrix, rows = documents, columns = words),
so a query touches only the posting lists of its own words: a sparse mat-vec instead of a pass over
the collection. This is the second source of candidates that makes the served ranking exact
(DESIGN.md, "Exactness of the served ranking"): the embedding index alone misses a document whose
score comes mostly from this term.

Only documents whose l⁺ (the sum over positive weights) can exceed a threshold θ are ever wanted
(see service.rerank), so `LexicalQuery.above` prunes like MaxScore (Turtle & Flood, 1995): each query
word i can add at most m_i = max(w_i q_i, 0) · max_d d_i; words whose bounds sum to at most θ are
"low" — a document holding only low words cannot pass — so only the posting lists of the other words
are scanned, and the low words' exact contributions are looked up for the documents that survive,
largest bound first, each survivor dropped once its bound falls to θ. Frequent words have a small
idf, hence a small m_i, and the low words are picked to skip the most postings per unit of bound.

A single row can make m_i loose: on 1 M Wikispeedia passages a word in 300k of them had m_i 0.18 from
one passage holding little else, while 99 % of its postings were below 0.02 (θ is ~0.15). So each long
posting list (≥ HEAD_MIN postings) of the base matrix keeps its ~1/HEAD_SHARE highest postings apart,
in a "head" (impact layering, as in Anh & Moffat's impact-ordered indexes): the rest of the list is
bounded by its cut c_i, so the bound that decides whether a word is low is w_i⁺ q_i c_i; a low word's
head is still scanned (into the bound only) and its delta postings exactly, so a row in no scanned
list has l⁺ ≤ θ. When the lists to scan still cover much of the collection, one dense pass over
every list costs about as much and leaves nothing to look up (`_dense_above`).

Rows are appended, never removed (deleted rows are masked by the caller). Appends go to a small
delta matrix; `appended` and `merged` return new objects instead of mutating, so a search holding
the old object is never disturbed and the costly merge runs outside the writers' exclusive section.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from ssi.jit_cache import CACHE

DELTA_ROWS = 4096  # appended rows kept apart before a merge into the base matrix

# What a step of each way of reading posting lists costs (ns, compiled kernels below, 2-core dev machine):
# one row looked up in one sorted posting list (binary search), one posting added into a dense array,
# one row of that array allocated and read back. (A 1,000-word page on 100k passages: its 2.2 M postings
# summed in 3.7 ms, against 28 ms for the numpy pass this replaced.) A lookup was first put at 25 ns; a 2 kB
# page's 179 words looked up for a pool of 128 rows of 100k Wikispeedia passages took 0.85-1.36 ms, ~45 ns each
# (its long lists miss the cache), so the estimate let a page take lookups and then a dense pass anyway.
SEARCH_NS = 45.0
POSTING_NS = 1.8
ROW_NS = 0.5
# Above rows / DENSE_SHARE postings, summing the lists in one dense pass beats sorting them (1 M rows).
DENSE_SHARE = 8
# A query word in at least this share of the rows is common (a stop word, mostly): its postings are the most
# and its weight among the least, so the every-row sum leaves it out and bounds what it can add instead
# (`RareSum`), when the common words' lists hold at least COMMON_POSTINGS_PER_ROW postings a row together:
# a long page's (20 kB against 100k adverts: ~1.3 M of its 2.2 M postings, bound ~0.2, 20-100 rows left to
# look up). At 1 a row, five-word queries with stop words split too (their ~100k postings) and /search at one
# client got slower by 0.1-0.3 ms (`ssi bench`, alternated): the sum runs beside the scan, the lookups after it.
COMMON_SHARE = 0.05
COMMON_POSTINGS_PER_ROW = 4.0
COMMON_LOOKUP_ROWS = 64  # rows the bound leaves to look up, for the cost estimate (20-100 on 20 kB pages)
HEAD_MIN = 2048  # a base posting list at least this long keeps a head
HEAD_SHARE = 64  # of about 1/HEAD_SHARE of its postings

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


def _heads(matrix: sp.csc_matrix, column_max: np.ndarray) -> tuple[sp.csc_matrix, np.ndarray]:
    """(head, cut): `head` holds the postings of each long list above that list's cut, and `cut[i]` bounds
    every other posting of word i (its column max where the list is short and its head empty)."""
    cut = column_max.copy()
    counts = np.diff(matrix.indptr)
    head_counts = np.zeros(matrix.shape[1], dtype=np.int64)
    indices: list[np.ndarray] = []
    data: list[np.ndarray] = []
    for word in np.flatnonzero(counts >= HEAD_MIN).tolist():
        start, end = matrix.indptr[word], matrix.indptr[word + 1]
        values = matrix.data[start:end]
        rank = values.shape[0] - values.shape[0] // HEAD_SHARE - 1
        cut[word] = np.partition(values, rank)[rank]
        above = values > cut[word]
        indices.append(matrix.indices[start:end][above])
        data.append(values[above])
        head_counts[word] = indices[-1].shape[0]
    indptr = np.concatenate(([0], np.cumsum(head_counts)))
    head = sp.csc_matrix(
        (
            np.concatenate(data) if data else np.zeros(0, dtype=np.float32),
            np.concatenate(indices) if indices else np.zeros(0, dtype=matrix.indices.dtype),
            indptr,
        ),
        shape=matrix.shape,
    )
    return head, cut


@dataclass(frozen=True, slots=True)
class _BaseBounds:
    """What the pruning needs from the base matrix, computed once per base (appends keep it)."""

    column_max: np.ndarray
    row_norm_max: float
    head: sp.csc_matrix
    cut: np.ndarray

    @classmethod
    def of(cls, base: sp.csc_matrix) -> _BaseBounds:
        column_max = _column_max(base)
        head, cut = _heads(base, column_max)
        return cls(column_max, _row_norm_max(base), head, cut)


# The two inner loops of long queries (a web page to /match holds ~1,000 words), compiled: in numpy each
# query word costs a few calls (~10 µs), so a page spent ~10 ms in call overhead alone. They compile on
# first use (LexicalIndex warms them when built), cached on disk only where NUMBA_CACHE_DIR names a
# folder (ssi.jit_cache): the install may be read-only.
@numba.njit(nogil=True, cache=CACHE)
def _add_postings(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    words: np.ndarray,
    weights: np.ndarray,
    first: int,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled (its callers are tested)
    """out[first + row] += weights[j] · X[row, words[j]] for every posting of every listed word."""
    for j in range(words.shape[0]):
        weight = weights[j]
        for p in range(indptr[words[j]], indptr[words[j] + 1]):
            out[first + indices[p]] += weight * data[p]


@numba.njit(nogil=True, cache=CACHE)
def _add_looked_up(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    words: np.ndarray,
    weights: np.ndarray,
    positive: np.ndarray,
    local_rows: np.ndarray,
    targets: np.ndarray,
    lexical: np.ndarray,
    upper: np.ndarray,
) -> None:  # pragma: no cover - compiled (its callers are tested)
    """For each of the sorted `local_rows` found in word j's posting list: lexical[target] += weights[j] · value
    and upper[target] += positive[j] · value (a binary search per row and word)."""
    for j in range(words.shape[0]):
        start, end = indptr[words[j]], indptr[words[j] + 1]
        if end == start:
            continue
        postings = indices[start:end]
        at = np.searchsorted(postings, local_rows)
        for r in range(local_rows.shape[0]):
            a = at[r]
            if a < postings.shape[0] and postings[a] == local_rows[r]:
                value = np.float64(data[start + a])
                lexical[targets[r]] += weights[j] * value
                upper[targets[r]] += positive[j] * value


@numba.njit(nogil=True, cache=CACHE)
def _looked_up_values(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    words: np.ndarray,
    local_rows: np.ndarray,
    targets: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled (its callers are tested)
    """out[targets[r], j] = X[local_rows[r], words[j]] for each of the sorted `local_rows` found in word j's
    posting list (a binary search per row and word), the document values themselves, word by word."""
    for j in range(words.shape[0]):
        start, end = indptr[words[j]], indptr[words[j] + 1]
        if end == start:
            continue
        postings = indices[start:end]
        at = np.searchsorted(postings, local_rows)
        for r in range(local_rows.shape[0]):
            a = at[r]
            if a < postings.shape[0] and postings[a] == local_rows[r]:
                out[targets[r], j] = data[start + a]


_WARMED: set[tuple[object, ...]] = set()  # the array types the kernels were compiled for in this process


def _warm_kernels(matrix: sp.csc_matrix) -> None:
    """Compile the kernels for this matrix's array types once per process, before a request needs them. A base
    mapped from a snapshot is read-only and a delta is not: numba compiles each apart (~100 ms, which the first
    page matched after a start paid when only the base was warmed)."""
    arrays = (matrix.indptr, matrix.indices, matrix.data)
    kind = tuple((a.dtype.str, a.flags.writeable) for a in arrays)
    if kind in _WARMED or matrix.shape[1] == 0:
        return
    words = np.zeros(1, dtype=np.int64)
    weights = np.zeros(1, dtype=np.float64)
    _add_postings(matrix.indptr, matrix.indices, matrix.data, words, weights, 0, np.zeros(matrix.shape[0]))
    rows = np.zeros(0, dtype=matrix.indices.dtype)
    nothing = np.zeros(0, dtype=np.float64)
    _add_looked_up(
        matrix.indptr,
        matrix.indices,
        matrix.data,
        words,
        weights,
        weights,
        rows,
        rows.astype(np.int64),
        nothing,
        nothing,
    )
    _looked_up_values(
        matrix.indptr, matrix.indices, matrix.data, words, rows, rows.astype(np.int64), np.zeros((0, 1), np.float64)
    )
    _WARMED.add(kind)


def _empty() -> Scored:
    nothing = np.zeros(0, dtype=np.float64)
    return np.zeros(0, dtype=np.int64), nothing, nothing


class LexicalIndex:
    def __init__(
        self,
        weights: np.ndarray,
        base: sp.spmatrix,
        delta: sp.spmatrix | None = None,
        base_bounds: _BaseBounds | None = None,
    ) -> None:
        self.weights = np.asarray(weights, dtype=np.float32)
        self.n_words = self.weights.shape[0]
        self.nonnegative = bool((self.weights >= 0).all())
        self._base = _csc(base, self.n_words)
        self._delta = _csc(delta if delta is not None else sp.csc_matrix((0, self.n_words)), self.n_words)
        self._bounds = _BaseBounds.of(self._base) if base_bounds is None else base_bounds
        _warm_kernels(self._base)
        _warm_kernels(self._delta)
        self.column_max = np.maximum(self._bounds.column_max, _column_max(self._delta))
        self.row_norm_max = max(self._bounds.row_norm_max, _row_norm_max(self._delta))
        self.head = self._bounds.head
        self.cut = self._bounds.cut  # bounds the base postings outside the head (the delta has no head)

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
        return LexicalIndex(self.weights, self._base, delta, self._bounds)

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

    def document_frequency(self, words: np.ndarray, live: np.ndarray | None = None) -> np.ndarray:
        """int64: how many rows hold each of `words`; given `live` (a bool per row), how many live rows do. Without
        it a word's count is its posting lists' length; with it, a pass over its postings (the collection's live
        idf, ssi.open_vocab, asks this only where some rows are dead)."""
        words = np.asarray(words, dtype=np.int64)
        out = np.zeros(words.shape[0], dtype=np.int64)
        for matrix, first in self.parts():
            starts = matrix.indptr[words].astype(np.int64)
            lengths = matrix.indptr[words + 1].astype(np.int64) - starts
            if live is None:
                out += lengths
                continue
            total = int(lengths.sum())
            if total == 0:
                continue
            # every word's postings in one gather: position p of word j is starts[j] + (p − its first position)
            firsts = np.cumsum(lengths) - lengths
            positions = np.arange(total, dtype=np.int64) + np.repeat(starts - firsts, lengths)
            alive = live[matrix.indices[positions].astype(np.int64) + first]
            owner = np.repeat(np.arange(words.shape[0]), lengths)
            out += np.bincount(owner[alive], minlength=words.shape[0])
        return out

    def query(self, word_ids: np.ndarray, values: np.ndarray) -> LexicalQuery:
        return LexicalQuery(self, word_ids, values)

    def scores(self, word_ids: np.ndarray, values: np.ndarray) -> Scored:
        """(rows, l, l⁺) for every row sharing a word with q (no pruning)."""
        return self.query(word_ids, values).above(-np.inf)


@dataclass(frozen=True, slots=True)
class _Scan:
    """Posting lists laid end to end: per posting its row, its exact w_i q_i d_i and w_i⁺ q_i d_i (0 for a
    head posting of a low word, whose word is looked up later), and what it adds to the bound only."""

    rows: np.ndarray
    exact: np.ndarray
    exact_upper: np.ndarray | None  # None: equal to `exact` (every weight ≥ 0)
    bound_only: np.ndarray | None  # None: no head postings


class LexicalQuery:
    """The diagonal term of one query q = (word_ids, values) against one LexicalIndex."""

    def __init__(self, index: LexicalIndex, word_ids: np.ndarray, values: np.ndarray) -> None:
        self.words = np.asarray(word_ids, dtype=np.int64)
        q = np.asarray(values, dtype=np.float64)
        self.weight = index.weights[self.words].astype(np.float64) * q  # w_i q_i
        self.positive = np.maximum(self.weight, 0.0)
        self.reach = self.weight * index.column_max[self.words]  # what word i adds to the row holding most of it
        self.bound = self.positive * index.column_max[self.words]  # m_i: the most word i can add
        self.tail_bound = self.positive * index.cut[self.words]  # what word i adds outside its head
        # The most l⁺ can be for any row: Σ m_i, and (Cauchy–Schwarz) max_i w_i⁺ · ‖q‖ · max_d ‖d‖,
        # which is max w⁺ for unit tf-idf vectors; service.rerank prunes the pool with it.
        w_max = float(np.maximum(index.weights[self.words], 0.0).max(initial=0.0))
        cauchy = w_max * float(np.linalg.norm(q)) * index.row_norm_max
        self.max_gain = float(min(self.bound.sum(), cauchy))
        self.nonnegative = index.nonnegative
        self.n_rows = index.rows
        self._parts = index.parts()
        self._head = index.head
        # The first scan of posting lists, reused when the caller raises the threshold (a wider pool).
        self._scanned: tuple[float, np.ndarray, tuple[np.ndarray, ...]] | None = None
        self._common: tuple[np.ndarray | None, int] | None = None  # `_common_words`, once asked

    def for_rows(
        self, rows: np.ndarray, words: np.ndarray | None = None, base_only: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact (l, l⁺) of the given rows (any order), over all query words or the given positions
        (`base_only`: their postings in the base matrix alone)."""
        rows = np.asarray(rows, dtype=np.int64)
        lexical = np.zeros(rows.shape[0], dtype=np.float64)
        upper = np.zeros(rows.shape[0], dtype=np.float64)
        if rows.shape[0] == 0:
            return lexical, upper
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        positions = np.arange(self.words.shape[0]) if words is None else np.asarray(words, dtype=np.int64)
        word_ids, weights, positive = self.words[positions], self.weight[positions], self.positive[positions]
        for matrix, first in self._parts[:1] if base_only else self._parts:
            lo, hi = np.searchsorted(sorted_rows, [first, first + matrix.shape[0]])
            if hi <= lo:
                continue
            # Same dtype as the postings, or each search would convert every long posting list.
            local = (sorted_rows[lo:hi] - first).astype(matrix.indices.dtype)
            _add_looked_up(
                matrix.indptr, matrix.indices, matrix.data, word_ids, weights, positive, local, order[lo:hi], lexical,
                upper,
            )  # fmt: skip
        return lexical, upper

    def values_of(self, rows: np.ndarray) -> np.ndarray:
        """[rows, query words] float64: each given row's stored value d_i of each query word (0 where the row
        lacks the word), read from the posting lists: what a row shares with the query, word by word,
        without the row's text."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.zeros((rows.shape[0], self.words.shape[0]), dtype=np.float64)
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        for matrix, first in self._parts:
            lo, hi = np.searchsorted(sorted_rows, [first, first + matrix.shape[0]])
            if hi > lo:
                local = (sorted_rows[lo:hi] - first).astype(matrix.indices.dtype)
                _looked_up_values(matrix.indptr, matrix.indices, matrix.data, self.words, local, order[lo:hi], out)
        return out

    def lookup_cost_ns(self, rows: int) -> float:
        """About what `for_rows` costs for `rows` rows over every query word."""
        return float(rows) * self.words.shape[0] * SEARCH_NS

    def above(self, threshold: float) -> Scored:
        """Every row whose l⁺ can exceed `threshold`, with its exact l and l⁺ (rows sorted; may hold others).

        Rows sharing no word with q (l⁺ = 0) are never listed, so callers use it with threshold ≥ 0
        (or -inf, which lists every row sharing a word). A call with a higher threshold than an
        earlier one reuses that call's scan: its low words' bound still bounds what it skipped.
        """
        if self._scanned is not None and threshold >= self._scanned[0]:
            _, low, (rows, lexical, upper, heads) = self._scanned
        else:
            low = self._low_words(threshold)
            high = np.setdiff1d(np.arange(self.words.shape[0]), low)
            if int(self._list_lengths()[high].sum()) * DENSE_SHARE < self.n_rows:
                rows, lexical, upper, heads = self._summed(self._postings(high, low))
            else:  # the lists to scan cover much of the collection: one dense pass over every list costs about
                # as much as theirs alone, and leaves nothing to look up
                low = low[:0]
                rows, lexical, upper = self._dense_above(threshold)
                heads = np.zeros(rows.shape[0], dtype=np.float64)
            self._scanned = (threshold, low, (rows, lexical, upper, heads))
        # Each low word's exact part, largest bound first, for the rows whose l⁺ can still exceed θ: at most
        # what is known (low words' heads included) + the bounds of the low words not yet looked up.
        for done in range(low.shape[0] + 1):
            if rows.shape[0] and np.isfinite(threshold):
                keep = upper + heads + float(self.tail_bound[low[done:]].sum()) > threshold
                rows, lexical, upper, heads = rows[keep], lexical[keep], upper[keep], heads[keep]
            if done == low.shape[0] or rows.shape[0] == 0:
                break
            word_lexical, word_upper = self._looked_up(rows, low[done])
            lexical, upper = lexical + word_lexical, upper + word_upper
        return rows, lexical, upper

    def _low_words(self, threshold: float) -> np.ndarray:
        """Positions of the query words whose lists a scan for `threshold` can skip (low words, largest tail bound
        first): Σ of their tail bounds stays within θ; the words that skip the most postings per unit of bound
        are taken first."""
        if not np.isfinite(threshold):
            return np.zeros(0, dtype=np.int64)
        ratio = self._list_lengths() / np.maximum(self.tail_bound, 1e-300)
        low: list[int] = []
        total = 0.0
        for j in np.argsort(-ratio, kind="stable").tolist():
            if total + self.tail_bound[j] <= threshold:
                low.append(j)
                total += float(self.tail_bound[j])
        low_array = np.asarray(low, dtype=np.int64)
        return low_array[np.argsort(-self.tail_bound[low_array], kind="stable")]

    def skipped_words(self) -> np.ndarray:
        """The word ids whose posting lists the last scan left out (their heads aside): they were looked up
        for the rows that passed, nothing else."""
        return self.words[self._scanned[1]] if self._scanned is not None else self.words[:0]

    def _looked_up(self, rows: np.ndarray, position: int) -> tuple[np.ndarray, np.ndarray]:
        """(l, l⁺) of `rows` over the base postings of the query word at `position` (its delta postings were
        scanned): a binary search per row when the rows are few, else one dense pass over its posting list,
        whichever costs less."""
        base = self._parts[0][0]
        word = self.words[position]
        postings = int(base.indptr[word + 1] - base.indptr[word])
        positions = np.array([position])
        if rows.shape[0] * SEARCH_NS <= postings * POSTING_NS + self.n_rows * ROW_NS:
            return self.for_rows(rows, positions, base_only=True)
        lexical, upper = self._dense(positions, base_only=True)
        return lexical[rows], upper[rows]

    def _postings(self, full: np.ndarray, headed: np.ndarray, base_only: bool = False) -> _Scan:
        """The posting lists of the query words at `full` in every part (or the base alone), and of those at
        `headed` their base heads (to the bound only) and their whole delta lists (exactly)."""
        rows: list[np.ndarray] = []
        exact: list[np.ndarray] = []
        exact_upper: list[np.ndarray] = []
        bound_only: list[np.ndarray] = []
        parts = self._parts[:1] if base_only else self._parts
        lists = [(matrix, first, full, False) for matrix, first in parts]
        if headed.shape[0]:
            lists += [(self._head, 0, headed, True), (*self._parts[1], headed, False)]
        for matrix, first, positions, is_head in lists:
            indptr, indices, data = matrix.indptr, matrix.indices, matrix.data
            for j in positions.tolist():
                word = self.words[j]
                start, end = indptr[word], indptr[word + 1]
                if end == start:
                    continue
                # float32 and the postings' own int32 ids: these arrays can hold most of the collection.
                values = data[start:end]
                rows.append(indices[start:end] + np.int32(first) if first else indices[start:end])
                zeros = np.zeros(values.shape[0], dtype=np.float32) if is_head or headed.shape[0] else None
                exact.append(zeros if is_head else values * np.float32(self.weight[j]))
                if not self.nonnegative:
                    exact_upper.append(zeros if is_head else values * np.float32(self.positive[j]))
                if headed.shape[0]:
                    bound_only.append(values * np.float32(self.positive[j]) if is_head else zeros)
        if not rows:
            nothing = np.zeros(0, dtype=np.float32)
            return _Scan(np.zeros(0, dtype=np.int32), nothing, None, None)
        return _Scan(
            rows=np.concatenate(rows),
            exact=np.concatenate(exact),
            exact_upper=np.concatenate(exact_upper) if exact_upper else None,
            bound_only=np.concatenate(bound_only) if bound_only else None,
        )

    def _summed(self, scan: _Scan) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(rows, l, l⁺, heads) summed per row over the scanned postings (heads: the low words' head postings,
        kept for the bound): the lists are each sorted by row, so a stable sort of them laid end to end
        merges runs (timsort)."""
        if scan.rows.shape[0] == 0:
            return (*_empty(), np.zeros(0, dtype=np.float64))
        order = np.argsort(scan.rows, kind="stable")
        ordered = scan.rows[order]
        starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))

        def total(values: np.ndarray) -> np.ndarray:
            return np.add.reduceat(values[order].astype(np.float64), starts)

        lexical = total(scan.exact)
        upper = lexical if scan.exact_upper is None else total(scan.exact_upper)
        heads = np.zeros(starts.shape[0], dtype=np.float64) if scan.bound_only is None else total(scan.bound_only)
        return ordered[starts].astype(np.int64), lexical, upper, heads

    def _list_lengths(self) -> np.ndarray:
        """Postings of each query word, base and delta together."""
        return sum(matrix.indptr[self.words + 1] - matrix.indptr[self.words] for matrix, _ in self._parts)

    def dense_cost_ns(self) -> float:
        """About what `everywhere` costs: one pass over every query word's posting list into an array of all rows."""
        return float(np.sum(self._list_lengths())) * POSTING_NS + self.n_rows * ROW_NS

    def everywhere(self) -> np.ndarray:
        """l of every row, float64 [rows] (0 where no query word occurs), from one dense pass over the query
        words' posting lists (l alone: with weights of both signs, `_dense` sums l⁺ in a second pass)."""
        return self._every_row_sum(self.words, self.weight, self._parts)

    def everywhere_but_common(self) -> RareSum:
        """l of every row over the query's rarer words, with a bound on what its common words (in at least
        COMMON_SHARE of the rows) add to any row: their long lists are read only for the rows the bound leaves
        (`RareSum.exact`). All words are summed where the common ones hold too few postings to be worth it."""
        is_common, common_postings = self._common_words()
        if is_common is None:
            return RareSum(self, self.everywhere())
        return RareSum(self, self.summed_over(np.flatnonzero(~is_common)), np.flatnonzero(is_common), common_postings)

    def every_row_cost_ns(self) -> float:
        """About what `everywhere_but_common` costs, with its common words looked up for COMMON_LOOKUP_ROWS rows."""
        is_common, common_postings = self._common_words()
        if is_common is None:
            return self.dense_cost_ns()
        summed = float(np.sum(self._list_lengths())) - common_postings
        lookups = COMMON_LOOKUP_ROWS * int(is_common.sum()) * SEARCH_NS
        return summed * POSTING_NS + self.n_rows * ROW_NS + lookups

    def _common_words(self) -> tuple[np.ndarray | None, int]:
        """(which query words are common, their postings), or (None, 0) where they are too few to leave out:
        asked when the path is chosen (`every_row_cost_ns`) and again when it is taken, so worked out once."""
        if self._common is None:
            lengths = self._list_lengths()
            is_common = lengths >= COMMON_SHARE * self.n_rows
            common_postings = int(lengths[is_common].sum())
            split = common_postings >= COMMON_POSTINGS_PER_ROW * self.n_rows
            self._common = (is_common, common_postings) if split else (None, 0)
        return self._common

    def summed_over(self, positions: np.ndarray) -> np.ndarray:
        """l of every row over the query words at `positions` alone, float64 [rows]."""
        return self._every_row_sum(self.words[positions], self.weight[positions], self._parts)

    def _every_row_sum(
        self, words: np.ndarray, weights: np.ndarray, parts: list[tuple[sp.csc_matrix, int]]
    ) -> np.ndarray:
        """Σ_j weights[j] · X[row, words[j]] for every row, float64 [rows], from the postings of `parts`."""
        out = np.zeros(self.n_rows, dtype=np.float64)
        for matrix, first in parts:
            _add_postings(matrix.indptr, matrix.indices, matrix.data, words, weights, first, out)
        return out

    def _dense(self, positions: np.ndarray | None = None, base_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(l, l⁺) of every row over the query words at `positions` (all by default), summed into arrays of all
        rows by one pass over their posting lists (the base's alone with `base_only`)."""
        chosen = np.arange(self.words.shape[0]) if positions is None else positions
        words = self.words[chosen]
        parts = self._parts[:1] if base_only else self._parts
        lexical = self._every_row_sum(words, self.weight[chosen], parts)
        if self.nonnegative:
            return lexical, lexical
        return lexical, self._every_row_sum(words, self.positive[chosen], parts)

    def _dense_above(self, threshold: float) -> Scored:
        """The rows sharing a word with q whose l⁺ exceeds `threshold`, from one dense pass."""
        lexical, upper = self._dense()
        if threshold >= 0:  # a row sharing no word has l⁺ = 0: not above
            hit = np.flatnonzero(upper > threshold)
        else:  # every row sharing a word: count each row's postings
            present = self._every_row_sum(self.words, np.ones(self.words.shape[0], dtype=np.float64), self._parts)
            hit = np.flatnonzero((present > 0) & (upper > threshold))
        return hit, lexical[hit], upper[hit]


class RareSum:
    """A query's l of every row over its rarer words (`summed`); its common words (positions `common`) add
    between `below` (≤ 0) and `above` (≥ 0) to any row's l: each word i at most w_i q_i · max_d X[d, i]
    (X ≥ 0), so a row's l lies in [summed + below, summed + above]."""

    def __init__(
        self, query: LexicalQuery, summed: np.ndarray, common: np.ndarray | None = None, common_postings: int = 0
    ) -> None:
        self._query = query
        self.summed = summed
        self.common = np.zeros(0, dtype=np.int64) if common is None else common
        self._common_postings = common_postings
        self.below = self.above = 0.0
        if self.common.shape[0]:
            reach = query.reach[self.common]
            self.below = float(np.minimum(reach, 0.0).sum())
            self.above = float(np.maximum(reach, 0.0).sum())

    @property
    def complete(self) -> bool:
        """Whether `summed` is l itself (no common word left out)."""
        return self.common.shape[0] == 0

    def exact(self, rows: np.ndarray) -> np.ndarray:
        """The exact l of `rows`: the common words looked up for those rows alone."""
        if self.complete:
            return self.summed[rows]
        return self.summed[rows] + self._query.for_rows(rows, self.common)[0]

    def lookups_pay(self, rows: int) -> bool:
        """Whether looking the common words up for `rows` rows costs less than summing their lists for every row."""
        lookups = float(rows) * self.common.shape[0] * SEARCH_NS
        return lookups <= self._common_postings * POSTING_NS + self._query.n_rows * ROW_NS

    def whole(self) -> np.ndarray:
        """l of every row, the common words' lists summed too."""
        if self.complete:
            return self.summed
        return self.summed + self._query.summed_over(self.common)
