"""The service's traffic log, one event store per collection, opened on first use: what routes call.

`show` is called by every ranking route with the list it is about to answer with: it names the impression
(an opaque id the client reports clicks against) and, for a share `SSI_EVENTS_EXPLORE` of first-page answers,
shuffles the first `SSI_EVENTS_EXPLORE_DEPTH` results uniformly at random first. Those randomized impressions are
what the trainer measures position bias on (how often each position is looked at, apart from what is shown
there: Wang et al. 2016, "Learning to Rank with Selection Bias in Personal Search"); the rest of the traffic is
answered in the model's order.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from service.collection import Collection
from service.events.store import EventStats, EventStore
from service.settings import Settings

T = TypeVar("T")

DAY = 86_400.0


class Traffic:
    """The event stores of a service's collections (None everywhere when SSI_EVENTS is off)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stores: dict[str, EventStore] = {}
        self._lock = threading.Lock()
        self._rng = random.Random()

    def store(self, collection: Collection) -> EventStore | None:
        if not self.settings.events:
            return None
        found = self._stores.get(collection.name)
        if found is not None:
            return found
        collection.ready_state()  # its store folder exists and is this process's
        with self._lock:
            found = self._stores.get(collection.name)
            if found is None:
                found = EventStore(
                    self.settings.store_dir / collection.name,
                    text_mode=self.settings.events_text,
                    max_age=self.settings.events_max_age_days * DAY,
                    max_bytes=int(self.settings.events_max_mb * (1 << 20)),
                )
                self._stores[collection.name] = found
            return found

    def show(
        self,
        collection: Collection,
        kind: str,
        text: str,
        results: Sequence[T],
        id_of: Callable[[T], str],
        first_position: int = 1,
    ) -> tuple[str | None, list[T]]:
        """(impression id or None, the results in the order to answer with) for one ranked answer."""
        shown = list(results)
        store = self.store(collection)
        if store is None:
            return None, shown
        randomized = False
        depth = min(self.settings.events_explore_depth, len(shown))
        if first_position == 1 and depth > 1 and self._rng.random() < self.settings.events_explore:
            top = shown[:depth]
            self._rng.shuffle(top)
            shown[:depth] = top
            randomized = True
        model = collection.ready_state().bundle.content_hash
        impression = store.record(kind, text, model, [id_of(r) for r in shown], first_position, randomized)
        return impression, shown

    def stats(self) -> dict[str, EventStats]:
        return {name: store.stats() for name, store in list(self._stores.items())}

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
