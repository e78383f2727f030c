"""The filter an impression's list was shown under, over the corpus `ssi learn` ranks: which documents a replay of
that impression may rank (training.feedback.promote).

A filtered search's list is the top of the ranking among the documents matching its filter (the request's and its
read key's, ssi.traffic.shown_filter), so a candidate is judged on the same lists: ranked among the same documents.
The filter is evaluated with the service's own filter language over the corpus's `fields` (ssi.fields: the
types fixed by first use as the store fixes them, a field index, the bitmaps a filter reads), never a second
evaluator. A filter the corpus cannot answer (a field it does not have, a value of another type: a corpus without
the fields the service held) is a `ValueError`, and the replay leaves that impression out and counts it rather
than rank it among documents it was not shown among.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from ssi.fields.corpus import CorpusFields
from ssi.fields.errors import FieldError
from ssi.records import Document


class CorpusFilters:
    """Each filter's matching documents of a corpus, as a mask over the corpus's order (one per filter, cached)."""

    def __init__(self, documents: Sequence[Document]) -> None:
        self._documents = documents
        self._fields: CorpusFields | None = None
        self._masks: dict[str, np.ndarray] = {}

    def _built(self) -> CorpusFields:
        """The corpus's field index (ssi.fields.corpus), built on the first filter (a log without filters never
        builds it)."""
        if self._fields is None:
            try:
                self._fields = CorpusFields(self._documents)
            except FieldError as error:
                raise ValueError(f"the corpus's fields: {error}") from None
        return self._fields

    def mask(self, shown: str) -> np.ndarray:
        """The documents matching `shown` (a filter as the log keeps it: ssi.traffic.canonical_filter), True in
        corpus order; a `ValueError` naming the problem when the corpus cannot answer it (FieldError is one)."""
        found = self._masks.get(shown)
        if found is None:
            rows = self._built().rows(json.loads(shown))
            found = np.zeros(len(self._documents), dtype=bool)
            found[rows] = True
            self._masks[shown] = found
        return found
