"""The filter an impression's list was shown under, over the corpus `ssi learn` ranks: which documents a replay of
that impression may rank (training.feedback.promote).

A filtered search's list is the top of the ranking among the documents matching its filter (the request's and its
read key's, ssi.traffic.shown_filter), so a candidate is judged on the same lists: ranked among the same documents.
The filter is evaluated with the service's own filter language over the corpus's `fields` (service.fields: the
types fixed by first use as the store fixes them, a field index, the bitmaps a filter reads), never a second
evaluator. A filter the corpus cannot answer (a field it does not have, a value of another type: a corpus without
the fields the service held) is a `ValueError`, and the replay leaves that impression out and counts it rather
than rank it among documents it was not shown among.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from service.errors import InvalidInput
from service.fields.filters import FilterBounds, matching_rows, parse_filter
from service.fields.index import FieldIndex
from service.fields.schema import admit
from ssi.records import Document

# The service bounded each filter when it was asked; here only against a damaged log.
REPLAY_BOUNDS = FilterBounds(max_clauses=10_000, max_terms=1_000_000, max_depth=64)


class CorpusFilters:
    """Each filter's matching documents of a corpus, as a mask over the corpus's order (one per filter, cached)."""

    def __init__(self, documents: Sequence[Document]) -> None:
        self._documents = documents
        self._index: FieldIndex | None = None
        self._masks: dict[str, np.ndarray] = {}

    def _built(self) -> FieldIndex:
        """The corpus's field index, built on the first filter (a log without filters never builds it)."""
        if self._index is None:
            try:
                types, stored = admit({}, ((d.id, d.fields) for d in self._documents))
            except InvalidInput as error:
                raise ValueError(f"the corpus's fields: {error}") from None
            self._index = FieldIndex.build(types, ((row, f) for row, f in enumerate(stored) if f))
        return self._index

    def mask(self, shown: str) -> np.ndarray:
        """The documents matching `shown` (a filter as the log keeps it: ssi.traffic.canonical_filter), True in
        corpus order; a `ValueError` naming the problem when the corpus cannot answer it."""
        found = self._masks.get(shown)
        if found is None:
            index = self._built()
            try:
                clause = parse_filter(json.loads(shown), dict(index.types), REPLAY_BOUNDS)
            except InvalidInput as error:
                raise ValueError(str(error)) from None
            found = np.zeros(len(self._documents), dtype=bool)
            found[matching_rows(clause, index, np.ones(len(self._documents), dtype=bool))] = True
            self._masks[shown] = found
        return found
