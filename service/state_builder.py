"""Building a collection's `ModelState` for a bundle: from a snapshot plus the write log, or computed.

`open_state` takes the newest usable snapshot of the cache folder (its key: bundle content hash +
store + index build settings), checks it against the store and replays the writes logged after
it; with no usable snapshot it embeds every stored document and builds the index (a hybrid bundle's
e(d) taken from the collection's sentence cache where a bundle with the same encoder, or a write,
left them: service.sentence_cache). A snapshot that cannot be used (damaged, from another store,
older than the trimmed write log) is removed, so it is not read and refused again on every start.
A state with too many dead rows is compacted (renumbered, the FAISS index rebuilt from the cached
embeddings): here at load, and online by the collection (`compacted` reads a live state under its
read lock only for a moment).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from service.bulk_featurize import BulkFeaturizer
from service.embedding import Embedder
from service.featurize_pool import featurized, pool_workers
from service.index import IndexConfig, IndexLoadError, VectorIndex
from service.lexical import LexicalIndex
from service.model_state import LoadReport, ModelState
from service.progress import progress
from service.quantized import Codes
from service.query_vectors import QueryVectorCache
from service.rows import RowTable
from service.sentence_cache import SentenceBuild, SentenceCache
from service.settings import Settings
from service.snapshot import SnapshotError, cache_folder, discard, read_snapshot, snapshots
from service.store import DocumentStore, StoredDocument, StoreView
from service.writes import replay
from ssi.bundle import Bundle
from ssi.fields.index import FieldIndex, bitmap_of
from ssi.open_vocab import OpenPostings
from ssi.sentence import Precision
from ssi.tokenize import tokenize
from ssi.weighting import average_length

log = logging.getLogger(__name__)


def keyed_precision(embedder: Embedder | None) -> Precision | None:
    """The sentence graph that serves in `embedder` where it is not its bundle's own, else None (IndexConfig's
    `sentence_precision`): a snapshot's e(d) is then kept apart from the bundle's, and found again only by a server
    that serves the same graph (another CPU may not: ssi.sentence.served_precision)."""
    if embedder is None or embedder.sentence is None or embedder.bundle.sentence is None:
        return None
    served = embedder.sentence.precision
    return None if served == embedder.bundle.sentence.precision else served


def index_config(settings: Settings, sentence_precision: Precision | None = None) -> IndexConfig:
    """What is built and searched for `settings`; `sentence_precision`: `keyed_precision` of the embedder the index's
    vectors come from."""
    return IndexConfig(
        index_type=settings.index_type,
        hnsw_m=settings.hnsw_m,
        hnsw_ef_construction=settings.hnsw_ef_construction,
        hnsw_ef_search=settings.hnsw_ef_search,
        hnsw_metric=settings.hnsw_metric,
        ivf_nlist=settings.ivf_nlist,
        ivf_nprobe=settings.ivf_nprobe,
        threads=settings.threads,
        int8_gemm=settings.int8_gemm,
        lexical_statistics=settings.open_vocab_statistics if settings.open_vocab else "bundle",
        sentence_precision=sentence_precision,
    )


def open_state(
    *,
    collection: str,
    bundle: Bundle,
    store: DocumentStore,
    settings: Settings,
    start_up_threads: int | None = None,
    query_cache: QueryVectorCache | None = None,
) -> ModelState:
    """The state for `bundle` over `store`'s documents at their latest write, from cache when possible.

    `start_up_threads`: a collection's first load, which nobody is served from yet, encodes a hybrid bundle's documents
    with that many threads (`Embedder.start_up_encoder`); a reload's build leaves the cores to the serving workers.
    `query_cache`: the process's cache of query vectors (service.query_vectors), None: off."""
    started = time.perf_counter()
    embedder = Embedder(
        bundle, settings.threads, open_vocab=settings.open_vocab, statistics=settings.open_vocab_statistics,
        precision=settings.encoder_precision, query_cache=query_cache, query_graph=settings.query_graph,
    )  # fmt: skip
    if embedder.sentence is not None:
        embedder.sentence_cache = SentenceCache.of(
            settings.index_dir / collection, bundle, embedder.sentence.encode, embedder.sentence.precision
        )
    config = index_config(settings, keyed_precision(embedder))
    folder = cache_folder(settings.index_dir, collection, bundle.content_hash, store.uuid, config.tag())
    common = dict(bundle=bundle, embedder=embedder, config=config, store_uuid=store.uuid, folder=folder)
    with store.view() as view:
        state: ModelState | None = None
        for path in snapshots(folder):
            try:
                state = from_snapshot(path, view, avg_len=settings.open_vocab_avg_len, **common)
                break
            except (SnapshotError, IndexLoadError, ValueError) as exc:
                log.warning("[%s] ignoring snapshot %s (removed it): %s", collection, path.name, exc)
                discard(path)
        if state is None:
            state = computed(view, settings, start_up_threads=start_up_threads, **common)
        else:
            state.open.max_words = settings.open_vocab_words  # the cap set now, not the one the snapshot saved
            state.report.replayed = replay(state, view)
            if needs_compaction(state, settings):
                state = compacted(state)
                state.report.compacted = True
        attach_fields(state, view)
    kept = embedder.sentence_cache
    if kept is not None:
        state.report.encoded, state.report.sentence_cached = kept.counts.encoded, kept.counts.cached
        log.info(
            "[%s] sentence vectors (the encoder's %s graph): %d documents encoded, %d from the sentence cache %s",
            collection,
            embedder.sentence.precision if embedder.sentence is not None else "-",
            kept.counts.encoded,
            kept.counts.cached,
            kept.folder,
        )
    state.report.seconds = time.perf_counter() - started
    log.info(
        "[%s] %s index ready: %d documents (%d rows) at write %d, from %s in %.2fs (embedded %d, replayed %d)",
        collection,
        config.index_type,
        state.table.n_live,
        state.table.rows,
        state.seq,
        state.report.snapshot or "a fresh computation",
        state.report.seconds,
        state.report.embedded,
        state.report.replayed,
    )
    return state


