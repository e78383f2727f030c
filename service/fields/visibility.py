"""Per-key visibility: a read key may carry a mandatory filter (SSI_READ_KEYS, SSI_READ_KEYS_FILE: key → filter), and
every read made with it sees only the documents inside it (docs/operate/keys-and-bounds.md#per-key-visibility).

The key's filter is ANDed to the request's own at the one place a request's filter becomes a clause
(`service.collection.Collection.where`), so the index, the lexical candidates, the count, the facets and the reads by
id all obey it; a route only hands the request's `Visibility` on. A document outside is answered as absent (404).

A key's filter is written by the operator, checked for its form when the settings load, and read against each
collection's fields when a request comes: one that names a field the collection does not have (yet), or gives a value
of another type than the field's, matches no document (`NOTHING`): the key sees nothing there until the field exists,
never everything.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ssi.fields.errors import FieldError
from ssi.fields.filters import WIDE_BOUNDS, Bool, Clause, Term, evaluate, parse_filter
from ssi.fields.index import FieldIndex

# A key's filter is the operator's, not a client's: bounded only against mistakes, far above the request bounds.
KEY_FILTER_BOUNDS = WIDE_BOUNDS
# A term of no values: matches no document (ssi.fields.filters.evaluate unions no bitmap).
NOTHING: Clause = Term("", ())


@dataclass(frozen=True, slots=True)
class Visibility:
    """What a request's key may see: every document (`filter` None: the read, write and admin keys, or no key), or
    those matching its key's mandatory filter (the JSON as configured)."""

    filter: Any = None
    key_id: str | None = None  # names the filtered read key in the traffic log (`read_key_id`), never the key

    @property
    def restricted(self) -> bool:
        return self.filter is not None

    def clause(self, types: dict[str, str]) -> Clause | None:
        """The key's filter over a collection's field `types`; NOTHING where it names a field the collection lacks
        or a value of another type; None for an unrestricted key."""
        if self.filter is None:
            return None
        try:
            return parse_filter(self.filter, types, KEY_FILTER_BOUNDS)
        except FieldError:
            return NOTHING

    def restrict(self, clause: Clause | None, types: dict[str, str]) -> Clause | None:
        """`clause` (a request's own filter, None: every document) ANDed with the key's: what the request may see."""
        own = self.clause(types)
        if own is None:
            return clause
        return own if clause is None else Bool("and", (own, clause))

    def admitter(self, types: dict[str, str]) -> Callable[[Mapping[str, Any] | None], bool]:
        """Whether a document's own fields (as stored) are inside the key's filter: checked on what a read is about
        to show, so that a write moving a document out of the filter between a ranking (or the index's view of it)
        and the read of its text never shows the new text to the old key."""
        own = self.clause(types)
        if own is None:
            return lambda _: True
        return lambda fields: admits(own, types, fields)


def read_key_id(key: str) -> str:
    """A filtered read key's name in the traffic log (service.events): 16 hex digits of a SHA-256 of it, the same
    across restarts and workers so a key's impressions group, and no use to anyone who has only the log (a key is
    at least 16 characters: SSI_READ_KEYS)."""
    return hashlib.sha256(b"ssi read key\x00" + key.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def admits(clause: Clause, types: dict[str, str], fields: Mapping[str, Any] | None) -> bool:
    """Whether one document's `fields` match `clause`: the clause evaluated over an index of that document alone,
    the same evaluation as over the collection's (fields the `types` do not know yet match nothing)."""
    known = {name: value for name, value in (fields or {}).items() if name in types}
    return 0 in evaluate(clause, FieldIndex.build(types, [(0, known)]), 1)


EVERYTHING = Visibility()


__all__ = ["EVERYTHING", "NOTHING", "Visibility"]
