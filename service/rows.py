"""The row numbering shared by the FAISS index, the lexical matrix and the cached document embeddings.

Every version of a document gets a new row at the end; replacing or deleting a document only
marks its old row dead. Rows never move, so a row number means the same thing in the index, in
the tf-idf matrix, in the embeddings and in a snapshot, and a search holding a view of the arrays
sees stable data while a writer appends. Dead rows are dropped by compaction, which renumbers.
"""

from __future__ import annotations

import mmap

import numpy as np

from service.quantized import Codes, l1_norms, quantize


class EmbeddingRows:
    """The embedding of every row (what the index stores; float32, C order), in two parts.

    The rows it started with stay in the array it was given, uncopied: a fresh build's, or a snapshot's
    embeddings.npy mapped read-only, whose pages are the page cache's and so shared by every worker
    process of a server that loaded the same snapshot (service.workers) instead of one copy each. Rows
    appended later go to a private array with room to grow. Rows never change once filled, so the
    arrays `parts` returns stay valid while a writer appends (growing copies the tail into a new array).

    Each row also has int8 codes (service.quantized, a quarter of the bytes), for the scan of a few queries
    (`coded_parts`): the first rows' given with them (a snapshot's, mapped and shared like the embeddings)
    or computed, the appended rows' computed as they come.
    """

    def __init__(self, initial: np.ndarray, dim: int, codes: Codes | None = None) -> None:
        initial = np.asarray(initial).reshape(-1, dim)
        if initial.dtype != np.float32 or not initial.flags.c_contiguous:
            initial = np.ascontiguousarray(initial, dtype=np.float32)
        self.dim = dim
        self._base = initial
        if codes is not None and (codes.codes.shape != initial.shape or codes.radius.shape != initial.shape[:1]):
            raise ValueError(f"codes of {codes.codes.shape} rows given for embeddings of {initial.shape}")
        self._base_codes = quantize(initial) if codes is None else codes
        self._tail = np.empty((1024, dim), dtype=np.float32)
        self._tail_codes = _empty_codes(1024, dim)
        self._tail_rows = 0
        # Every row's error radius and ‖ẽ‖₁ in arrays of every row (the top-k pass reads them by row), grown
        # like the tail.
        self._radius = np.empty(initial.shape[0] + 1024, dtype=np.float32)
        self._radius[: initial.shape[0]] = self._base_codes.radius
        self._l1 = np.empty(initial.shape[0] + 1024, dtype=np.float32)
        self._l1[: initial.shape[0]] = l1_norms(self._base_codes)

    @property
    def rows(self) -> int:
        return self._base.shape[0] + self._tail_rows

    @property
    def shared(self) -> bool:
        """Whether the first rows are a file mapping (a snapshot's), not memory of this process's own."""
        owner: object = self._base
        while owner is not None:
            if isinstance(owner, (np.memmap, mmap.mmap)):
                return True
            owner = getattr(owner, "base", None)
        return False

    def parts(self) -> list[tuple[np.ndarray, int]]:
        """The filled rows as (array, first row) pieces, in row order, empty ones left out."""
        pieces = [(self._base, 0)] if self._base.shape[0] else []
        if self._tail_rows:
            pieces.append((self._tail[: self._tail_rows], self._base.shape[0]))
        return pieces

    def coded_parts(self) -> list[tuple[Codes, int]]:
        """`parts` as their int8 codes (service.quantized), the same pieces in the same order."""
        pieces = [(self._base_codes, 0)] if self._base.shape[0] else []
        if self._tail_rows:
            n = self._tail_rows
            tail = self._tail_codes
            pieces.append((Codes(tail.codes[:n], tail.scales[:n], tail.radius[:n]), self._base.shape[0]))
        return pieces

    def radius(self) -> np.ndarray:
        """Each filled row's error radius (service.quantized): its int8 score is within ‖q‖₁ × this of q·e."""
        return self._radius[: self.rows]

    def l1(self) -> np.ndarray:
        """Each filled row's ‖ẽ‖₁ (service.quantized.l1_norms), for the bound of quantized queries."""
        return self._l1[: self.rows]

    @property
    def base_codes(self) -> Codes:
        """The codes of the rows it started with, which never change (service.int8_gemm packs them once)."""
        return self._base_codes

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The embeddings of `rows` (a new array, one row each)."""
        rows = np.asarray(rows, dtype=np.int64)
        first_tail = self._base.shape[0]
        if not self._tail_rows or rows.shape[0] == 0 or int(rows.max()) < first_tail:
            return self._base[rows]
        out = np.empty((rows.shape[0], self.dim), dtype=np.float32)
        in_base = rows < first_tail
        out[in_base] = self._base[rows[in_base]]
        out[~in_base] = self._tail[rows[~in_base] - first_tail]
        return out

    def whole(self) -> np.ndarray:
        """Every filled row as one array: the first part itself when nothing was appended, else a copy."""
        pieces = self.parts()
        if len(pieces) == 1:
            return pieces[0][0]
        if not pieces:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate([piece for piece, _ in pieces])

    def append(self, block: np.ndarray) -> int:
        """Append rows; returns the first new row. Growing copies the tail into a new array (old ones stay valid)."""
        block = np.asarray(block, dtype=np.float32).reshape(-1, self.dim)
        first = self.rows
        needed = self._tail_rows + block.shape[0]
        if needed > self._tail.shape[0]:
            size = max(needed, 2 * self._tail.shape[0])
            grown = np.empty((size, self.dim), dtype=np.float32)
            grown[: self._tail_rows] = self._tail[: self._tail_rows]
            grown_codes = _empty_codes(size, self.dim)
            for mine, theirs in zip(_fields(grown_codes), _fields(self._tail_codes), strict=True):
                mine[: self._tail_rows] = theirs[: self._tail_rows]
            self._tail, self._tail_codes = grown, grown_codes
        if first + block.shape[0] > self._radius.shape[0]:
            size = max(first + block.shape[0], 2 * self._radius.shape[0])
            self._radius, self._l1 = (_grown(array, first, size) for array in (self._radius, self._l1))
        coded = quantize(block)
        self._tail[self._tail_rows : needed] = block
        for mine, theirs in zip(_fields(self._tail_codes), _fields(coded), strict=True):
            mine[self._tail_rows : needed] = theirs
        self._radius[first : first + block.shape[0]] = coded.radius
        self._l1[first : first + block.shape[0]] = l1_norms(coded)
        self._tail_rows = needed
        return first


def _grown(array: np.ndarray, filled: int, size: int) -> np.ndarray:
    grown = np.empty(size, dtype=array.dtype)
    grown[:filled] = array[:filled]
    return grown


def _empty_codes(rows: int, dim: int) -> Codes:
    return Codes(
        np.empty((rows, dim), dtype=np.int8), np.empty(rows, dtype=np.float32), np.empty(rows, dtype=np.float32)
    )


def _fields(codes: Codes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return codes.codes, codes.scales, codes.radius


class RowTable:
    """Which document each row holds, which rows are live, and the live bitmap FAISS filters with."""

    def __init__(self, doc_ids: list[str], live: np.ndarray | None = None) -> None:
        self.doc_ids = list(doc_ids)
        n = len(self.doc_ids)
        self._live = np.zeros(max(1024, n + n // 4), dtype=bool)
        self._live[:n] = True if live is None else np.asarray(live, dtype=bool)[:n]
        self.row_of: dict[str, int] = {}
        for row in np.flatnonzero(self._live[:n]).tolist():
            doc_id = self.doc_ids[row]
            if doc_id in self.row_of:
                raise ValueError(f"document id {doc_id!r} is live in two rows")
            self.row_of[doc_id] = row
        self._bits = np.packbits(self._live, bitorder="little")

    @property
    def rows(self) -> int:
        return len(self.doc_ids)

    @property
    def n_live(self) -> int:
        return len(self.row_of)

    @property
    def n_dead(self) -> int:
        return self.rows - self.n_live

    @property
    def live(self) -> np.ndarray:
        return self._live[: self.rows]

    def live_bits(self) -> np.ndarray | None:
        """The FAISS selector bitmap, or None when every row is live (searching without a filter is faster)."""
        return self._bits if self.n_dead else None

    def _set(self, row: int, value: bool) -> None:
        self._live[row] = value
        byte, bit = divmod(row, 8)
        if value:
            self._bits[byte] |= np.uint8(1 << bit)
        else:
            self._bits[byte] &= np.uint8(~(1 << bit) & 0xFF)

    def kill(self, doc_id: str) -> int | None:
        """Mark the document's row dead; returns the row, or None if it had none."""
        row = self.row_of.pop(doc_id, None)
        if row is not None:
            self._set(row, False)
        return row

    def append(self, doc_ids: list[str]) -> int:
        """New live rows for `doc_ids` (each must be unique and not live); returns the first row."""
        first = self.rows
        needed = first + len(doc_ids)
        if needed > self._live.shape[0]:
            grown = np.zeros(max(needed, 2 * self._live.shape[0]), dtype=bool)
            grown[:first] = self._live[:first]
            self._live = grown
            self._bits = np.packbits(self._live, bitorder="little")
        for offset, doc_id in enumerate(doc_ids):
            if doc_id in self.row_of:
                raise ValueError(f"document id {doc_id!r} is already live")
            self.doc_ids.append(doc_id)
            self.row_of[doc_id] = first + offset
            self._set(first + offset, True)
        return first
