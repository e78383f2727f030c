"""A named collection: a bundle + its documents (the store) + its index (the model state).

The collection orders everything that changes: writes are committed to the store first (the source
of truth, with the next write sequence number) and then applied to the in-memory index, one writer
at a time; snapshots of the index are written in the background with the sequence they reflect;
a reload builds a new model state off to the side and swaps one reference, so requests in flight
finish on the state they started with.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from service.bounds import cut_long_text
from service.errors import Conflict, Forbidden, InvalidInput, NotFound, Unavailable, WrongCollectionType
from service.metrics import Metrics
from service.model_state import ModelState, QueryResult
from service.settings import CollectionSpec, CollectionType, Settings
from service.snapshot import write_snapshot
from service.state_builder import open_state
from service.store import DocumentStore, StoredDocument
from service.writes import apply_writes, capture, replay
from ssi.bundle import BundleError, load_bundle
from ssi.records import Document

log = logging.getLogger(__name__)


class Collection:
    def __init__(self, name: str, spec: CollectionSpec, settings: Settings, metrics: Metrics) -> None:
        self.name = name
        self.spec = spec
        self.settings = settings
        self.metrics = metrics
        self.bundle_path = spec.bundle
        self.type: CollectionType = spec.type
        self.status = "loading"
        self.error: str | None = None
        self.store: DocumentStore | None = None
        self.state: ModelState | None = None
        # One write at a time, from featurizing through commit to the in-memory apply, so the index
        # applies writes in the store's sequence order. Reload swaps and snapshot captures take it too.
        self._writer = threading.Lock()
        self._reloading = threading.Lock()
        self._snapshotting = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._snapshot_thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def load(self) -> None:
        """Open the store (importing the corpus on first start) and the model state; blocking."""
        bundle = load_bundle(self.bundle_path)
        self.store = DocumentStore.open_for_corpus(self.settings.store_dir, self.name, self.spec.corpus)
        state = open_state(collection=self.name, bundle=bundle, store=self.store, settings=self.settings)
        self.state = state
        self._record_load(state)
        if state.saved_seq != state.seq:
            self.snapshot()
        self.status = "ready"
        self._snapshot_thread = threading.Thread(target=self._snapshot_loop, name=f"snapshots-{self.name}", daemon=True)
        self._snapshot_thread.start()

    def fail(self, message: str) -> None:
        self.status = "failed"
        self.error = message

    def close(self) -> None:
        """Stop the snapshot thread, save what is unsaved, close the store."""
        self._stop.set()
        self._wake.set()
        if self._snapshot_thread is not None:
            self._snapshot_thread.join(timeout=60)
        if self.state is not None and self.state.saved_seq != self.state.seq:
            try:
                self.snapshot()
            except Exception:  # the write log still has everything; the next start replays it
                log.exception("[%s] final snapshot failed", self.name)
        if self.store is not None:
            self.store.close()

    def _record_load(self, state: ModelState) -> None:
        self.metrics.loads.labels(self.name, state.report.source).inc()
        if state.report.embedded:
            self.metrics.embedded.labels(self.name).inc(state.report.embedded)
        self._record_state(state)

    def _record_state(self, state: ModelState) -> None:
        self.metrics.collection_state(
            self.name,
            form=state.bundle.manifest.form,
            content_hash=state.bundle.content_hash,
            index_type=state.config.index_type,
            documents=state.table.n_live,
            rows=state.table.rows,
            seq=state.seq,
        )

    def ready_state(self) -> ModelState:
        state = self.state
        if self.status == "ready" and state is not None:
            return state
        if self.status == "failed":
            raise Unavailable(f"collection '{self.name}' failed to load: {self.error}")
        raise Unavailable(f"collection '{self.name}' is still loading; retry shortly", headers={"Retry-After": "5"})

    def _ready_store(self) -> DocumentStore:
        self.ready_state()
        assert self.store is not None
        return self.store

    # -- reads ---------------------------------------------------------------------------------

    def search(
        self, queries: Sequence[str], k: int, offset: int, *, ef_search: int | None = None, nprobe: int | None = None
    ) -> list[QueryResult]:
        """The exact top k (after `offset`) of each short query text."""
        self.require_type("documents", "search")
        state = self.ready_state()
        self._check_knobs(state, ef_search, nprobe)
        results = state.search(queries, k + offset, pool=self._pool(state), ef_search=ef_search, nprobe=nprobe)
        for result in results:
            self.metrics.candidates.labels(self.name).observe(result.candidates)
        return [result.page(offset) for result in results]

    def similar(self, doc_id: str, k: int, offset: int) -> QueryResult:
        """The documents most like `doc_id`, the stored document itself being the query (it is left out).

        The document is a long query: cut to SSI_MAX_PAGE_CHARS and its SSI_MAX_PAGE_WORDS heaviest words.
        """
        self.require_type("documents", "/similar")
        state = self.ready_state()
        doc = self.get(doc_id)
        text = cut_long_text(doc.as_document().full_text, self.settings.max_page_chars)
        (result,) = state.search(
            [text], k + offset, pool=self._pool(state), exclude=[doc_id], max_words=self.settings.max_page_words
        )
        self.metrics.candidates.labels(self.name).observe(result.candidates)
        return result.page(offset)

    def require_type(self, wanted: CollectionType, route: str) -> None:
        """Refuse a route that does not serve this collection's type, before any work."""
        if self.type != wanted:
            raise WrongCollectionType(
                f"collection '{self.name}' holds {self.type}: {route} serves {wanted} collections only"
            )

    def _pool(self, state: ModelState) -> int:
        return self.settings.candidate_pool if state.config.index_type == "hnsw" else self.settings.scan_pool

    def get(self, doc_id: str) -> StoredDocument:
        doc = self._ready_store().get(doc_id)
        if doc is None:
            raise NotFound(f"no document with id {doc_id!r} in collection '{self.name}'")
        return doc

    def get_many(self, ids: Sequence[str]) -> dict[str, StoredDocument]:
        return self._ready_store().get_many(ids)

    def _check_knobs(self, state: ModelState, ef_search: int | None, nprobe: int | None) -> None:
        index_type = state.config.index_type
        if ef_search is not None and index_type != "hnsw":
            raise InvalidInput(f"ef_search applies to an hnsw index; collection '{self.name}' uses {index_type}")
        if nprobe is not None and index_type != "ivf":
            raise InvalidInput(f"nprobe applies to an ivf index; collection '{self.name}' uses {index_type}")

    # -- writes --------------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if not self.settings.writes_enabled:
            raise Forbidden("writes are disabled on this server: set SSI_API_KEY")

    def put(self, docs: Sequence[Document]) -> list[int]:
        """Add or replace documents: durable in the store when this returns, and visible to searches."""
        self._check_writable()
        store = self._ready_store()
        with self._writer:
            state = self.ready_state()
            prepared = state.embedder.prepare(docs)
            seqs = store.put(docs)
            apply_writes(state, prepared, [], seqs[-1])
            self._after_write(state, "put", len(docs))
        return seqs

    def delete(self, doc_id: str) -> int:
        self._check_writable()
        store = self._ready_store()
        with self._writer:
            state = self.ready_state()
            seq = store.delete(doc_id)
            if seq is None:
                raise NotFound(f"no document with id {doc_id!r} in collection '{self.name}'")
            apply_writes(state, None, [doc_id], seq)
            self._after_write(state, "delete", 1)
        return seq

    def _after_write(self, state: ModelState, op: str, count: int) -> None:
        self.metrics.writes.labels(self.name, op).inc(count)
        self._record_state(state)
        if state.seq - (state.saved_seq or 0) >= self.settings.snapshot_every_writes:
            self._wake.set()

    # -- reload --------------------------------------------------------------------------------

    def resolve_bundle(self, requested: str | None) -> Path:
        """The bundle path to reload from: the current one, or `requested` if under an allowed root."""
        if requested is None:
            return self.bundle_path
        path = Path(requested).expanduser().resolve()
        roots = self.settings.allowed_bundle_roots()
        if not any(path == root or path.is_relative_to(root) for root in roots):
            allowed = ", ".join(str(root) for root in roots)
            raise Forbidden(
                f"bundle {requested!r} is outside the allowed bundle folders ({allowed}); see SSI_BUNDLE_ROOT"
            )
        return path

    def reload(self, requested: str | None) -> dict[str, Any]:
        """Swap to a (new) bundle. The new state is built while the old one keeps serving."""
        self._check_writable()
        store = self._ready_store()
        path = self.resolve_bundle(requested)
        if not self._reloading.acquire(blocking=False):
            raise Conflict(f"a reload of collection '{self.name}' is already running")
        try:
            started = time.perf_counter()
            previous = self.ready_state()
            try:
                bundle = load_bundle(path)
                state = open_state(collection=self.name, bundle=bundle, store=store, settings=self.settings)
            except BundleError as exc:
                raise InvalidInput(f"cannot reload: {exc}") from None
            with self._writer:
                # Writes that landed while the new state was being built are replayed into it first.
                with store.view() as view:
                    replay(state, view)
                self.state = state
                self.bundle_path = path
                self._record_load(state)
            log.info("[%s] reloaded: %s -> %s", self.name, previous.bundle.content_hash[:12], bundle.content_hash[:12])
            if state.saved_seq != state.seq:
                self._wake.set()
            return {
                "collection": self.name,
                "bundle": str(path),
                "previous_content_hash": previous.bundle.content_hash,
                "content_hash": bundle.content_hash,
                "form": bundle.manifest.form,
                "documents": state.table.n_live,
                "loaded_from": state.report.source,
                "seconds": round(time.perf_counter() - started, 4),
            }
        finally:
            self._reloading.release()

    # -- snapshots -----------------------------------------------------------------------------

    def snapshot(self) -> Path | None:
        """Write the current state's snapshot if it has unsaved writes; returns its folder."""
        with self._snapshotting:
            with self._writer:
                state = self.state
                if state is None or state.saved_seq == state.seq:
                    return None
                captured = capture(state)
            started = time.perf_counter()
            path = write_snapshot(state.folder, captured.materialize())
            state.saved_seq = max(state.saved_seq or 0, captured.seq)
            self.metrics.snapshots.labels(self.name).inc()
            log.info(
                "[%s] snapshot at write %d saved in %.2fs: %s",
                self.name,
                captured.seq,
                time.perf_counter() - started,
                path,
            )
            return path

    def _snapshot_loop(self) -> None:
        """Save after `snapshot_every_writes` writes, or `snapshot_interval` seconds after the first unsaved one."""
        unsaved_since: float | None = None
        while not self._stop.is_set():
            self._wake.wait(timeout=min(1.0, self.settings.snapshot_interval))
            self._wake.clear()
            if self._stop.is_set():
                return
            state = self.state
            if state is None or state.saved_seq == state.seq:
                unsaved_since = None
                continue
            now = time.monotonic()
            unsaved_since = unsaved_since or now
            pending = state.seq - (state.saved_seq or 0)
            if pending >= self.settings.snapshot_every_writes or now - unsaved_since >= self.settings.snapshot_interval:
                try:
                    self.snapshot()
                    unsaved_since = None
                except Exception:  # the store's log still has every write; try again later
                    log.exception("[%s] snapshot failed", self.name)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"name": self.name, "type": self.type, "status": self.status}
        if self.error:
            info["error"] = self.error
        if self.state is not None:
            info.update(self.state.describe())
            info["content_hash"] = self.state.bundle.content_hash
        return info
