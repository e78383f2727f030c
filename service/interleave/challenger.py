"""The candidate's state beside the served one, in one worker: built like a reload's, kept up to the store.

Why not through the collection's write path: the candidate serves only a share of first pages for the length of
a comparison, so it catches up with the store's write log before each search instead (service.writes.replay,
what a worker of a group does for the others' writes); a state the log has moved past is built again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from service.collection import Collection
from service.interleave.record import ComparisonSpec
from service.model_state import ModelState, QueryResult
from service.state_builder import open_state
from service.store import StoreError
from service.writes import replay
from ssi.bundle import load_bundle
from ssi.open_vocab import OpenCounts

log = logging.getLogger(__name__)


def build_state(collection: Collection, bundle: Path, content_hash: str | None = None) -> ModelState:
    """The candidate bundle's state over the collection's documents (its arrays read into memory, as a reload's);
    refused when `content_hash` is given and the folder no longer holds that bundle."""
    store = collection.store
    if store is None:
        raise RuntimeError(f"collection '{collection.name}' has no store yet")
    loaded = load_bundle(bundle, mmap=False)
    if content_hash is not None and loaded.content_hash != content_hash:
        raise ValueError(f"the bundle at {bundle} changed since the comparison started (another content hash)")
    return open_state(
        collection=collection.name, bundle=loaded, store=store, settings=collection.settings,
        query_cache=collection.query_cache,
    )  # fmt: skip


class Challenger:
    """A comparison's candidate, searchable in this worker."""

    def __init__(self, collection: Collection, spec: ComparisonSpec, state: ModelState) -> None:
        self.collection = collection
        self.spec = spec
        self.state = state
        self._writes = threading.Lock()  # one catch-up at a time

    def _catch_up(self) -> ModelState:
        store = self.collection.store
        state = self.state
        if store is None or store.last_seq <= state.seq:
            return state
        with self._writes:
            state = self.state
            try:
                with store.view() as view:
                    replay(state, view)
            except StoreError:
                log.info("[%s] the write log moved past the candidate's state: building it again", self.collection.name)
                state = self.state = build_state(self.collection, Path(self.spec.bundle), self.spec.content_hash)
        return state

    def current(self) -> ModelState:
        """The candidate's state, caught up with the collection's writes."""
        return self._catch_up()

    def search(
        self, queries: Sequence[str], k: int, open_counts: Sequence[OpenCounts] | None = None
    ) -> list[QueryResult]:
        """The candidate's top k of each query, over the collection's documents as they are now (`open_counts`: a
        sharded cluster's counts of the queries' new words, as for the served model's search)."""
        state = self._catch_up()
        return state.search(list(queries), k, pool=self.collection.pool(state), open_counts=open_counts)