def attach_fields(state: ModelState, view: StoreView) -> None:
    """Index the fields of the state's live rows as the store `view` holds them (ssi.fields.index): the state
    must be at the view's write (replayed up to it). Rebuilt rather than saved in snapshots: the store has them,
    and a compaction renumbers the rows."""
    row_of = state.table.row_of
    rows = ((row_of[doc_id], fields) for doc_id, fields in view.iter_fields() if doc_id in row_of)
    index = FieldIndex.build(view.field_types(), rows)
    index.dead = bitmap_of(np.flatnonzero(~state.table.live))
    with state.lock.write():
        state.fields = index


def needs_compaction(state: ModelState, settings: Settings) -> bool:
    """Whether dead rows (replaced or deleted documents) are more than SSI_COMPACT_DEAD_FRACTION of the index."""
    return bool(state.table.rows) and state.table.n_dead / state.table.rows > settings.compact_dead_fraction


def from_snapshot(path: Path, view: StoreView, avg_len: float | None = None, **common: Any) -> ModelState:
    """The state saved in snapshot `path`, as of its write sequence (the caller replays what came after).
    `avg_len`: the one its lexical rows must have been weighed with (collection statistics; a shard's, the
    cluster's), else it is refused and the index computed again with it."""
    bundle: Bundle = common["bundle"]
    config: IndexConfig = common["config"]
    embedder: Embedder = common["embedder"]
    index_dims = bundle.manifest.index_dims
    data = read_snapshot(
        path,
        bundle_hash=bundle.content_hash,
        store_uuid=common["store_uuid"],
        index_tag=config.tag(),
        index_dims=index_dims,
        vocab_size=bundle.manifest.vocab_size,
        open_vocab=embedder.open_rule is not None,
    )
    if data.seq > view.last_seq:
        raise SnapshotError(f"{path}: reflects write {data.seq}, but the store ends at {view.last_seq}")
    if data.seq < view.log_floor:
        raise SnapshotError(f"{path}: reflects write {data.seq}, but the write log was trimmed up to {view.log_floor}")
    if (path / "index.faiss").exists():
        index = VectorIndex.load(path / "index.faiss", config, index_dims)
        if index.ntotal != data.rows:
            raise SnapshotError(f"{path}: index.faiss holds {index.ntotal} vectors for {data.rows} rows")
    elif config.index_type == "flat" and data.embeddings is not None:  # the flat index is its vectors: mapped
        codes = data.codes if isinstance(data.codes, Codes) else None
        index = VectorIndex.build(config, index_dims, data.embeddings, codes)
    else:
        raise SnapshotError(f"{path}: no index.faiss for a {config.index_type} index")
    open_postings: OpenPostings | None = None
    if embedder.open_rule is not None:  # SSI_OPEN_VOCAB on; off, an open_vocab.json is not even read
        if data.open_vocab is None:
            # written with the open vocabulary off (or before it existed): its documents' new words were never saved
            raise SnapshotError(f"{path}: no open_vocab.json (written with the open vocabulary off)")
        try:
            open_postings = OpenPostings.from_json(data.open_vocab)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SnapshotError(f"{path}: damaged open_vocab.json ({exc!r})") from None
        if open_postings.row_words and max(open_postings.row_words) >= data.rows:
            raise SnapshotError(f"{path}: open_vocab.json names rows beyond the snapshot's {data.rows}")
        if embedder.collection_statistics:  # its rows were weighed with the avg_len it saved
            saved = data.open_vocab.get("avg_len")
            if not isinstance(saved, int | float) or not saved > 0:
                raise SnapshotError(f"{path}: open_vocab.json has no avg_len (collection statistics)")
            if avg_len is not None and float(saved) != avg_len:
                raise SnapshotError(f"{path}: its rows were weighed with avg_len {saved}, not the {avg_len} given")
            embedder.use_avg_len(float(saved))
    return ModelState(
        index=index,
        lexical=LexicalIndex(bundle.form.lexical_weights(), data.tfidf),
        open_postings=open_postings,
        table=RowTable(data.doc_ids, data.live),
        seq=data.seq,
        report=LoadReport(source="cache", snapshot=str(path)),
        **common,
    )


