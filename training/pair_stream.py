"""Training pairs read as a stream: the pairs file is never held in memory, only a bounded shuffle buffer.

`ssi train --stream-pairs` (and every worker of `ssi train --ray`) reads the `query_id<TAB>doc_id` file
line by line, in *runs*: consecutive lines with one query id. A file sorted by query (as link dumps and
click logs usually are) gives each query's positives whole, so a step samples positives and excludes
known positives from its negatives exactly as the in-memory sampler does; an unsorted file gives
fragments, and a negative may then be a positive of its query that sits in another fragment.

The buffer holds at most `capacity` pairs (as row numbers): a run enters it only when the largest
possible run still fits, and a step draws runs from it at random (a shuffle buffer, as tf.data and
Ray Data have). A run longer than a quarter of the buffer is cut into pieces of that size. When the
file ends it is read again: one pass is one epoch, and the buffer mixes the end of one pass with
the start of the next. With `shards` > 1 a reader keeps every `shards`-th run (data-parallel workers
each read their share). The documents stay in memory (the trainer scores against them): only the pairs
stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ssi.corpus import iter_pairs
from ssi.records import Pair
from training.data import PairIndex
from training.sampling import StepPlan, TripleSampler


@dataclass(frozen=True)
class Run:
    """One query's positives from consecutive lines of the file, as rows (distinct, never the query itself)."""

    query: int
    docs: np.ndarray


@dataclass
class StreamCount:
    """What one counting pass over the file found: usable pairs and runs, and what was dropped and why."""

    pairs: int = 0
    runs: int = 0
    dropped: PairIndex = field(default_factory=lambda: PairIndex(np.zeros(0, np.int64), np.zeros(0, np.int64)))
    left_out: int = 0  # pairs touching a document of the unseen-documents setting

    def runs_of(self, shard: int, shards: int) -> int:
        """Runs that worker `shard` of `shards` reads per pass (it keeps every `shards`-th run)."""
        return len(range(shard, self.runs, shards))


