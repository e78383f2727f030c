"""The collections one service hosts, by name, and their loading in the background.

Loading can take minutes on a first start (every document embedded), so it runs in a thread while
the server already answers `/healthz` (alive) and `/readyz` (503 until every collection is ready).
A collection that cannot load is marked failed with the reason, and `on_fatal` is told so the
process can exit instead of running forever unready. What a kind of collection needs beside its state
(an adverts collection's metadata book) is opened by `after_load` hooks in the same thread, so that the
first request does not pay for it: a worker of a group listens only once they have run (service.workers); a
single process may answer /readyz "ready" while they still run, and a /match then waits for the book.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from service.collection import Collection
from service.errors import NotFound
from service.metrics import Metrics
from service.query_vectors import QueryCacheCollector, QueryVectorCache
from service.settings import Settings
from service.threads import freeze_loaded_objects, thaw_loaded_objects

log = logging.getLogger(__name__)


class Catalog:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        specs = settings.collection_specs()
        # One cache of query vectors for the process's collections, keyed by encoder (service.query_vectors).
        self.query_cache = QueryVectorCache(settings.query_cache_size) if settings.query_cache_size else None
        if self.query_cache is not None:
            metrics.registry.register(QueryCacheCollector(self.query_cache))
        cache = self.query_cache
        self.collections = {
            name: Collection(name, spec, settings, metrics, query_cache=cache) for name, spec in specs.items()
        }
        self.default = next(iter(self.collections))
        self._loader: threading.Thread | None = None
        self._after_load: list[Callable[[Collection], None]] = []

    def field_types(self) -> dict[str, str]:
        """The field types of the loaded collections' documents, all together (service.fields)."""
        types: dict[str, str] = {}
        for collection in self.collections.values():
            state = collection.state
            if state is not None:
                types.update(state.fields.types)
        return types

    def after_load(self, hook: Callable[[Collection], None]) -> None:
        """Run `hook(collection)` in the loading thread once each collection has loaded (before the loaded objects
        are frozen out of garbage collection); a hook that raises fails the collection as a failed load does."""
        self._after_load.append(hook)

    def get(self, name: str | None) -> Collection:
        collection = self.collections.get(name or self.default)
        if collection is None:
            hosted = ", ".join(sorted(self.collections))
            raise NotFound(f"unknown collection {name!r}; this service hosts: {hosted}")
        return collection

    def start_loading(self, on_fatal: Callable[[str], None] | None = None) -> None:
        """Load every collection in a background thread (once: a worker has loaded before it serves)."""
        if self._loader is not None:
            return

        def load_all() -> None:
            for collection in self.collections.values():
                try:
                    collection.load()
                    for hook in self._after_load:
                        hook(collection)
                except Exception as exc:  # any failure: report it clearly, never leave a half-loaded state
                    message = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
                    log.error(
                        "[%s] cannot load: %s", collection.name, message, exc_info=not isinstance(exc, ValueError)
                    )
                    collection.fail(message)
                    if on_fatal is not None:
                        on_fatal(f"collection '{collection.name}': {message}")
                    return
            freeze_loaded_objects()

        self._loader = threading.Thread(target=load_all, name="collection-loader", daemon=True)
        self._loader.start()

    def wait_loaded(self, timeout: float | None = None) -> None:
        if self._loader is not None:
            self._loader.join(timeout)

    def close(self) -> None:
        # A load still running would race with closing its store; give it time, it is daemon otherwise.
        self.wait_loaded(timeout=5)
        for collection in self.collections.values():
            collection.close()
        thaw_loaded_objects()
