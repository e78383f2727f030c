"""A named collection: a bundle + its documents (the store) + its index (the model state).

The collection orders everything that changes: writes are committed to the store first (the source
of truth, with the next write sequence number) and then applied to the in-memory index, one writer
at a time; snapshots of the index are written in the background with the sequence they reflect;
a reload builds a new model state off to the side and swaps one reference, so requests in flight
finish on the state they started with.

Upkeep runs in one background thread, one task at a time (`_maintenance`), so that trimming the
write log never races a reload or a compaction that still needs it:

- snapshots, after SSI_SNAPSHOT_EVERY_WRITES writes or SSI_SNAPSHOT_INTERVAL seconds; a failed one is
  retried with exponential backoff (up to SSI_SNAPSHOT_RETRY_MAX seconds);
- online compaction when dead rows pass SSI_COMPACT_DEAD_FRACTION: built off to the side from the
  live state, brought up to date from the store and swapped in like a reload;
- after each snapshot, the write log is trimmed up to the oldest snapshot kept, and cache folders
  that can no longer load are removed; disk use goes to /metrics.

If applying a committed write to the in-memory index fails, the state no longer matches the store:
the collection stops serving it (503, and /readyz says "recovering") and rebuilds it from the
latest snapshot and the store's write log in the background. One server serves a data folder:
a lock on the store and cache folders refuses a second one.

In a group of worker processes (SSI_WORKERS > 1, service.workers) every worker holds its own state
of the same store. Its own writes and everybody else's reach its state the same way: replayed from
the store's write log (`_catch_up`), after its own commits and before each search, so a write
acknowledged by one worker is seen by the next search on any worker. Workers load one at a time, and
snapshots are written and pruned by one worker at a time (`FileLock`s in the cache folder); the worker
holding the upkeep lock is the one that snapshots and trims the log. Every worker compacts its own state:
the others' replaced and deleted documents are dead rows in it as well.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.adverts import adopt_book, corpus_fields, declared_fields
from service.bounds import cut_long_text, shown
from service.cores import usable_cores
from service.embedding import Prepared
from service.errors import Conflict, Forbidden, InvalidInput, NotFound, Unavailable, WrongCollectionType
from service.fields.checks import parse_filter
from service.fields.facets import Facet, check_facets
from service.fields.plan import Planner
from service.fields.visibility import EVERYTHING, Visibility
from service.group_reload import GroupBundle
from service.instance_lock import FileLock, FolderLock
from service.metrics import Metrics
from service.model_state import ModelState, QueryResult, Where
from service.query_vectors import QueryVectorCache
from service.settings import CollectionSpec, CollectionType, Settings
from service.snapshot import disk_bytes, prune_cache, seq_of, snapshots, write_snapshot
from service.state_builder import compacted, needs_compaction, open_state
from service.store import DocumentStore, StoredDocument, StoreError, disk_full
from service.threads import freeze_loaded_objects, release_free_memory
from service.writes import FieldWrites, apply_writes, capture, replay
from ssi.bundle import Bundle, BundleError, load_bundle
from ssi.fields.filters import FilterBounds
from ssi.open_vocab import OpenCounts
from ssi.records import Document

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FieldRequest:
    """What a search asks of the documents' fields (service.fields): a filter (the JSON as sent) and facets."""

    filter: Any = None
    facets: list[str] = field(default_factory=list)
    # Field types known beyond this collection's own (a shard of the cluster: the cluster's, cluster.fanout): a
    # filter or facet may name a field no document here has yet, which then matches nothing here.
    types: Mapping[str, str] = field(default_factory=dict)
    facet_size: int | None = None  # values per facet (None: SSI_FACET_SIZE; a shard: the router's)


@dataclass(frozen=True, slots=True)
class FieldAnswer:
    """How many live documents matched the filter, and the facets asked for."""

    matched: int
    facets: dict[str, Facet]


def _load_bundle(path: Path) -> Bundle:
    """The bundle with its arrays read into memory, not memory-mapped: a bundle copied over the served
    folder in place (truncated, then rewritten) would otherwise crash the process with SIGBUS, or change
    the weights it serves without any check. A new bundle is served by a reload from a new folder."""
    return load_bundle(path, mmap=False)