@dataclass(frozen=True)
class PairStream:
    """A pairs file and how its ids map to rows: re-readable, shardable, with no pair kept between reads."""

    path: Path
    query_row: dict[str, int]
    doc_row: dict[str, int]
    doc_doc: bool
    capacity: int  # pairs the shuffle buffer holds at most
    left_out: frozenset[str] = frozenset()  # unseen documents: their pairs are skipped, as in memory
    shard: int = 0
    shards: int = 1

    @property
    def max_run(self) -> int:
        """Longest run the buffer takes whole; longer ones are cut (so a run always fits beside others)."""
        return max(1, self.capacity // 4)

    def sharded(self, shard: int, shards: int) -> PairStream:
        """The share of the runs that worker `shard` of `shards` reads (every `shards`-th run of the file)."""
        return replace(self, shard=shard, shards=shards)

    def runs(self, count: StreamCount | None = None) -> Iterator[Run]:
        """One pass over the file: this shard's runs, in file order; `count` tallies what was kept and dropped."""
        index = 0
        current: str | None = None
        docs: list[int] = []
        seen: set[int] = set()
        for pair in iter_pairs(self.path):
            if pair.query_id != current or len(docs) >= self.max_run:
                if docs:
                    if index % self.shards == self.shard:
                        yield Run(self.query_row[current], np.asarray(docs, dtype=np.int64))  # type: ignore[index]
                    index += 1
                current, docs, seen = pair.query_id, [], set()
            row = self._usable(pair, seen, count)
            if row is not None:
                docs.append(row)
                if count is not None:
                    count.pairs += 1
        if docs and index % self.shards == self.shard:
            yield Run(self.query_row[current], np.asarray(docs, dtype=np.int64))  # type: ignore[index]

    def _usable(self, pair: Pair, seen: set[int], count: StreamCount | None) -> int | None:
        """The document row of a pair the trainer can use, else None (counted as in `index_pairs`)."""
        if pair.query_id in self.left_out or pair.doc_id in self.left_out:
            if count is not None:
                count.left_out += 1
            return None
        q = self.query_row.get(pair.query_id)
        d = self.doc_row.get(pair.doc_id)
        why = (
            "n_unknown_query" if q is None
            else "n_unknown_doc" if d is None
            else "n_self" if self.doc_doc and q == d
            else "n_duplicate" if d in seen
            else None
        )  # fmt: skip
        if why is not None:
            if count is not None:
                setattr(count.dropped, why, getattr(count.dropped, why) + 1)
            return None
        seen.add(d)  # type: ignore[arg-type]
        return d

    def count(self) -> StreamCount:
        """One pass that keeps nothing but counters (run before training: epochs, the summary, empty files)."""
        tally = StreamCount()
        for _ in self.runs(tally):
            tally.runs += 1
        return tally

    def known_pairs(self, query_ids: Iterable[str]) -> KnownPairs:
        """The file's pairs of these queries alone, re-read on demand (validation's filtered setting)."""
        return KnownPairs(self.path, frozenset(query_ids), self.left_out)


@dataclass(frozen=True)
class KnownPairs:
    """The training pairs of a few queries, read from the file whenever iterated.

    Validation ranks in the filtered setting: a query's training links are left out of its ranking.
    Only the validation queries' links matter there, so only they are read, never the whole file.
    """

    path: Path
    query_ids: frozenset[str]
    left_out: frozenset[str] = frozenset()  # unseen documents, as in PairStream

    def __iter__(self) -> Iterator[Pair]:
        return (
            p
            for p in iter_pairs(self.path)
            if p.query_id in self.query_ids and p.doc_id not in self.left_out and p.query_id not in self.left_out
        )


class ShuffleBuffer:
    """Runs of a stream drawn in random order from a buffer of at most `stream.capacity` pairs, pass after pass.

    `held` counts the pairs in the buffer; `peak` is the most it ever held (what the tests check).
    """

    def __init__(self, stream: PairStream, seed: int) -> None:
        self.stream = stream
        self.rng = np.random.default_rng(seed)
        self.buffer: list[Run] = []
        self.held = 0
        self.peak = 0
        self.passes = 0  # passes over the file started (epochs read)
        self._source: Iterator[Run] = iter(())
        self._source_empty = True  # the current pass gave no run yet

    def _refill(self) -> None:
        """Read runs until the longest possible run would no longer fit."""
        while self.held + self.stream.max_run <= self.stream.capacity:
            run = next(self._source, None)
            if run is None:  # the pass ended (or none began): the next one starts
                if self.passes and self._source_empty:
                    raise ValueError(f"{self.stream.path}: no usable training pairs in this share of the file")
                self._source = self.stream.runs()
                self._source_empty = True
                self.passes += 1
                continue
            self._source_empty = False
            self.buffer.append(run)
            self.held += run.docs.size
            self.peak = max(self.peak, self.held)

    def next_run(self) -> Run:
        self._refill()
        i = int(self.rng.integers(len(self.buffer)))
        self.buffer[i], self.buffer[-1] = self.buffer[-1], self.buffer[i]
        run = self.buffer.pop()
        self.held -= run.docs.size
        return run

    def take(self, n: int) -> list[Run]:
        return [self.next_run() for _ in range(n)]


class StreamSampler(TripleSampler):
    """The trainer's sampler over a pair stream: a step's queries are the next `batch_queries` runs of the buffer.

    Positives, negatives and hard negatives are drawn by TripleSampler's own code; only the known positives
    differ: a step knows the positives of its own runs (a query's all, for a file sorted by query).
    """

    def __init__(
        self,
        stream: PairStream,
        runs_per_epoch: int,
        n_docs: int,
        *,
        doc_doc: bool,
        batch_queries: int,
        positives_per_query: int,
        negatives_per_positive: int,
        pool_size: int,
        hard_fraction: float,
        hard_pool: int,
        seed: int,
    ) -> None:
        # TripleSampler.__init__ indexes every pair of the file; here the same arrays are set per step.
        self.buffer = ShuffleBuffer(stream, seed)
        self.rng = self.buffer.rng
        self.n_docs = n_docs
        self.doc_doc = doc_doc
        self.runs_per_epoch = max(runs_per_epoch, 1)
        self.batch_queries = min(batch_queries, self.runs_per_epoch)
        self.positives_per_query = positives_per_query
        self.negatives_per_positive = negatives_per_positive
        self.pool_size = pool_size
        self.hard_fraction = hard_fraction
        self.hard_pool = hard_pool
        self.pos_query = self.pos_doc = self.positive_keys = np.zeros(0, dtype=np.int64)

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.runs_per_epoch // self.batch_queries)

    @property
    def epoch(self) -> int:
        return self.buffer.passes

    def plan(self) -> StepPlan:
        runs = self.buffer.take(self.batch_queries)
        q_rows = np.concatenate([np.full(run.docs.size, run.query, dtype=np.int64) for run in runs])
        d_rows = np.concatenate([run.docs for run in runs])
        order = np.lexsort((d_rows, q_rows))
        self.pos_query, self.pos_doc = q_rows[order], d_rows[order]
        self.positive_keys = np.unique(self.pos_query * self.n_docs + self.pos_doc)
        # Two runs of one query (an unsorted file, a cut run) are one query of the step.
        queries, start, counts = np.unique(self.pos_query, return_index=True, return_counts=True)
        return self._plan(queries, start, counts)
