"""The searchable state of one bundle over one collection's documents, and how it is built.

A `ModelState` holds everything that depends on the model: the query encoder, the cached V d of
every row, the rows' tf-idf vectors (the lexical index) and the FAISS index. It is built once per
bundle — from the newest usable snapshot plus a replay of the writes logged after it, or, with no
usable snapshot, by embedding every stored document — and then only changes through `apply`.

A reload builds a new `ModelState` off to the side and the collection swaps its reference, so
requests that already hold the old state finish on it undisturbed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from service.encoder import QueryEncoder
from service.index import IndexConfig, IndexLoadError, VectorIndex
from service.lexical import LexicalIndex
from service.progress import progress
from service.rerank import Ranked, exact_top
from service.rows import EmbeddingRows, RowTable
from service.rwlock import ReadWriteLock
from service.settings import Settings
from service.snapshot import SnapshotData, SnapshotError, cache_folder, read_snapshot, snapshots
from service.store import DocumentStore, StoreView
from ssi.bundle import Bundle
from ssi.records import Document

log = logging.getLogger(__name__)


def index_config(settings: Settings) -> IndexConfig:
    return IndexConfig(
        kind=settings.index_kind,
        hnsw_m=settings.hnsw_m,
        hnsw_ef_construction=settings.hnsw_ef_construction,
        hnsw_ef_search=settings.hnsw_ef_search,
        ivf_nlist=settings.ivf_nlist,
        ivf_nprobe=settings.ivf_nprobe,
        threads=settings.threads,
    )


@dataclass
class LoadReport:
    """How a state was obtained: what a restart test checks to know the cache was used."""

    source: str  # "cache" or "computed"
    seconds: float = 0.0
    embedded: int = 0  # documents whose V d was computed during the load
    replayed: int = 0  # documents re-applied from the write log after the snapshot
    snapshot: str | None = None
    compacted: bool = False
    rejected_snapshots: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class QueryResult:
    doc_ids: list[str]
    scores: list[float]
    semantic: list[float]
    lexical: list[float]
    query_words: int  # distinct query words in the vocabulary
    candidates: int  # rows scored exactly


@dataclass(frozen=True, slots=True)
class Prepared:
    """Documents featurized and embedded, ready to apply after the store has committed them."""

    ids: list[str]
    tfidf: sp.csr_matrix
    embeddings: np.ndarray


@dataclass
class Capture:
    """What a snapshot needs, taken under the writer lock; `materialize` does the slow part outside it."""

    seq: int
    store_uuid: str
    bundle_hash: str
    index_tag: str
    index_blob: np.ndarray
    embeddings: np.ndarray
    lexical: LexicalIndex
    doc_ids: list[str]
    live: np.ndarray

    def materialize(self) -> SnapshotData:
        return SnapshotData(
            seq=self.seq,
            store_uuid=self.store_uuid,
            bundle_hash=self.bundle_hash,
            index_tag=self.index_tag,
            index_blob=self.index_blob,
            embeddings=self.embeddings,
            tfidf=self.lexical.matrix(),
            doc_ids=self.doc_ids,
            live=self.live,
        )


class ModelState:
    def __init__(
        self,
        *,
        bundle: Bundle,
        encoder: QueryEncoder,
        config: IndexConfig,
        index: VectorIndex,
        embeddings: EmbeddingRows,
        lexical: LexicalIndex,
        table: RowTable,
        seq: int,
        store_uuid: str,
        folder: Path,
        report: LoadReport,
    ) -> None:
        if not (index.ntotal == embeddings.rows == lexical.rows == table.rows):
            raise ValueError(
                f"row counts disagree: index {index.ntotal}, embeddings {embeddings.rows}, "
                f"tf-idf {lexical.rows}, ids {table.rows}"
            )
        self.bundle = bundle
        self.encoder = encoder
        self.config = config
        self.index = index
        self.embeddings = embeddings
        self.lexical = lexical
        self.table = table
        self.seq = seq
        self.store_uuid = store_uuid
        self.folder = folder
        self.report = report
        # The write sequence the newest snapshot of this state reflects (None: not saved yet).
        self.saved_seq: int | None = seq if report.source == "cache" else None
        self.lock = ReadWriteLock()
        # V transposed once (D × N, C order): documents are embedded as X Vᵀ with X sparse.
        self._vt = np.ascontiguousarray(np.asarray(bundle.V, dtype=np.float32).T)

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def open(cls, *, collection: str, bundle: Bundle, store: DocumentStore, settings: Settings) -> ModelState:
        """The state for `bundle` over `store`'s documents at their latest write, from cache when possible."""
        started = time.perf_counter()
        n_dims, vocab_size = bundle.manifest.n_dims, bundle.manifest.vocab_size
        encoder = QueryEncoder(bundle.encoder_path, vocab_size, n_dims, settings.threads)
        encoder.check_against(bundle.U)
        config = index_config(settings)
        folder = cache_folder(settings.index_dir, collection, bundle.content_hash, store.uuid, config.tag())
        common = dict(bundle=bundle, encoder=encoder, config=config, store_uuid=store.uuid, folder=folder)
        with store.view() as view:
            state: ModelState | None = None
            rejected: list[str] = []
            for path in snapshots(folder):
                try:
                    state = cls._from_snapshot(path, view, **common)
                    break
                except (SnapshotError, IndexLoadError, ValueError) as exc:
                    log.warning("[%s] ignoring snapshot: %s", collection, exc)
                    rejected.append(str(exc))
            if state is None:
                state = cls._compute(view, settings, **common)
            else:
                changed = view.changed_since(state.seq)
                if changed:
                    state._replay(view, changed)
                state.report.replayed = len(changed)
                state.seq = view.last_seq
                if state.table.rows and state.table.n_dead / state.table.rows > settings.compact_dead_fraction:
                    state = state.compacted()
            state.report.rejected_snapshots = rejected
        state.report.seconds = time.perf_counter() - started
        log.info(
            "[%s] %s index ready: %d documents (%d rows) at write %d, from %s in %.2fs (embedded %d, replayed %d)",
            collection,
            config.kind,
            state.table.n_live,
            state.table.rows,
            state.seq,
            state.report.snapshot or "a fresh computation",
            state.report.seconds,
            state.report.embedded,
            state.report.replayed,
        )
        return state

    @classmethod
    def _from_snapshot(cls, path: Path, view: StoreView, **common: Any) -> ModelState:
        bundle: Bundle = common["bundle"]
        config: IndexConfig = common["config"]
        n_dims = bundle.manifest.n_dims
        data = read_snapshot(
            path,
            bundle_hash=bundle.content_hash,
            store_uuid=common["store_uuid"],
            index_tag=config.tag(),
            n_dims=n_dims,
            vocab_size=bundle.manifest.vocab_size,
        )
        if data.seq > view.last_seq:
            raise SnapshotError(f"{path}: reflects write {data.seq}, but the store ends at {view.last_seq}")
        index = VectorIndex.load(path / "index.faiss", config, n_dims)
        report = LoadReport(source="cache", snapshot=str(path))
        return cls(
            index=index,
            embeddings=EmbeddingRows(data.embeddings, n_dims),
            lexical=LexicalIndex(bundle.lexical, data.tfidf),
            table=RowTable(data.doc_ids, data.live),
            seq=data.seq,
            report=report,
            **common,
        )

    @classmethod
    def _compute(cls, view: StoreView, settings: Settings, **common: Any) -> ModelState:
        bundle: Bundle = common["bundle"]
        config: IndexConfig = common["config"]
        n_dims = bundle.manifest.n_dims
        vt = np.ascontiguousarray(np.asarray(bundle.V, dtype=np.float32).T)
        total = view.count
        embeddings = np.empty((total, n_dims), dtype=np.float32)
        parts: list[sp.csr_matrix] = []
        doc_ids: list[str] = []
        row = 0
        with progress("embedding documents (V d)", total) as advance:
            for batch in view.iter_batches(settings.embed_batch):
                tfidf = bundle.vocab.featurize([doc.as_document().full_text for doc in batch])
                embeddings[row : row + len(batch)] = tfidf @ vt
                parts.append(tfidf)
                doc_ids.extend(doc.id for doc in batch)
                row += len(batch)
                advance(len(batch))
        if row != total:
            raise RuntimeError(f"the store listed {total} documents but yielded {row}")
        tfidf_all = sp.vstack(parts, format="csc") if parts else sp.csc_matrix((0, bundle.manifest.vocab_size))
        started = time.perf_counter()
        index = VectorIndex.build(config, n_dims, embeddings, np.arange(total, dtype=np.int64))
        log.info("built the %s index over %d vectors in %.2fs", config.kind, total, time.perf_counter() - started)
        return cls(
            index=index,
            embeddings=EmbeddingRows(embeddings, n_dims),
            lexical=LexicalIndex(bundle.lexical, tfidf_all),
            table=RowTable(doc_ids),
            seq=view.last_seq,
            report=LoadReport(source="computed", embedded=total),
            **common,
        )

    def _replay(self, view: StoreView, changed: list[str]) -> None:
        current = view.get_many(changed)
        puts = [current[doc_id] for doc_id in changed if doc_id in current]
        deletes = [doc_id for doc_id in changed if doc_id not in current]
        prepared = self.prepare([doc.as_document() for doc in puts]) if puts else None
        self.apply(prepared, deletes, view.last_seq)

    def compacted(self) -> ModelState:
        """The same documents without dead rows, renumbered (rebuilds the FAISS index from cached V d)."""
        rows = np.flatnonzero(self.table.live)
        embeddings = self.embeddings.view()[rows]
        index = VectorIndex.build(
            self.config, self.embeddings.dim, embeddings, np.arange(rows.shape[0], dtype=np.int64)
        )
        report = self.report
        report.compacted = True
        log.info("compacted the index: %d rows -> %d", self.table.rows, rows.shape[0])
        state = ModelState(
            bundle=self.bundle,
            encoder=self.encoder,
            config=self.config,
            index=index,
            embeddings=EmbeddingRows(embeddings, self.embeddings.dim),
            lexical=self.lexical.select(rows),
            table=RowTable([self.table.doc_ids[r] for r in rows.tolist()]),
            seq=self.seq,
            store_uuid=self.store_uuid,
            folder=self.folder,
            report=report,
        )
        state.saved_seq = None  # the rows were renumbered: the snapshot on disk no longer matches
        return state

    # -- searching -----------------------------------------------------------------------------

    def featurize(self, texts: Sequence[str]) -> sp.csr_matrix:
        return self.bundle.vocab.featurize(list(texts))

    def search(
        self,
        queries: Sequence[str],
        want: int,
        *,
        pool: int,
        ef_search: int | None = None,
        nprobe: int | None = None,
        exclude: Sequence[str | None] | None = None,
    ) -> list[QueryResult]:
        """The exact top `want` documents for each query text (see service.rerank for why it is exact).

        `exclude[i]`, when given, is a document id left out of query i's results (the query document
        of "more like this").
        """
        tfidf = self.featurize(queries)
        query_embeddings = self.encoder.encode(tfidf.toarray())
        exclude = list(exclude) if exclude is not None else [None] * len(queries)
        asks = [want + (1 if excluded is not None else 0) for excluded in exclude]
        # A flat or IVF search costs its scan whatever K is (the caller's pool is large for them);
        # an HNSW search grows with K, which bounds how far K is widened (service.rerank).
        scan = self.config.kind != "hnsw"
        results: list[QueryResult] = []
        with self.lock.read():
            table, lexical, embeddings = self.table, self.lexical, self.embeddings.view()
            n_live, live, bits = table.n_live, table.live, table.live_bits()
            first_k = min(max(pool, max(asks, default=1)), max(1, n_live))
            first = None
            if n_live:
                first = self.index.search(query_embeddings, first_k, live_bits=bits, ef_search=ef_search, nprobe=nprobe)
            for i in range(len(queries)):
                start, end = int(tfidf.indptr[i]), int(tfidf.indptr[i + 1])
                if end == start or first is None:
                    results.append(QueryResult([], [], [], [], query_words=end - start, candidates=0))
                    continue
                uq = query_embeddings[i]

                def semantic(k: int, i: int = i, uq: np.ndarray = uq) -> tuple[np.ndarray, np.ndarray]:
                    if k == first_k:
                        return first[0][i], first[1][i]
                    scores, found = self.index.search(
                        uq[None, :], k, live_bits=bits, ef_search=ef_search, nprobe=nprobe
                    )
                    return scores[0], found[0]

                ranked: Ranked = exact_top(
                    uq,
                    asks[i],
                    semantic,
                    lexical.query(tfidf.indices[start:end], tfidf.data[start:end]),
                    embeddings,
                    live,
                    n_live,
                    pool,
                    scan=scan,
                )
                ids = [table.doc_ids[row] for row in ranked.rows.tolist()]
                chosen = [j for j, doc_id in enumerate(ids) if doc_id != exclude[i]][:want]
                results.append(
                    QueryResult(
                        doc_ids=[ids[j] for j in chosen],
                        scores=ranked.scores[chosen].tolist(),
                        semantic=ranked.semantic[chosen].tolist(),
                        lexical=ranked.lexical[chosen].tolist(),
                        query_words=end - start,
                        candidates=ranked.candidates,
                    )
                )
        return results

    # -- writing -------------------------------------------------------------------------------

    def prepare(self, docs: Sequence[Document]) -> Prepared:
        tfidf = self.featurize([doc.full_text for doc in docs])
        embeddings = np.ascontiguousarray(tfidf @ self._vt, dtype=np.float32)
        return Prepared(ids=[doc.id for doc in docs], tfidf=tfidf, embeddings=embeddings)

    def apply(self, prepared: Prepared | None, deleted: Sequence[str], seq: int) -> None:
        """Make committed writes visible: new rows for `prepared`, dead rows for replaced and deleted ids.

        The caller holds the collection's writer lock (one writer at a time) and has committed the
        writes to the store; searches are excluded only while the in-memory arrays change.
        """
        lexical = self.lexical.appended(prepared.tfidf) if prepared is not None else self.lexical
        with self.lock.write():
            for doc_id in deleted:
                self.table.kill(doc_id)
            if prepared is not None and prepared.ids:
                for doc_id in prepared.ids:
                    self.table.kill(doc_id)
                first = self.table.append(prepared.ids)
                if self.embeddings.append(prepared.embeddings) != first:
                    raise RuntimeError("embedding rows out of step with the row table")
                self.index.add(prepared.embeddings, np.arange(first, first + len(prepared.ids), dtype=np.int64))
                self.lexical = lexical
            self.seq = max(self.seq, seq)
        if self.lexical.needs_merge:
            merged = self.lexical.merged()
            with self.lock.write():
                self.lexical = merged

    def capture(self) -> Capture:
        """The state as of now, for a snapshot. The caller holds the writer lock so nothing changes meanwhile."""
        with self.lock.read():
            return Capture(
                seq=self.seq,
                store_uuid=self.store_uuid,
                bundle_hash=self.bundle.content_hash,
                index_tag=self.config.tag(),
                index_blob=self.index.serialize(),
                # Filled rows are never written again, so a view is a stable copy.
                embeddings=self.embeddings.view(),
                lexical=self.lexical,
                doc_ids=list(self.table.doc_ids),
                live=self.table.live.copy(),
            )

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.config.kind,
            "documents": self.table.n_live,
            "rows": self.table.rows,
            "dead_rows": self.table.n_dead,
            "seq": self.seq,
            "nlist": self.index.nlist,
            "loaded_from": self.report.source,
            "load_seconds": round(self.report.seconds, 4),
            "embedded_on_load": self.report.embedded,
            "replayed_on_load": self.report.replayed,
            "compacted_on_load": self.report.compacted,
        }