class Collection:
    def __init__(
        self,
        name: str,
        spec: CollectionSpec,
        settings: Settings,
        metrics: Metrics,
        *,
        query_cache: QueryVectorCache | None = None,
    ) -> None:
        self.name = name
        self.query_cache = query_cache  # the process's query vectors (service.query_vectors), None: off
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
        # applies writes in the store's sequence order. Swapping the state (reload, compaction,
        # recovery) takes it too; a snapshot's capture does not.
        self._writer = threading.Lock()
        self._reloading = threading.Lock()
        # One upkeep task at a time: snapshot + log trim, compaction, reload, recovery.
        self._maintenance = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._snapshot_thread: threading.Thread | None = None
        self._recovery_thread: threading.Thread | None = None
        self._folder_locks: list[FolderLock] = []
        # A worker of a group (service.workers): the supervisor holds the folder locks; these order the workers.
        self.shared = settings.workers > 1
        folder = settings.index_dir / name
        self._files_lock = FileLock(folder / ".ssi-snapshots.lock")  # loads, snapshot writes and prunes
        self._upkeep_lock = FileLock(folder / ".ssi-upkeep.lock")  # held for good by the worker that upkeeps
        # What the group serves (a reload reaches every worker through it) and the generation this worker serves.
        self._group = GroupBundle(folder, settings.workers, settings.worker_number) if self.shared else None
        self._generation = 0

    # -- lifecycle -----------------------------------------------------------------------------

    def load(self) -> None:
        """Open the store (importing the corpus on first start) and the model state; blocking."""
        if not self.shared:
            for folder in (self.settings.store_dir / self.name, self.settings.index_dir / self.name):
                self._folder_locks.append(FolderLock(folder).acquire())
        served = self._group.read() if self._group is not None else None
        if served is not None:  # a worker started again after a crash: the bundle the group serves now
            self.bundle_path, self._generation = Path(served.path), served.generation
        bundle = _load_bundle(self.bundle_path)
        # Workers load one at a time: the first imports the corpus, builds and snapshots; the next ones load that.
        with self._upkeep():
            adverts = self.type == "adverts"  # its metadata is four declared fields (service.adverts)
            self.store = DocumentStore.open_for_corpus(
                self.settings.store_dir,
                self.name,
                self.spec.corpus,
                on_change=self.settings.corpus_change,
                fields=declared_fields(self.spec.fields) if adverts else self.spec.fields,
                line_fields=corpus_fields if adverts else None,
            )
            if adverts:
                adopt_book(self.store)
            state = open_state(
                collection=self.name, bundle=bundle, store=self.store, settings=self.settings,
                start_up_threads=usable_cores().usable, query_cache=self.query_cache,
            )  # fmt: skip
            self.state = state
            self._record_load(state)
            if state.saved_seq != state.seq:
                self._snapshot()
            else:
                self._record_disk(state)
        self.status = "ready"
        if self._group is not None:
            self._group.acknowledge(self._generation)
        self._snapshot_thread = threading.Thread(target=self._maintenance_loop, name=f"upkeep-{self.name}", daemon=True)
        self._snapshot_thread.start()

    def fail(self, message: str) -> None:
        self.status = "failed"
        self.error = message

    def close(self) -> None:
        """Stop the snapshot thread, save what is unsaved, close the store."""
        self._stop.set()
        self._wake.set()
        for thread in (self._snapshot_thread, self._recovery_thread):
            if thread is not None:
                thread.join(timeout=60)
        if self.state is not None and self.state.saved_seq != self.state.seq and self._keeps_upkeep():
            try:
                self.snapshot()
            except Exception:  # the write log still has everything; the next start replays it
                log.exception("[%s] final snapshot failed", self.name)
        if self.store is not None:
            self.store.close()
        for lock in self._folder_locks:
            lock.release()
        self._folder_locks = []
        self._upkeep_lock.release()

    @contextmanager
    def _files(self) -> Iterator[None]:
        """Hold off the other workers' loads, snapshot writes and prunes (nothing to order alone)."""
        if not self.shared:
            yield
            return
        with self._files_lock:
            yield

    @contextmanager
    def _upkeep(self) -> Iterator[None]:
        """One upkeep task at a time in this process, and one snapshot writer or prune among the workers.

        Locks are always taken in this order: `_maintenance`, the files lock, `_writer`."""
        with self._maintenance, self._files():
            yield

    def _keeps_upkeep(self) -> bool:
        """Whether this process snapshots, compacts and trims: always alone; in a group, the upkeep lock's holder."""
        return not self.shared or self._upkeep_lock.try_acquire()

    def _catch_up(self) -> None:
        """A worker of a group: apply the writes other workers committed since this state's (service.workers)."""
        state = self.state
        if not self.shared or state is None or self.store is None or self.store.last_seq <= state.seq:
            return
        with self._writer:
            state = self.state
            if state is None or state.broken:
                return
            try:
                with self.store.view() as view:
                    replayed = replay(state, view)
            except StoreError:  # the log was trimmed past this state: start again from the newest snapshot
                replayed = -1
        if replayed < 0:
            log.warning("[%s] the write log moved past write %d: reloading from the snapshots", self.name, state.seq)
            self._reopen(state.bundle)
        elif replayed:
            self._record_state(state)

    def _reopen(self, bundle: Bundle) -> ModelState:
        """Swap in the state of the newest snapshot brought up to the store, and serve it (after a failed
        write's apply, or when the write log moved past this worker's state)."""
        assert self.store is not None
        with self._upkeep():
            fresh = open_state(
                collection=self.name, bundle=bundle, store=self.store, settings=self.settings,
                query_cache=self.query_cache,
            )  # fmt: skip
            with self._writer:
                with self.store.view() as view:
                    replay(fresh, view)
                self.state = fresh
                self.status = "ready"
        self._record_load(fresh)
        release_free_memory()  # what the load copied and dropped (onnxruntime's copies of the int8 codes among it)
        freeze_loaded_objects()
        return fresh

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
            open_vocab=(
                (state.open.n_words, state.open.n_postings, state.open.dropped)
                if state.embedder.open_rule is not None
                else None
            ),
        )

    def ready_state(self) -> ModelState:
        state = self.state
        if self.status == "ready" and state is not None:
            return state
        if self.status == "failed":
            raise Unavailable(f"collection '{self.name}' failed to load: {self.error}")
        if self.status == "recovering":
            raise Unavailable(
                f"collection '{self.name}' is rebuilding its index from its store after a failed write; retry shortly",
                headers={"Retry-After": "5"},
            )
        raise Unavailable(f"collection '{self.name}' is still loading; retry shortly", headers={"Retry-After": "5"})

    def _ready_store(self) -> DocumentStore:
        self.ready_state()
        assert self.store is not None
        return self.store

    # -- reads ---------------------------------------------------------------------------------

    def search(
        self,
        queries: Sequence[str],
        k: int,
        offset: int,
        *,
        ef_search: int | None = None,
        nprobe: int | None = None,
        open_counts: Sequence[OpenCounts | None] | None = None,
    ) -> list[QueryResult]:
        """The exact top k (after `offset`) of each short query text; `open_counts`: what weighs each one's new
        words where not this collection's own counts (a shard: the cluster's, cluster.fanout)."""
        self.require_type("documents", "search")
        self.ready_state()
        self._catch_up()
        state = self.ready_state()
        self._check_knobs(state, ef_search, nprobe)
        pool = self.pool(state)
        results = state.search(
            queries, k + offset, pool=pool, ef_search=ef_search, nprobe=nprobe, open_counts=open_counts
        )
        self.metrics.search_batch.labels(self.name).observe(len(queries))
        for result in results:
            self.metrics.candidates.labels(self.name).observe(result.candidates)
        return [result.page(offset) for result in results]

    def search_where(
        self,
        queries: Sequence[str],
        k: int,
        offset: int,
        request: FieldRequest,
        *,
        ef_search: int | None = None,
        nprobe: int | None = None,
        visible: Visibility = EVERYTHING,
        open_counts: Sequence[OpenCounts | None] | None = None,
    ) -> tuple[list[QueryResult], FieldAnswer]:
        """`search` among the documents matching `request.filter` (service.fields), with the facets it asks for
        over every matching document: the exact top k of f among them, never a short page while more match.
        `visible`: what the request's key may see (its filter ANDed to the request's: `where`); `open_counts` as for
        `search`."""
        self.require_type("documents", "search")
        self.ready_state()
        self._catch_up()
        state = self.ready_state()
        self._check_knobs(state, ef_search, nprobe)
        settings = self.settings
        with state.lock.read():
            types = {**request.types, **state.fields.types}
        check_facets(request.facets, types, settings.max_facets)
        # Without a filter (facets or fields only, an unrestricted key) the search is the unfiltered one.
        filtered = request.filter is not None or visible.restricted
        where = self.where(state, request.filter, visible, request.types) if filtered else None
        clause = where.clause if where is not None else None
        rows = state.matching(clause) if where is not None or request.facets else None
        if where is not None:  # evaluated once: for the search, the count and the facets
            where = dataclasses.replace(where, rows=rows)
        results = state.search(
            queries,
            k + offset,
            pool=self.pool(state),
            ef_search=ef_search,
            nprobe=nprobe,
            where=where,
            open_counts=open_counts,
        )
        size = request.facet_size or settings.facet_size
        facets = state.facets(rows, request.facets, size) if rows is not None and request.facets else {}
        self.metrics.search_batch.labels(self.name).observe(len(queries))
        for result in results:
            self.metrics.candidates.labels(self.name).observe(result.candidates)
        matched = int(rows.shape[0]) if rows is not None else state.table.n_live
        return [result.page(offset) for result in results], FieldAnswer(matched, facets)

    def count_values(
        self, request: FieldRequest, wanted: Mapping[str, Sequence[Any] | None]
    ) -> dict[str, list[tuple[Any, int]]]:
        """How many documents matching `request.filter` hold each value of `wanted` (field → values; None: every
        value), exactly: what a shard of the cluster answers when the router asks for the counts of values it did
        not list among its most frequent (cluster.facet_merge)."""
        self.require_type("documents", "search")
        self.ready_state()
        self._catch_up()
        state = self.ready_state()
        with state.lock.read():
            types = {**request.types, **state.fields.types}
        check_facets(list(wanted), types, len(wanted))
        where = self.where(state, request.filter, EVERYTHING, request.types) if request.filter is not None else None
        rows = state.matching(where.clause if where is not None else None)
        return state.value_counts(rows, wanted)

    def where(
        self, state: ModelState, node: Any, visible: Visibility = EVERYTHING, known: Mapping[str, str] | None = None
    ) -> Where:
        """A filter as sent (None: none), checked against the state's fields (and the types `known` beyond them:
        FieldRequest.types) and the bounds (422 naming the problem), ANDed with the filter of the request's key
        (`visible`, service.fields.visibility: the one place a key's filter joins a request's), with the planner of
        its queries (service.fields)."""
        settings = self.settings
        with state.lock.read():
            types = {**(known or {}), **state.fields.types}
        bounds = FilterBounds(settings.max_filter_clauses, settings.max_filter_terms, settings.max_filter_depth)
        planner = Planner(settings.filter_exact_docs, settings.filter_exact_fraction)
        clause = parse_filter(node, types, bounds) if node is not None else None
        return Where(visible.restrict(clause, types), planner)

    def similar(
        self,
        doc_id: str,
        k: int,
        offset: int,
        filter: Any = None,
        visible: Visibility = EVERYTHING,
        known: Mapping[str, str] | None = None,
    ) -> QueryResult:
        """The documents most like `doc_id`, the stored document itself being the query (it is left out); with
        `filter` (service.fields), among the documents matching it; `visible`: what the request's key may see (a
        document outside is not found, as the hits outside are never shown); `known`: as FieldRequest.types.

        The document is a long query: cut to SSI_MAX_PAGE_CHARS and its SSI_MAX_PAGE_WORDS heaviest words.
        """
        self.require_type("documents", "/similar")
        self.ready_state()
        self._catch_up()
        state = self.ready_state()
        where = self.where(state, filter, visible, known) if filter is not None or visible.restricted else None
        doc = self.get(doc_id, visible)
        text = cut_long_text(doc.as_document().full_text, self.settings.max_page_chars)
        (result,) = state.search(
            [text],
            k + offset,
            pool=self.pool(state),
            exclude=[doc_id],
            max_words=self.settings.max_page_words,
            where=where,
        )
        self.metrics.candidates.labels(self.name).observe(result.candidates)
        return result.page(offset)

    def require_type(self, wanted: CollectionType, route: str) -> None:
        """Refuse a route that does not serve this collection's type, before any work."""
        if self.type != wanted:
            raise WrongCollectionType(
                f"collection '{self.name}' holds {self.type}: {route} serves {wanted} collections only"
            )

    def pool(self, state: ModelState) -> int:
        return state.first_pool(self.settings.candidate_pool, self.settings.scan_pool)

    def get(self, doc_id: str, visible: Visibility = EVERYTHING) -> StoredDocument:
        """The stored document; one outside what the request's key may see (`visible`) is not found, with the same
        answer as an absent id, so that a guessed id never tells that it exists."""
        doc = self._ready_store().get(doc_id)
        if doc is None or not self.admitter(visible)(doc.fields):
            raise NotFound(f"no document with id {shown(doc_id)} in collection '{self.name}'")
        return doc

    def admitter(self, visible: Visibility) -> Callable[[dict[str, Any] | None], bool]:
        """Whether a stored document's fields are inside what `visible` may see (service.fields.visibility)."""
        if not visible.restricted:
            return lambda _: True
        state = self.ready_state()
        with state.lock.read():
            types = dict(state.fields.types)
        return visible.admitter(types)

    def field_types(self) -> dict[str, str]:
        """The collection's field types as its store fixed them (first use, a declaration, a write's `types`)."""
        return self._ready_store().field_types()

    def get_many(self, ids: Sequence[str], text_chars: int | None = None) -> dict[str, StoredDocument]:
        return self._ready_store().get_many(ids, text_chars)

    def _check_knobs(self, state: ModelState, ef_search: int | None, nprobe: int | None) -> None:
        index_type = state.config.index_type
        if ef_search is not None and index_type != "hnsw":
            raise InvalidInput(f"ef_search applies to an hnsw index; collection '{self.name}' uses {index_type}")
        if nprobe is not None and index_type != "ivf":
            raise InvalidInput(f"nprobe applies to an ivf index; collection '{self.name}' uses {index_type}")

    # -- writes --------------------------------------------------------------------------------

    def check_writable(self) -> None:
        if not self.settings.writes_enabled:
            raise Forbidden("writes are disabled on this server: set SSI_API_KEY")

    def put(
        self, docs: Sequence[Document], term: int | None = None, types: Mapping[str, str] | None = None
    ) -> list[int]:
        """Add or replace documents: durable in the store when this returns, and visible to searches. `term`: a
        replicated shard's primary term, recorded with the writes (cluster.replication); `types`: field types fixed
        first in the same transaction (a shard's: the cluster's types of the names the write uses)."""
        self.check_writable()
        store = self._ready_store()
        with self._writer:
            state = self.ready_state()
            prepared = state.embedder.prepare(docs)
            seqs = store.put(docs, term, types)
            fields = FieldWrites.of(docs, store.field_types()) if any(d.fields for d in docs) else None
            self._apply(state, lambda: self._apply_committed(state, prepared, [], seqs[-1], fields), seqs[-1])
            self._after_write(state, "put", len(docs))
        return seqs

    def delete(self, doc_id: str, term: int | None = None) -> int:
        self.check_writable()
        store = self._ready_store()
        with self._writer:
            state = self.ready_state()
            seq = store.delete(doc_id, term)
            if seq is None:
                raise NotFound(f"no document with id {shown(doc_id)} in collection '{self.name}'")
            self._apply(state, lambda: self._apply_committed(state, None, [doc_id], seq), seq)
            self._after_write(state, "delete", 1)
        return seq

    def follow(self, change: Callable[[DocumentStore], None]) -> None:
        """Run `change` on the store (writes made elsewhere: a replica's catch-up, cluster.replication) and make
        what it committed visible, replayed from the store's write log as a worker of a group replays the others'."""
        store = self._ready_store()
        with self._writer:
            state = self.ready_state()
            change(store)
            self._apply(state, lambda: self._replay_store(state, store), store.last_seq)
            self._after_write(state, "put", 0)

    @staticmethod
    def _replay_store(state: ModelState, store: DocumentStore) -> None:
        with store.view() as view:
            replay(state, view)

    def _apply_committed(
        self,
        state: ModelState,
        prepared: Prepared | None,
        deleted: list[str],
        seq: int,
        fields: FieldWrites | None = None,
    ) -> None:
        """Make this process's committed write visible. Alone, its writes are the only ones; in a group, other
        workers' writes may have come between this state's and this one, so the log is replayed in order."""
        if not self.shared:
            apply_writes(state, prepared, deleted, seq, fields)
            return
        assert self.store is not None
        self._replay_store(state, self.store)

    def _apply(self, state: ModelState, apply: Callable[[], None], seq: int) -> None:
        """Run a committed write's in-memory apply; if it fails, stop serving the state and rebuild it."""
        try:
            apply()
        except Exception as exc:
            state.broken = True
            self.status = "recovering"
            log.error(
                "[%s] write %d is committed but applying it to the index failed; rebuilding the index from the store",
                self.name,
                seq,
                exc_info=True,
            )
            self._recovery_thread = threading.Thread(
                target=self._recover, args=(state.bundle,), name=f"recover-{self.name}", daemon=True
            )
            self._recovery_thread.start()
            raise Unavailable(
                f"the write is committed (write {seq}) but could not be applied to the index "
                f"({type(exc).__name__}); collection '{self.name}' is rebuilding its index from its store: "
                "it will be visible to searches when /readyz is ready again",
                headers={"Retry-After": "5"},
            ) from None

    def _recover(self, bundle: Bundle) -> None:
        """Rebuild the state from the latest snapshot and the store's write log, then serve it again."""
        delay = min(1.0, self.settings.snapshot_interval)
        while not self._stop.is_set():
            try:
                state = self._reopen(bundle)
                log.info("[%s] index rebuilt from the store at write %d: serving again", self.name, state.seq)
                if state.saved_seq != state.seq:
                    self._wake.set()
                return
            except Exception:
                log.exception("[%s] rebuilding the index failed; retrying in %.1fs", self.name, delay)
                self._stop.wait(delay)
                delay = min(2 * delay, self.settings.snapshot_retry_max)

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
        """Swap to a (new) bundle. The new state is built while the old one keeps serving; in a worker group the
        answer comes once every worker serves it (service.group_reload), or after SSI_RELOAD_WAIT seconds."""
        if not self.settings.reloads_enabled:
            raise Forbidden("reloads are disabled on this server: set SSI_ADMIN_KEY or SSI_API_KEY")
        store = self._ready_store()
        path = self.resolve_bundle(requested)
        if not self._reloading.acquire(blocking=False):
            raise Conflict(f"a reload of collection '{self.name}' is already running")
        try:
            started = time.perf_counter()
            previous_hash = self.ready_state().bundle.content_hash
            try:
                state = self._swap_to(store, path)
            except BundleError as exc:
                raise InvalidInput(f"cannot reload: {exc}") from None
        finally:
            self._reloading.release()
        bundle = state.bundle
        answer: dict[str, Any] = {
            "collection": self.name,
            "bundle": str(path),
            "previous_content_hash": previous_hash,
            "content_hash": bundle.content_hash,
            "form": bundle.manifest.form,
            "documents": state.table.n_live,
            "loaded_from": state.report.source,
        }
        if self._group is not None:
            served = self._group.publish(path, bundle.content_hash)
            self._generation = served.generation
            self._group.acknowledge(served.generation)
            serving = self._group.wait(served.generation, self.settings.reload_wait)
            answer["workers"] = {"serving": serving, "of": self.settings.workers}
        answer["seconds"] = round(time.perf_counter() - started, 4)
        return answer

    def _swap_to(self, store: DocumentStore, path: Path) -> ModelState:
        """Load the bundle at `path`, build its state off to the side, bring it up to the store and serve it."""
        # Upkeep waits: trimming the write log now could cut writes the new state still has to replay.
        with self._upkeep():
            state = self._built(store, path)
            return self._serve(store, state, path)

    def _built(self, store: DocumentStore, path: Path) -> ModelState:
        """The state of the bundle at `path` over this collection's store, built while the current one serves."""
        return open_state(
            collection=self.name, bundle=_load_bundle(path), store=store, settings=self.settings,
            query_cache=self.query_cache,
        )  # fmt: skip

    def _serve(self, store: DocumentStore, state: ModelState, path: Path) -> ModelState:
        """Bring `state` up to the store and swap it in (callers hold the upkeep locks, so the log is whole)."""
        with self._writer:
            # Writes that landed while the new state was being built are replayed into it first.
            with store.view() as view:
                replay(state, view)
            previous, self.state = self.state, state
            self.bundle_path = path
            self._record_load(state)
        del previous  # its objects go with the last request still using it
        release_free_memory()
        freeze_loaded_objects()
        log.info("[%s] serving %s (%s)", self.name, path, state.bundle.content_hash[:12])
        if state.saved_seq != state.seq:
            self._wake.set()
        return state

    # A reload in two steps, for a sharded deployment whose shards must all swap or none (cluster.shard_server):
    # every shard builds the new state first, and swaps only once every shard has.

    def prepare_reload(self, path: Path) -> ModelState:
        """Build the state of the bundle at `path` beside the served one; serve it with `commit_reload`."""
        store = self._ready_store()
        try:
            with self._upkeep():
                return self._built(store, path)
        except BundleError as exc:
            raise InvalidInput(f"cannot reload: {exc}") from None

    def commit_reload(self, state: ModelState, path: Path) -> ModelState:
        """Serve a state `prepare_reload` built, brought up to the writes made since."""
        store = self._ready_store()
        with self._upkeep():
            try:
                return self._serve(store, state, path)
            except StoreError:  # the log was trimmed past it meanwhile: build it again from the snapshots
                return self._serve(store, self._built(store, path), path)

    def _follow_group(self) -> None:
        """A worker of a group: serve the bundle another worker reloaded, if it is newer than this one's."""
        assert self._group is not None and self.store is not None
        served = self._group.read()
        if served is None or served.generation <= self._generation:
            return
        with self._reloading:
            state = self.state
            if state is None or state.bundle.content_hash != served.content_hash:
                try:
                    self._swap_to(self.store, Path(served.path))
                except Exception:  # the reload's answer counts this worker out; it keeps serving what it has
                    log.exception("[%s] could not load the bundle another worker reloaded: %s", self.name, served.path)
                    self._generation = served.generation
                    return
            self._generation = served.generation
            self._group.acknowledge(served.generation)

    # -- snapshots -----------------------------------------------------------------------------

    def snapshot(self) -> Path | None:
        """Write the current state's snapshot if it has unsaved writes; returns its folder.

        Writes go on meanwhile: the capture takes the state's read lock, not the writer lock.
        """
        with self._upkeep():
            return self._snapshot()

    def _snapshot(self) -> Path | None:
        state = self.state
        if state is None or state.broken or state.saved_seq == state.seq:
            return None
        started = time.perf_counter()
        captured = capture(state)
        held = time.perf_counter() - started
        path = write_snapshot(state.folder, captured.materialize())
        state.saved_seq = max(state.saved_seq or 0, captured.seq)
        self.metrics.snapshots.labels(self.name).inc()
        log.info(
            "[%s] snapshot at write %d saved in %.2fs (captured in %.3fs): %s",
            self.name,
            captured.seq,
            time.perf_counter() - started,
            held,
            path,
        )
        self._trim(state)
        return path

    def _trim(self, state: ModelState) -> None:
        """Drop what no snapshot kept can use: write-log entries before the oldest one, dead cache folders."""
        assert self.store is not None
        kept = [seq_of(path) for path in snapshots(state.folder)]
        if kept:
            removed = self.store.trim_log(min(kept))
            if removed:
                log.info("[%s] write log trimmed up to write %d (%d entries)", self.name, min(kept), removed)
            with self.store.view() as view:
                floor = view.log_floor
            prune_cache(state.folder.parent, state.folder, state.store_uuid, floor)
            self.store.checkpoint()
        self._record_disk(state)

    def _record_disk(self, state: ModelState) -> None:
        if self.store is None:
            return
        self.metrics.store_bytes.labels(self.name).set(self.store.disk_bytes())
        self.metrics.snapshot_bytes.labels(self.name).set(disk_bytes(state.folder.parent))
        self.metrics.write_log_entries.labels(self.name).set(self.store.log_entries())
        if state.saved_seq is not None:  # last: once it equals the write seq, the figures above are current
            self.metrics.snapshot_seq.labels(self.name).set(state.saved_seq)

    def compact(self) -> bool:
        """Drop dead rows online: build a compacted state beside the live one, catch it up, swap it in (every
        worker of a group compacts its own state; the upkeep worker then snapshots it).

        Searches keep using the live state throughout; writes wait only for the catch-up (the writes
        committed during the build, replayed from the store) and the swap.
        """
        with self._upkeep():
            state = self.state
            if state is None or state.broken or self.store is None or not needs_compaction(state, self.settings):
                return False
            started = time.perf_counter()
            before = state.table.rows
            fresh = compacted(state)
            with self._writer:
                if self.state is not state or state.broken:
                    return False
                with self.store.view() as view:
                    replay(fresh, view)
                self.state = fresh
            del state
            gc.collect()
            release_free_memory()  # the old index's pages, or RSS steps up at every compaction
            freeze_loaded_objects()
            self.metrics.compactions.labels(self.name).inc()
            self._record_state(fresh)
            log.info(
                "[%s] compacted online at write %d: %d rows -> %d in %.2fs",
                self.name,
                fresh.seq,
                before,
                fresh.table.rows,
                time.perf_counter() - started,
            )
            if self._keeps_upkeep():  # in a group, the upkeep worker alone writes snapshots
                self._snapshot()  # the renumbered rows need their own snapshot; older ones can go
            return True

    def _maintenance_loop(self) -> None:
        """Snapshot (and compact first if needed) after `snapshot_every_writes` writes, or
        `snapshot_interval` seconds after the first unsaved one; back off exponentially after a failure."""
        unsaved_since: float | None = None
        base_delay = min(1.0, self.settings.snapshot_interval)
        delay = base_delay
        retry_at = 0.0
        failures = 0
        while not self._stop.is_set():
            self._wake.wait(timeout=base_delay)
            self._wake.clear()
            if self._stop.is_set():
                return
            if self.shared:
                try:  # an idle worker stays close to the others' writes, so its next search has little to replay
                    self._catch_up()
                except Exception:
                    log.exception("[%s] catching up with the other workers' writes failed", self.name)
                try:  # and serves what another worker reloaded
                    self._follow_group()
                except Exception:
                    log.exception("[%s] following the group's reload failed", self.name)
                if not self._keeps_upkeep():
                    # Its own rows still need compacting: the others' replaced and deleted documents become dead
                    # rows here too, and without it they pile up for as long as the group serves (an hour's
                    # soak: ~200k dead rows in the second worker, batch latency 3.5× by the end).
                    try:
                        self.compact()
                    except Exception:
                        log.exception("[%s] compaction failed", self.name)
                    continue
            state = self.state
            if state is None or state.broken or state.saved_seq == state.seq:
                unsaved_since = None
                continue
            now = time.monotonic()
            unsaved_since = unsaved_since or now
            pending = state.seq - (state.saved_seq or 0)
            due = (
                pending >= self.settings.snapshot_every_writes or now - unsaved_since >= self.settings.snapshot_interval
            )
            if not due or now < retry_at:
                continue
            try:
                if not self.compact():
                    self.snapshot()
                unsaved_since = None
                delay, failures = base_delay, 0
            except Exception as exc:  # the store's log still has every write; try again later
                failures += 1
                self.metrics.snapshot_failures.labels(self.name).inc()
                if disk_full(exc):  # an operator's condition, not a bug: the reason, no traceback
                    log.error(
                        "[%s] snapshot failed (%d in a row): %s; the last snapshot and the store's log stay "
                        "good; retrying in %.1fs", self.name, failures, exc, delay,
                    )  # fmt: skip
                else:
                    log.exception("[%s] snapshot failed (%d in a row); retrying in %.1fs", self.name, failures, delay)
                retry_at = time.monotonic() + delay
                delay = min(2 * delay, self.settings.snapshot_retry_max)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"name": self.name, "type": self.type, "status": self.status}
        if self._group is not None:
            # Ready once every worker of the group is: before, only some listen, and a client's keep-alive
            # connections made then would all stay on them.
            info["workers_loaded"] = self._group.loaded()
            if self.status == "ready" and info["workers_loaded"] < self.settings.workers:
                info["status"] = "loading"
        if self.error:
            info["error"] = self.error
        if self.state is not None:
            info.update(self.state.describe())
            info["content_hash"] = self.state.bundle.content_hash
        return info
