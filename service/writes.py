"""Writes into a live `ModelState`: committed documents made visible, the write log replayed, snapshots captured.

The collection commits every write to the store first (the source of truth, with its sequence
number) and then calls `apply_writes` under its writer lock, so the state applies writes in the
store's order. Searches are held off only while the in-memory arrays change (the state's write
lock); the costly parts (embedding, building the new lexical matrix, its merge) happen outside it.

A snapshot's `capture` needs only the state's read lock (searches go on; the next in-memory apply
waits for it), not the collection's writer lock, so writes keep being featurized and committed
meanwhile. For a flat index it copies nothing large: the index is the embeddings, whose filled
rows never change, so the snapshot saves those and the index is rebuilt from them on load. HNSW and
IVF are serialized (a copy, which holds their vectors too: no embeddings are saved beside them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.embedding import Prepared
from service.lexical import LexicalIndex
from service.model_state import ModelState
from service.quantized import Codes
from service.snapshot import SnapshotData
from service.store import StoreView
from ssi.records import Document


@dataclass(frozen=True, slots=True)
class FieldWrites:
    """The fields of the documents of a write, by id, and the collection's field types once it is committed."""

    by_id: dict[str, dict[str, Any]]
    types: dict[str, str]

    @classmethod
    def of(cls, docs: Sequence[Document], types: dict[str, str]) -> FieldWrites:
        return cls({doc.id: doc.fields for doc in docs if doc.fields}, types)


def apply_writes(
    state: ModelState,
    prepared: Prepared | None,
    deleted: Sequence[str],
    seq: int,
    fields: FieldWrites | None = None,
) -> None:
    """Make committed writes visible: new rows for `prepared`, dead rows for replaced and deleted ids; `fields`:
    the written documents' fields (service.fields) and the collection's field types after the write.

    The caller holds the collection's writer lock (one writer at a time) and has committed the
    writes to the store.
    """
    lexical = state.lexical.appended(prepared.tfidf) if prepared is not None else state.lexical
    with state.lock.write():
        state.version += 1  # first: a search that reused an older pool must not survive a half-applied write
        for doc_id in deleted:
            _killed(state, doc_id)
        if prepared is not None and prepared.ids:
            for doc_id in prepared.ids:
                _killed(state, doc_id)
            first = state.table.append(prepared.ids)
            if state.index.add(prepared.embeddings) != first:
                raise RuntimeError("index rows out of step with the row table")
            if fields is not None:
                state.fields.declare(fields.types)
                for offset, doc_id in enumerate(prepared.ids):
                    state.fields.add(first + offset, fields.by_id.get(doc_id))
            state.lexical = lexical
            for offset, entries in enumerate(prepared.open_entries or ()):
                if entries:
                    state.open.add(first + offset, entries)
        state.seq = max(state.seq, seq)
    if state.lexical.needs_merge:
        merged = state.lexical.merged()
        with state.lock.write():
            state.lexical = merged


def _killed(state: ModelState, doc_id: str) -> None:
    """Mark a document's row dead and take its new words' postings out (their live document frequency drops)."""
    row = state.table.kill(doc_id)
    if row is not None:
        state.open.remove(row)
        state.fields.kill(row)


def replay(state: ModelState, view: StoreView) -> int:
    """Bring `state` up to the store `view`: re-apply the documents written after `state.seq`; returns how many.

    Raises `StoreError` if the write log was trimmed past `state.seq` (the state is too old to catch up).
    """
    changed = view.changed_since(state.seq)
    if changed:
        current = view.get_many(changed)
        puts = [current[doc_id].as_document() for doc_id in changed if doc_id in current]
        deletes = [doc_id for doc_id in changed if doc_id not in current]
        fields = FieldWrites.of(puts, view.field_types())
        apply_writes(state, state.embedder.prepare(puts) if puts else None, deletes, view.last_seq, fields)
    state.seq = view.last_seq
    return len(changed)


@dataclass
class Capture:
    """What a snapshot needs, taken under the state's read lock; `materialize` does the slow part outside it."""

    seq: int
    store_uuid: str
    bundle_hash: str
    index_tag: str
    index_blob: np.ndarray | None  # None for a flat index (rebuilt from the embeddings)
    embeddings: list[np.ndarray] | None  # a flat index's vectors, in its row blocks (None for HNSW and IVF)
    codes: list[Codes] | None  # and their int8 codes (service.quantized), in the same blocks
    dims: int
    lexical: LexicalIndex
    doc_ids: list[str]
    live: np.ndarray
    open_vocab: dict[str, object] | None = None  # the open postings (ssi.open_vocab), None for a closed vocabulary

    def materialize(self) -> SnapshotData:
        return SnapshotData(
            seq=self.seq,
            store_uuid=self.store_uuid,
            bundle_hash=self.bundle_hash,
            index_tag=self.index_tag,
            index_blob=self.index_blob,
            embeddings=self.embeddings,
            codes=self.codes,
            dims=self.dims,
            tfidf=self.lexical.matrix(),
            doc_ids=self.doc_ids,
            live=self.live,
            open_vocab=self.open_vocab,
        )


def capture(state: ModelState) -> Capture:
    """The state as of now, for a snapshot: consistent, since writes change it only under the write lock."""
    with state.lock.read():
        return Capture(
            seq=state.seq,
            store_uuid=state.store_uuid,
            bundle_hash=state.bundle.content_hash,
            index_tag=state.config.tag(),
            # HNSW and IVF are more than their vectors (graph, coarse lists): those are copied here.
            index_blob=state.index.serialize(),
            # A flat index's filled rows are never written again, so its arrays are a stable copy as they are.
            embeddings=state.index.vector_parts(),
            codes=state.index.code_parts(),
            dims=state.index.dim,
            lexical=state.lexical,
            doc_ids=list(state.table.doc_ids),
            live=state.table.live.copy(),
            open_vocab=_open_vocab_json(state),
        )


def _open_vocab_json(state: ModelState) -> dict[str, object] | None:
    """open_vocab.json of a snapshot: the open postings, and with the collection's statistics the avg_len its
    lexical rows were weighed with (None for a closed vocabulary)."""
    if state.embedder.open_rule is None:
        return None
    saved = state.open.to_json()
    if state.embedder.avg_len is not None:
        saved["avg_len"] = state.embedder.avg_len
    return saved
