"""The fields of a state's rows, indexed in memory: what a filter or a facet reads instead of the documents.

Rows are the state's (service.rows): a keyword, keyword-list or boolean value holds a roaring bitmap of the rows
that have it (pyroaring: compressed, with fast and/or/andnot and intersection counts, which a facet needs once per
value); an integer, float or date field holds its (value, row) pairs sorted by value, so a range is two binary
searches; every field holds the bitmap of the rows that have it (`exists`). Appended rows go to a small unsorted
tail that is sorted in when it grows (like the lexical index's merge). A dead row (replaced or deleted document)
stays in the bitmaps and arrays and is taken out by `dead`; compaction renumbers the rows (`remapped`), and a
state opened from a snapshot builds the index from the store (service.state_builder.attach_fields).

It is changed only under the state's write lock (service.writes) and read under its read lock.
"""

from __future__ import annotations

import array
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from pyroaring import BitMap

from ssi.fields.schema import KEYWORD_TYPES, parse_date

# Appended (value, row) pairs of an ordered field kept unsorted until there are this many.
TAIL_ROWS = 4096
# An ordered field's sorted pairs, cut into runs of this many, each run's rows a bitmap: a range is the union of
# the runs it covers plus the rows of the two it cuts. Over 1,000,000 rows, half of them in range: 0.8 ms for the
# union against 17 ms for a bitmap of the rows themselves (pyroaring inserts unsorted rows one at a time); the
# runs cost about 2 bytes a row.
BUCKET_ROWS = 4096


def bitmap_of(rows: np.ndarray) -> BitMap:
    """A bitmap of `rows`, through an `array` buffer (pyroaring reads it whole; from numpy it iterates: 500k rows
    took 47 ms against 3 ms)."""
    buffer = array.array("I")
    buffer.frombytes(np.ascontiguousarray(rows, dtype=np.uint32).tobytes())
    bits = BitMap()
    bits.update(buffer)
    return bits


