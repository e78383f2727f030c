"""Query vectors e(q) kept across requests: a bounded LRU cache in front of a hybrid bundle's sentence encoder.

Why: a hybrid search spends most of its time encoding the query (docs/results/hybrid.md, "Cost"), and real traffic
repeats queries (a Zipf tail); a repeated query's vector is read back in microseconds instead of milliseconds.

Keys. An entry is keyed by the encoder's key (service.sentence_cache.encoder_key: the sha256 of the graph that serves,
fp32 or int8, its tokenizer, pooling and runtime versions) and the query's token ids, cut to the encoder's maximum
length: the query text normalised exactly as the encoder reads it (its tokenizer's lower-casing, accents, spaces and
truncation), so two texts share an entry only where the encoder could not tell them apart. A vector is the encoder's
own float32 row as computed the first time (with the int8 graph a text's vector moves slightly with the batch it is
encoded in, one activation scale a batch: ~1e-5, so a hit may differ from a fresh encoding by that much).

Size. At most `size` entries per process (SSI_QUERY_CACHE_SIZE, 0: off), shared by its collections and bundles; an
entry of a 384-dimension encoder and a 25-token query holds about 2.0 kB (`ENTRY_OVERHEAD` plus the vector's and the
token ids' bytes: 10,000 such entries measured 19.2 MB with tracemalloc), so the default costs about 19 MB a worker.
Hits, misses, entries and bytes go to /metrics (`QueryCacheCollector`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ssi.sentence import SentenceEncoder

DEFAULT_SIZE = 10_000
# Bytes an entry holds besides its vector's and token ids' data: the key tuple, the bytes and array objects, and the
# ordered dict's slot (CPython 3.11, tracemalloc over 10,000 entries; the encoder key's string is shared by them all).
ENTRY_OVERHEAD = 380


@dataclass(slots=True)
class CacheCounts:
    hits: int = 0
    misses: int = 0
    entries: int = 0
    bytes: int = 0


class QueryVectorCache:
    """e(q) of recently asked queries, least recently used first out, at most `size` entries (`size` ≥ 1)."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if size < 1:
            raise ValueError(f"a query cache holds at least one entry, not {size} (0 turns it off: no cache)")
        self.size = size
        self._entries: OrderedDict[tuple[str, bytes], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.counts = CacheCounts()

    def vectors(self, key: str, encoder: SentenceEncoder, texts: Sequence[str]) -> np.ndarray:
        """float32 [texts, E]: e of each text, read from the cache or encoded (in one call for all the misses) and
        kept; `key` names the encoder (service.sentence_cache.encoder_key)."""
        ids = encoder.token_ids(texts)
        keys = [(key, np.asarray(row, dtype=np.int32).tobytes()) for row in ids]
        out = np.empty((len(keys), encoder.dims), dtype=np.float32)
        missing: list[int] = []
        with self._lock:
            for i, entry in enumerate(keys):
                found = self._entries.get(entry)
                if found is None:
                    missing.append(i)
                else:
                    self._entries.move_to_end(entry)
                    out[i] = found
            self.counts.hits += len(keys) - len(missing)
            self.counts.misses += len(missing)
        if not missing:
            return out
        out[missing] = encoder.encode_ids([ids[i] for i in missing])
        with self._lock:
            for i in missing:
                self._put(keys[i], out[i].copy())
        return out

    def _put(self, entry: tuple[str, bytes], vector: np.ndarray) -> None:
        if entry in self._entries:  # encoded twice by requests at once: keep the one held
            self._entries.move_to_end(entry)
            return
        self._entries[entry] = vector
        self.counts.bytes += _entry_bytes(entry, vector)
        while len(self._entries) > self.size:
            old, dropped = self._entries.popitem(last=False)
            self.counts.bytes -= _entry_bytes(old, dropped)
        self.counts.entries = len(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def _entry_bytes(entry: tuple[str, bytes], vector: np.ndarray) -> int:
    return ENTRY_OVERHEAD + len(entry[1]) + vector.nbytes


class QueryCacheCollector(Collector):
    """The cache's counts for /metrics, read when scraped (nothing is done per hit for them)."""

    def __init__(self, cache: QueryVectorCache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        counts = self.cache.counts
        hits = CounterMetricFamily("ssi_query_cache_hits", "Query vectors read from the query cache")
        hits.add_metric([], counts.hits)
        misses = CounterMetricFamily("ssi_query_cache_misses", "Query vectors encoded (not in the query cache)")
        misses.add_metric([], counts.misses)
        yield hits
        yield misses
        yield GaugeMetricFamily("ssi_query_cache_entries", "Query vectors held", value=counts.entries)
        yield GaugeMetricFamily("ssi_query_cache_capacity", "Query vectors held at most", value=self.cache.size)
        yield GaugeMetricFamily("ssi_query_cache_bytes", "Bytes the held query vectors take, about", value=counts.bytes)
