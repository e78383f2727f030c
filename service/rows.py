"""The row numbering shared by the FAISS index, the lexical matrix and the cached document embeddings.

Every version of a document gets a new row at the end; replacing or deleting a document only
marks its old row dead. Rows never move, so a row number means the same thing in the index, in
the tf-idf matrix, in the embeddings and in a snapshot, and a search holding a view of the arrays
sees stable data while a writer appends. Dead rows are dropped by compaction, which renumbers.
"""

from __future__ import annotations

import numpy as np


class EmbeddingRows:
    """The embedding of every row (what the index stores; float32, C order), with room to append cheaply."""

    def __init__(self, initial: np.ndarray, dim: int) -> None:
        initial = np.asarray(initial, dtype=np.float32).reshape(-1, dim)
        self.dim = dim
        self._rows = initial.shape[0]
        self._data = np.empty((max(1024, self._rows + self._rows // 4), dim), dtype=np.float32)
        self._data[: self._rows] = initial

    @property
    def rows(self) -> int:
        return self._rows

    def view(self) -> np.ndarray:
        """The filled rows. Rows already filled are never written again, so the view stays valid."""
        return self._data[: self._rows]

    def append(self, block: np.ndarray) -> int:
        """Append rows; returns the first new row. Growing copies into a new array (old views stay valid)."""
        block = np.asarray(block, dtype=np.float32).reshape(-1, self.dim)
        first = self._rows
        needed = first + block.shape[0]
        if needed > self._data.shape[0]:
            grown = np.empty((max(needed, 2 * self._data.shape[0]), self.dim), dtype=np.float32)
            grown[:first] = self._data[:first]
            self._data = grown
        self._data[first:needed] = block
        self._rows = needed
        return first


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