class OrderedColumn:
    """An integer, float or date field's values by row: sorted pairs, plus an unsorted tail of appended ones."""

    def __init__(self, dtype: type, values: np.ndarray | None = None, rows: np.ndarray | None = None) -> None:
        self.dtype = dtype
        self.values = np.zeros(0, dtype=dtype) if values is None else values
        self.rows = np.zeros(0, dtype=np.int64) if rows is None else rows
        self._tail: list[tuple[Any, int]] = []
        self._buckets: list[BitMap] | None = None  # the runs' bitmaps (BUCKET_ROWS), made on first use

    def add(self, row: int, value: float | int) -> None:
        self._tail.append((value, row))
        if len(self._tail) >= TAIL_ROWS:
            self.merge()

    def merge(self) -> None:
        """Sort the tail in (under the state's write lock, or before the column is shared)."""
        if self._tail:
            self.values, self.rows = self.sorted_pairs()
            self._tail, self._buckets = [], None

    def sorted_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(values, rows) of every pair, tail included, sorted by value; the column itself is left as it is."""
        if not self._tail:
            return self.values, self.rows
        values = np.concatenate([self.values, np.asarray([v for v, _ in self._tail], dtype=self.dtype)])
        rows = np.concatenate([self.rows, np.asarray([r for _, r in self._tail], dtype=np.int64)])
        order = np.argsort(values, kind="stable")
        return values[order], rows[order]

    def between(self, low: float | None, low_open: bool, high: float | None, high_open: bool) -> BitMap:
        """Rows whose value lies in the range (None: unbounded on that side; open: the end excluded): the runs it
        covers whole, as bitmaps (BUCKET_ROWS), and the rest of its rows."""
        start = 0 if low is None else int(np.searchsorted(self.values, low, side="right" if low_open else "left"))
        stop = (
            self.values.shape[0]
            if high is None
            else int(np.searchsorted(self.values, high, side="left" if high_open else "right"))
        )
        first, last = -(-start // BUCKET_ROWS), stop // BUCKET_ROWS  # the runs first … last − 1 lie in range
        if first < last:
            found = BitMap.union(BitMap(), *self._runs()[first:last])
            rest = np.concatenate([self.rows[start : first * BUCKET_ROWS], self.rows[last * BUCKET_ROWS : stop]])
        else:
            found, rest = BitMap(), self.rows[start:stop]
        if self._tail:
            values = np.asarray([v for v, _ in self._tail], dtype=self.dtype)
            keep = np.ones(values.shape[0], dtype=bool)
            if low is not None:
                keep &= values > low if low_open else values >= low
            if high is not None:
                keep &= values < high if high_open else values <= high
            tail_rows = np.asarray([r for _, r in self._tail], dtype=np.int64)
            rest = np.concatenate([rest, tail_rows[keep]])
        found |= bitmap_of(rest)
        return found

    def _runs(self) -> list[BitMap]:
        """The bitmap of each run of BUCKET_ROWS sorted pairs (made once per merge; readers may race to make it,
        each making the same)."""
        runs = self._buckets
        if runs is None:
            runs = [bitmap_of(self.rows[i : i + BUCKET_ROWS]) for i in range(0, self.rows.shape[0], BUCKET_ROWS)]
            self._buckets = runs
        return runs

    def nbytes(self) -> int:
        runs = sum(len(bits.serialize()) for bits in self._runs())
        return int(self.values.nbytes + self.rows.nbytes) + runs + 64 * len(self._tail)


def ordered_value(field_type: str, value: Any) -> float | int:
    """The number a value of an ordered field is indexed by (a date: seconds since the epoch)."""
    if field_type == "date":
        seconds = parse_date(value)
        assert seconds is not None  # admitted values parse (ssi.fields.schema.fits)
        return seconds
    return value


class FieldIndex:
    """Every field of every row, by value (see the module docstring)."""

    def __init__(self, types: Mapping[str, str] | None = None) -> None:
        self.types: dict[str, str] = dict(types or {})
        self.keywords: dict[str, dict[Any, BitMap]] = {}
        self.ordered: dict[str, OrderedColumn] = {}
        self.present: dict[str, BitMap] = {}
        self.dead = BitMap()

    @classmethod
    def build(cls, types: Mapping[str, str], rows: Iterable[tuple[int, Mapping[str, Any]]]) -> FieldIndex:
        """The index of `rows` (row, fields) under the collection's field `types`: the rows of each value gathered
        in lists first and made into bitmaps and sorted arrays at once (a million documents' four fields: 15 s row
        by row through `add`, mostly one bitmap insertion at a time)."""
        built = cls(types)
        keywords: dict[str, dict[Any, list[int]]] = {}
        ordered: dict[str, tuple[list[Any], list[int]]] = {}
        present: dict[str, list[int]] = {}
        for row, fields in rows:
            for name, value in fields.items():
                field_type = built.types[name]
                if field_type in KEYWORD_TYPES:
                    values = value if isinstance(value, list) else (value,)
                    if not values:
                        continue
                    by_value = keywords.setdefault(name, {})
                    for item in values:
                        by_value.setdefault(item, []).append(row)
                else:
                    pairs = ordered.setdefault(name, ([], []))
                    pairs[0].append(ordered_value(field_type, value))
                    pairs[1].append(row)
                present.setdefault(name, []).append(row)
        built.keywords = {
            name: {value: bitmap_of(np.asarray(found)) for value, found in by_value.items()}
            for name, by_value in keywords.items()
        }
        built.present = {name: bitmap_of(np.asarray(found)) for name, found in present.items()}
        for name, (values, found) in ordered.items():
            column = OrderedColumn(np.int64 if built.types[name] == "integer" else np.float64)
            array = np.asarray(values, dtype=column.dtype)
            order = np.argsort(array, kind="stable")
            column.values, column.rows = array[order], np.asarray(found, dtype=np.int64)[order]
            built.ordered[name] = column
        return built

    def declare(self, types: Mapping[str, str]) -> None:
        """The collection's field types as the store has them now (a write may have added some)."""
        self.types.update(types)

    def add(self, row: int, fields: Mapping[str, Any] | None) -> None:
        """Index a new live row's fields."""
        if not fields:
            return
        for name, value in fields.items():
            field_type = self.types.get(name)
            if field_type is None:  # admitted by the store, so its type is known there: declare() was not called
                raise RuntimeError(f"field '{name}' has no type in this state")
            if field_type in KEYWORD_TYPES:
                values = value if isinstance(value, list) else [value]
                if not values:
                    continue
                by_value = self.keywords.setdefault(name, {})
                for item in values:
                    bits = by_value.get(item)
                    if bits is None:
                        bits = by_value[item] = BitMap()
                    bits.add(row)
            else:
                dtype = np.int64 if field_type == "integer" else np.float64
                self.ordered.setdefault(name, OrderedColumn(dtype)).add(row, ordered_value(field_type, value))
            present = self.present.get(name)
            if present is None:
                present = self.present[name] = BitMap()
            present.add(row)

    def remapped(self, rows: np.ndarray) -> FieldIndex:
        """The index of a compacted state whose row i is this one's row `rows[i]` (sorted; rows not listed are
        dropped): every bitmap and array renumbered in a few vectorized passes, not built again from the store
        (a rebuild of a million documents' fields took 15 s, which a compaction would hold writes for)."""
        fresh = FieldIndex(self.types)
        kept = bitmap_of(rows)

        def renumbered(bits: BitMap) -> BitMap:
            old = np.frombuffer((bits & kept).to_array(), dtype=np.uint32)
            return bitmap_of(np.searchsorted(rows, old))

        fresh.keywords = {
            name: {value: renumbered(bits) for value, bits in by_value.items()}
            for name, by_value in self.keywords.items()
        }
        fresh.present = {name: renumbered(bits) for name, bits in self.present.items()}
        for name, column in self.ordered.items():
            values, old_rows = column.sorted_pairs()
            moved = OrderedColumn(column.dtype)
            at = np.minimum(np.searchsorted(rows, old_rows), max(rows.shape[0] - 1, 0))
            keep = rows[at] == old_rows if rows.shape[0] else np.zeros(old_rows.shape[0], dtype=bool)
            moved.values, moved.rows = values[keep], at[keep].astype(np.int64)
            fresh.ordered[name] = moved
        return fresh

    def kill(self, row: int) -> None:
        """A row no longer live (its document replaced or deleted): every filter leaves it out from now on."""
        self.dead.add(row)

    def describe(self) -> dict[str, Any]:
        """The fields, their types and how many values each holds (for /model and the memory per field)."""
        described: dict[str, Any] = {}
        for name, field_type in sorted(self.types.items()):
            entry: dict[str, Any] = {"type": field_type, "documents": len(self.present.get(name, BitMap()) - self.dead)}
            if name in self.keywords:
                entry["values"] = len(self.keywords[name])
                entry["bytes"] = sum(len(bits.serialize()) for bits in self.keywords[name].values())
            elif name in self.ordered:
                entry["bytes"] = self.ordered[name].nbytes()
            described[name] = entry
        return described