def computed(view: StoreView, settings: Settings, start_up_threads: int | None = None, **common: Any) -> ModelState:
    """The state computed from scratch: every stored document featurized and embedded, the index built.

    Featurized by `BulkFeaturizer` (the rows `Embedder.featurize` gives, byte for byte, without a
    Python string per word: tokenizing was most of a build), in SSI_BUILD_WORKERS forked processes
    for a large collection while this one reads the store and embeds (service.featurize_pool).
    """
    bundle: Bundle = common["bundle"]
    embedder: Embedder = common["embedder"]
    config: IndexConfig = common["config"]
    index_dims = bundle.manifest.index_dims
    total = view.count
    embeddings = np.empty((total, index_dims), dtype=np.float32)
    parts: list[sp.csr_matrix] = []
    doc_ids: list[str] = []
    row = 0
    open_postings = OpenPostings(settings.open_vocab_words)
    featurizer = BulkFeaturizer(bundle.vocab)
    workers = pool_workers(settings.build_workers, total)
    if workers:
        log.info("featurizing %d documents in %d worker processes", total, workers)
    batches = view.iter_batches(settings.embed_batch)
    # Collection statistics: the lexical rows wait for the documents' avg_len, so this pass counts their tokens and a
    # second one weighs them (an index computed in about twice the time); a given avg_len (a shard's: the cluster's)
    # is not counted.
    collection = embedder.collection_statistics
    given = settings.open_vocab_avg_len if collection else None
    n_tokens = 0
    kept = embedder.sentence_cache
    # A hybrid bundle's e(d): the sentence cache's where it holds a text, else encoded; its segment then holds exactly
    # this build's documents (service.sentence_cache).
    device = settings.encode_device
    encode = embedder.start_up_encoder(start_up_threads, device) if kept is not None and start_up_threads else None
    sentences: SentenceBuild | nullcontext[None] = kept.build(encode) if kept is not None else nullcontext()
    with sentences as build, progress(f"embedding documents ({bundle.manifest.form})", total) as advance:
        for batch, tfidf in featurized(featurizer, batches, _full_texts, workers):
            texts = _full_texts(batch) if embedder.sentence is not None else None
            sentence = build.vectors(texts) if build is not None and texts is not None else None
            ids = [doc.id for doc in batch]
            embeddings[row : row + len(batch)] = embedder.embed_documents(tfidf, ids, texts, sentence)
            if collection:
                if given is None:
                    n_tokens += sum(len(tokenize(text)) for text in _full_texts(batch))
            else:
                parts.append(tfidf)
                _add_open_entries(embedder, open_postings, row, batch)
            doc_ids.extend(doc.id for doc in batch)
            row += len(batch)
            advance(len(batch))
    if row != total:
        raise RuntimeError(f"the store listed {total} documents but yielded {row}")
    if collection:
        # An empty collection has no length to measure: its later documents are weighed with the bundle's avg_len.
        assert bundle.vocab.bm25 is not None  # collection statistics: a BM25 bundle
        if given is None:
            given = average_length(n_tokens, total) if total else bundle.vocab.bm25.avg_len
        embedder.use_avg_len(given)
        row = 0
        lexical_featurizer = BulkFeaturizer(embedder.lexical_vocab)
        batches = view.iter_batches(settings.embed_batch)
        with progress("weighing documents (the collection's statistics)", total) as advance:
            for batch, lexical_rows in featurized(lexical_featurizer, batches, _full_texts, workers):
                parts.append(lexical_rows)
                _add_open_entries(embedder, open_postings, row, batch)
                row += len(batch)
                advance(len(batch))
        if row != total:
            raise RuntimeError(f"the store listed {total} documents but yielded {row} the second time")
    # Stacked as CSR (a concatenation) and turned word-major by LexicalIndex: stacking straight into
    # CSC goes through COO and took about twice as long (the matrix is the same).
    tfidf_all = sp.vstack(parts, format="csr") if parts else sp.csr_matrix((0, bundle.manifest.vocab_size))
    started = time.perf_counter()
    index = VectorIndex.build(config, index_dims, embeddings)
    del embeddings  # a flat index holds them now (uncopied); the others hold their own copy
    log.info("built the %s index over %d vectors in %.2fs", config.index_type, total, time.perf_counter() - started)
    return ModelState(
        index=index,
        lexical=LexicalIndex(bundle.form.lexical_weights(), tfidf_all),
        open_postings=open_postings,
        table=RowTable(doc_ids),
        seq=view.last_seq,
        report=LoadReport(source="computed", embedded=total),
        **common,
    )


