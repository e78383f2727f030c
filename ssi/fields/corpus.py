"""The fields of a corpus ranked in process (`ssi.load`, `ssi rank`, `ssi eval`): checked and indexed once, so that
a filter gives the rows its query may rank, as the service's index does (the same types, index and filter language:
ssi.fields), and a filtered ranking is the exact top k among those rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ssi.fields.filters import WIDE_BOUNDS, FilterBounds, matching_rows, parse_filter
from ssi.fields.index import FieldIndex
from ssi.fields.schema import admit, check_shape
from ssi.records import Document


class CorpusFields:
    """Every document's fields by row (its position in the corpus), under the declared types and those fixed by the
    first document using a name, as a collection fixes them. A value of another type is a `FieldTypeMismatch`
    naming the document, the field and both types; a malformed one a `FieldError`."""

    def __init__(self, documents: Sequence[Document], declared: Mapping[str, str] | None = None) -> None:
        shaped = (
            (doc.id, check_shape(doc.fields, f"document {doc.id[:80]!r}: fields") if doc.fields else None)
            for doc in documents
        )
        added, stored = admit(dict(declared or {}), shaped)
        self.types: dict[str, str] = {**dict(declared or {}), **added}
        self.index = FieldIndex.build(self.types, ((row, f) for row, f in enumerate(stored) if f))
        self.live = np.ones(len(stored), dtype=bool)

    def rows(self, node: Any, bounds: FilterBounds = WIDE_BOUNDS) -> np.ndarray:
        """The rows (sorted, int64) of the documents matching the filter `node` (its JSON); a `FieldError` naming the
        problem (an unknown field, a value of another type, a malformed clause)."""
        return matching_rows(parse_filter(node, self.types, bounds), self.index, self.live)


def top_k_among(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of `rows` for one query's `scores` over every document: (rows, scores), score descending and ties
    by row, as an unfiltered ranking orders them (`rows` sorted); fewer when fewer rows are given."""
    if rows.shape[0] == 0 or k < 1:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=scores.dtype)
    among = scores[rows]
    k = min(k, rows.shape[0])
    best = np.argpartition(-among, k - 1)[:k] if k < rows.shape[0] else np.arange(rows.shape[0])
    # Score descending, then position among the sorted rows (so by row) ascending; the partition keeps every k-th.
    kth = among[best].min()
    candidates = np.flatnonzero(among >= kth)
    order = candidates[np.lexsort((candidates, -among[candidates]))][:k]
    return rows[order], among[order]
