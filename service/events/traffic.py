"""The service's traffic log, one event store per collection, opened on first use: what routes call.

`show` is called by every ranking route with the list it is about to answer with: it names the impression
(an opaque id the client reports clicks against) and, for a share `SSI_EVENTS_EXPLORE` of first-page answers,
shuffles the first `SSI_EVENTS_EXPLORE_DEPTH` results uniformly at random first. Those randomized impressions are
what the trainer measures position bias on (how often each position is looked at, apart from what is shown
there: Wang et al. 2016, "Learning to Rank with Selection Bias in Personal Search"); the rest of the traffic is
answered in the model's order.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, TypeVar

from service.collection import Collection
from service.errors import Forbidden, ServiceError, Unavailable
from service.events.store import ClickOutcome, EventStore, ShownFilter
from service.fields.visibility import EVERYTHING, Visibility
from service.metrics import Metrics
from service.settings import Settings
from ssi.traffic import canonical_filter

T = TypeVar("T")

DAY = 86_400.0
OPEN_RETRY = 30.0  # seconds before a store that could not be opened is tried again

log = logging.getLogger(__name__)


# The id of a hit or an advert as `show` takes it: a C-level getter (a Python function is a frame per result).
id_of_result = attrgetter("id")


def filter_shown(node: Any, visible: Visibility = EVERYTHING) -> ShownFilter | None:
    """What an impression records of the filter its list was ranked under (ssi.traffic's `filtered`): the request's
    filter `node` (None: none) and, for a filtered read key, the key's hash and filter (never the key); None when
    the list was not filtered. `ssi learn` ranks a candidate among the same documents when it replays it."""
    if node is None and not visible.restricted:
        return None
    key_filter = canonical_filter(visible.filter) if visible.restricted else None
    return (canonical_filter(node) if node is not None else None, visible.key_id, key_filter)


def served_model(collection: Collection) -> str:
    """The content hash of the bundle a collection serves now: what an impression says ranked it."""
    return collection.ready_state().bundle.content_hash


class Traffic:
    """The event stores of a service's collections by name (none when SSI_EVENTS is off); also the router's."""

    def __init__(self, settings: Settings, metrics: Metrics | None = None, *, enabled: bool = True) -> None:
        self.settings = settings
        self.metrics = metrics
        self.enabled = enabled  # False: nothing is recorded, whatever the settings (a router without a data folder)
        self._stores: dict[str, EventStore] = {}
        self._lock = threading.Lock()
        self._rng = random.Random(settings.random_seed)
        self._retry_at: dict[str, float] = {}  # a store that could not be opened, and when to try again

    def store(self, name: str) -> EventStore | None:
        """The collection's event store, opened on first use; None when this server records no traffic, or when
        the store cannot be opened now (a full disk: tried again after OPEN_RETRY seconds; searches go on)."""
        if not self.records(name):
            return None
        found = self._stores.get(name)
        if found is not None:
            return found
        if time.monotonic() < self._retry_at.get(name, 0.0):
            return None
        with self._lock:
            found = self._stores.get(name)
            if found is None:
                try:
                    found = EventStore(
                        self.settings.store_dir / name,
                        text_mode=self.settings.events_text,
                        max_age=self.settings.events_max_age_days * DAY,
                        max_bytes=int(self.settings.events_max_mb * (1 << 20)),
                        committed=None
                        if self.metrics is None
                        else self.metrics.impressions.labels(name, "recorded").inc,
                    )
                except (sqlite3.Error, OSError, ServiceError) as exc:
                    log.warning("the traffic log of %r cannot be opened (%s); answers name no impression", name, exc)
                    self._retry_at[name] = time.monotonic() + OPEN_RETRY
                    return None
                if self.metrics is not None:
                    self.metrics.traffic_bytes.labels(name).set_function(found.file_bytes)
                self._stores[name] = found
            return found

    def records(self, name: str) -> bool:
        """Whether collection `name`'s traffic is recorded: its own `events`, else SSI_EVENTS."""
        if not self.enabled:
            return False
        spec = self.settings.collections.get(name)
        return self.settings.events if spec is None or spec.events is None else spec.events

    def show(
        self,
        name: str,
        model: str,
        kind: str,
        text: str,
        results: Sequence[T],
        id_of: Callable[[T], str],
        first_position: int = 1,
        interleaved: tuple[str, str] | None = None,
        filtered: ShownFilter | None = None,
    ) -> tuple[str | None, list[T]]:
        """(impression id or None, the results in the order to answer with) for one ranked answer of `model`.

        `interleaved`: the answer merged `model`'s ranking with a candidate's (service.interleave): the candidate's
        content hash and who placed each result; such an answer is never shuffled (its order is the comparison).
        `filtered`: the filter its list was ranked under (`filter_shown`), None for an unfiltered answer.

        On every search's path, so it does the least it can: the store is looked up in a dict, the ids taken in one
        C-level map, and the impressions counted by the writer as it commits them (only a dropped one is counted
        here)."""
        shown = list(results)
        store = self._stores.get(name) or self.store(name)
        if store is None:
            return None, shown
        randomized = False
        explore = self.settings.events_explore
        if explore and first_position == 1 and interleaved is None:
            depth = min(self.settings.events_explore_depth, len(shown))
            if depth > 1 and self._rng.random() < explore:
                top = shown[:depth]
                self._rng.shuffle(top)
                shown[:depth] = top
                randomized = True
        impression = store.record(
            kind, text, model, list(map(id_of, shown)), first_position, randomized, interleaved, filtered
        )
        if impression is None and self.metrics is not None:
            self.metrics.impressions.labels(name, "dropped").inc()
        return impression, shown

    def click(self, name: str, impression: str, doc_id: str, dwell_ms: float | None) -> ClickOutcome:
        """Record a click (blocking: a durable commit); Forbidden when this server records no traffic."""
        store = self.store(name)
        if store is None and self.records(name):
            raise Unavailable("the traffic log cannot be written now (see the server log); retry later")
        if store is None:
            raise Forbidden(
                f"collection {name!r} records no traffic (SSI_EVENTS=false, or its own events=false): "
                "clicks are not kept"
            )
        outcome = store.click(impression, doc_id, dwell_ms)
        if self.metrics is not None:
            self.metrics.clicks.labels(name, "recorded" if outcome.recorded else "repeat").inc()
        return outcome

    def flush(self) -> None:
        """Commit every queued impression now (tests, shutdown)."""
        for store in list(self._stores.values()):
            store.flush()

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