def _add_open_entries(embedder: Embedder, postings: OpenPostings, first: int, batch: list[StoredDocument]) -> None:
    """Index the new words (ssi.open_vocab) of `batch`, its rows from `first` (nothing for a closed vocabulary)."""
    for offset, entries in enumerate(embedder.open_entries(_full_texts(batch)) or ()):
        if entries:
            postings.add(first + offset, entries)


def _full_texts(batch: list[StoredDocument]) -> list[str]:
    return [doc.as_document().full_text for doc in batch]


def compacted(state: ModelState) -> ModelState:
    """The same documents without dead rows, renumbered (rebuilds the FAISS index from the live rows' vectors).

    `state` may be live: what is read under its read lock is the live rows, their vectors (read
    back from the index) and the lexical index (never mutated, only replaced), so the index build
    runs without holding it. The result reflects `state.seq` as read then.
    """
    with state.lock.read():
        rows = np.flatnonzero(state.table.live)
        doc_ids = [state.table.doc_ids[r] for r in rows.tolist()]
        embeddings = state.index.vectors(rows)
        lexical = state.lexical
        open_postings = state.open.select(rows)  # mutated by writes: copied under the lock
        fields = state.fields.remapped(rows)  # likewise (ssi.fields.index: renumbered, not rebuilt)
        seq = state.seq
        before = state.table.rows
    index = VectorIndex.build(state.config, state.index.dim, embeddings)
    del embeddings
    report = dataclasses.replace(state.report)
    log.info("compacted the index: %d rows -> %d", before, rows.shape[0])
    fresh = ModelState(
        bundle=state.bundle,
        embedder=state.embedder,
        config=state.config,
        index=index,
        lexical=lexical.select(rows),
        open_postings=open_postings,
        table=RowTable(doc_ids),
        seq=seq,
        store_uuid=state.store_uuid,
        folder=state.folder,
        report=report,
    )
    fresh.fields = fields
    fresh.saved_seq = None  # the rows were renumbered: the snapshot on disk no longer matches
    return fresh
