"""The two steps of an index build that run on workers, as plain functions (no Ray here):

1. `embed_block`: a block of documents → each one's shard, tf-idf row and index vector, computed by
   the service's own embedder (service.embedding.Embedder: the bundle's vocabulary and the form's
   `embed_documents_of`), so a shard's vectors are bit for bit what a single node computes.
2. `write_shard`: one shard's documents + vectors → its document store (service.store, seeded like a
   corpus) and an index snapshot (service.snapshot) in the cache folder the shard server opens, so the
   shard starts "from cache" and never embeds its documents again. For an adverts collection each
   advert's metadata becomes four fields of its document (service.adverts), read from the same lines as
   `ssi serve` reads an adverts corpus's. With the open vocabulary (SSI_OPEN_VOCAB) the
   snapshot holds the shard's open postings (open_vocab.json), as the single node's state builder writes
   them; without them a shard serving it open would recompute its index from the store once.

With the collection's statistics (SSI_OPEN_VOCAB_STATISTICS=collection) the first step also counts each document's
tokens, the cluster's avg_len is taken from all of them (`counted_avg_len`), and the second weighs the shard's
lexical rows and new words with it (`lexical_rows`) and saves it in open_vocab.json, as a single node weighs its
collection with the avg_len of all its documents.

A block travels between Ray workers as columns: ids, titles, texts, the shard, the vectors as one
float32 matrix, each tf-idf row packed into bytes (word ids int32, then weights float32), each
advert's metadata as JSON ("" in a documents collection) and each document's token count (0: not counted).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from cluster.manifest import COLLECTION, ClusterIndexError, ShardEntry, shard_dir
from cluster.shard_settings import shard_settings
from cluster.sharding import shard_of
from service.adverts import corpus_fields, declared_fields
from service.embedding import Embedder
from service.index import VectorIndex
from service.sentence_cache import SentenceCache, encoder_key
from service.settings import CollectionType, IndexType, Settings
from service.snapshot import SnapshotData, cache_folder, write_snapshot
from service.state_builder import index_config
from service.store import DocumentStore
from ssi.bundle import Bundle
from ssi.corpus import DataFileError
from ssi.open_vocab import DEFAULT_MAX_WORDS, OpenRule, Statistics, at_avg_len, build_postings
from ssi.records import Document
from ssi.sentence import Precision
from ssi.tokenize import tokenize
from ssi.weighting import average_length


@dataclass
class Block:
    """Documents with their shard, vectors and tf-idf rows (row i of each belongs to document i)."""

    ids: list[str]
    titles: list[str]
    texts: list[str]
    shards: np.ndarray  # int32
    embeddings: np.ndarray  # float32 [n, M]
    tfidf: sp.csr_matrix  # [n, D], unit rows
    meta: list[str]  # an advert's metadata as fields (advert_meta, JSON), "" for a document
    # int64: each document's token count (|d|, every token) where the build counts them (the collection's
    # statistics: the cluster's avg_len), else 0
    lengths: np.ndarray
    fields: list[str]  # a document's fields (service.fields) as JSON, "" for none

    def columns(self) -> dict[str, np.ndarray]:
        """The block as Ray Data columns (numpy batch format)."""
        return {
            "id": np.asarray(self.ids, dtype=object),
            "title": np.asarray(self.titles, dtype=object),
            "text": np.asarray(self.texts, dtype=object),
            "shard": self.shards,
            "embedding": self.embeddings,
            "tfidf": np.asarray(pack_rows(self.tfidf), dtype=object),
            "meta": np.asarray(self.meta, dtype=object),
            "lengths": self.lengths,
            "fields": np.asarray(self.fields, dtype=object),
        }

    @classmethod
    def from_columns(cls, columns: dict[str, np.ndarray], vocab_size: int) -> Block:
        ids = [str(x) for x in columns["id"]]
        embeddings = np.ascontiguousarray(np.stack(list(columns["embedding"])) if len(ids) else columns["embedding"])
        return cls(
            ids=ids,
            titles=[str(x) for x in columns["title"]],
            texts=[str(x) for x in columns["text"]],
            shards=np.asarray(columns["shard"], dtype=np.int32),
            embeddings=embeddings.astype(np.float32, copy=False).reshape(len(ids), -1),
            tfidf=unpack_rows(list(columns["tfidf"]), vocab_size),
            meta=[str(x) for x in columns["meta"]],
            lengths=np.asarray(columns["lengths"], dtype=np.int64),
            fields=[str(x) for x in columns["fields"]],
        )

    def select(self, rows: np.ndarray) -> Block:
        picked = rows.tolist()
        return Block(
            ids=[self.ids[i] for i in picked],
            titles=[self.titles[i] for i in picked],
            texts=[self.texts[i] for i in picked],
            shards=self.shards[rows],
            embeddings=self.embeddings[rows],
            tfidf=self.tfidf[rows],
            meta=[self.meta[i] for i in picked],
            lengths=self.lengths[rows],
            fields=[self.fields[i] for i in picked],
        )

    @classmethod
    def concat(cls, blocks: Sequence[Block], index_dims: int, vocab_size: int) -> Block:
        if not blocks:
            return cls(
                [],
                [],
                [],
                np.zeros(0, np.int32),
                np.zeros((0, index_dims), np.float32),
                sp.csr_matrix((0, vocab_size), dtype=np.float32),
                [],
                np.zeros(0, np.int64),
                [],
            )
        return cls(
            ids=[x for b in blocks for x in b.ids],
            titles=[x for b in blocks for x in b.titles],
            texts=[x for b in blocks for x in b.texts],
            shards=np.concatenate([b.shards for b in blocks]),
            embeddings=np.concatenate([b.embeddings for b in blocks]),
            tfidf=sp.vstack([b.tfidf for b in blocks], format="csr"),
            meta=[x for b in blocks for x in b.meta],
            lengths=np.concatenate([b.lengths for b in blocks]),
            fields=[x for b in blocks for x in b.fields],
        )


def pack_rows(tfidf: sp.csr_matrix) -> list[bytes]:
    out = []
    for row in range(tfidf.shape[0]):
        start, end = int(tfidf.indptr[row]), int(tfidf.indptr[row + 1])
        out.append(
            tfidf.indices[start:end].astype(np.int32).tobytes() + tfidf.data[start:end].astype(np.float32).tobytes()
        )
    return out


def unpack_rows(packed: Sequence[bytes], vocab_size: int) -> sp.csr_matrix:
    indices, data, indptr = [], [], [0]
    for blob in packed:
        n = len(blob) // 8
        indices.append(np.frombuffer(blob, dtype=np.int32, count=n))
        data.append(np.frombuffer(blob, dtype=np.float32, count=n, offset=4 * n))
        indptr.append(indptr[-1] + n)
    if not packed:
        return sp.csr_matrix((0, vocab_size), dtype=np.float32)
    return sp.csr_matrix(
        (np.concatenate(data), np.concatenate(indices), np.asarray(indptr, dtype=np.int64)),
        shape=(len(packed), vocab_size),
    )


def document_of(record: dict, columns: bool = False) -> Document:
    """A corpus record as ssi.corpus.iter_corpus reads it: `id` (or BEIR's `_id`; a number is taken as text),
    optional `title`, `text`, optional `fields` (service.fields: a JSON object; with `columns`, a Parquet struct or
    map column's value: `column_fields`)."""
    doc_id = record.get("id", record.get("_id"))
    if isinstance(doc_id, np.generic):  # a Ray Data column of numbers
        doc_id = doc_id.item()
    if isinstance(doc_id, (int, float)) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise ValueError(f"a corpus record has no usable id (fields: {sorted(record)[:5]})")
    title, text = record.get("title") or "", record.get("text")
    if not isinstance(title, str) or not isinstance(text, str):
        raise ValueError(f"document {doc_id[:64]!r}: title and text must be strings")
    fields = record.get("fields")
    if columns:
        fields = column_fields(fields)
    if fields is not None and not isinstance(fields, dict):
        raise ValueError(f"document {doc_id[:64]!r}: 'fields' must be an object of field names to values")
    return Document(id=doc_id, title=title, text=text, fields=fields or None)


def column_fields(value: Any) -> dict[str, Any] | None:
    """A Parquet `fields` column's value as a document's fields: a struct (a dict, every name of the column's type
    in it, None where a row has no value) or a map (key-value pairs); a null is a field left out, a date or time
    its ISO 8601 text, a list its values, numpy scalars Python's."""
    if value is None:
        return None
    if isinstance(value, (list, np.ndarray)):  # a map column: (key, value) pairs
        value = dict((str(k), v) for k, v in value)
    if not isinstance(value, dict):
        return value  # refused by document_of, naming the document
    fields = {str(name): plain_value(v) for name, v in value.items() if v is not None}
    return fields or None


def plain_value(value: Any) -> Any:
    """One field value from a Parquet column as JSON would hold it (ssi.fields.schema reads JSON's types)."""
    if isinstance(value, np.ndarray | list | tuple):
        return [plain_value(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    return value


def advert_meta(record: dict) -> str:
    """An advert's metadata of a corpus record's top level as its fields (service.adverts.corpus_fields, what `ssi
    serve` reads from an adverts corpus line), as JSON. A Ray Data column holds numpy scalars: they are made Python
    values first, or a paused advert's numpy False would not be `False` and the advert would be served."""
    plain = {name: value.item() if isinstance(value, np.generic) else value for name, value in record.items()}
    return json.dumps(corpus_fields(plain) or {})


@dataclass(frozen=True, slots=True)
class Encoding:
    """A hybrid bundle's sentence graph for a whole index job: `served`, the graph every task encodes with (resolved
    once by the driver, then asked explicitly of every worker, whatever its CPU), and `keyed`, the same where it is
    not the bundle's own, which keys the shards' snapshots (service.state_builder.keyed_precision). None, None: the
    bundle's own graph, or a bundle without one."""

    served: Precision | None = None
    keyed: Precision | None = None


BUNDLE_ENCODING = Encoding()  # the bundle's own graph


def embed_block(
    embedder: Embedder,
    docs: Sequence[Document],
    shards: int,
    meta: Sequence[str] | None = None,
    count_tokens: bool = False,
) -> Block:
    """Each document's owner shard, tf-idf row and index vector (what service.state_builder.computed computes);
    `meta`: each advert's metadata (advert_meta) in an adverts collection; with `count_tokens`, each document's
    token count, as the single node counts them for the collection's avg_len (the build's first pass)."""
    ids = [d.id for d in docs]
    texts = [d.full_text for d in docs]
    fields = [json.dumps(d.fields, ensure_ascii=False) if d.fields else "" for d in docs]
    tfidf = embedder.featurize_documents(texts)
    lengths = [len(tokenize(text)) for text in texts] if count_tokens else [0] * len(texts)
    return Block(
        ids=ids,
        titles=[d.title for d in docs],
        texts=[d.text for d in docs],
        shards=np.asarray([shard_of(i, shards) for i in ids], dtype=np.int32),
        embeddings=embedder.embed_documents(tfidf, ids, texts),
        tfidf=tfidf,
        meta=list(meta) if meta is not None else [""] * len(ids),
        lengths=np.asarray(lengths, dtype=np.int64),
        fields=fields,
    )


def keep_sentences(settings: Settings, bundle: Bundle, block: Block, sentence_precision: Precision | None) -> None:
    """A hybrid bundle's e(d) of the shard's documents into its sentence cache (service.sentence_cache), read back
    from the rows' last E values over λ, so that a reload of the shard to another bundle with this encoder (a click
    round's promotion) encodes none of them: what a single node's first build leaves. Not with λ = 0, whose rows
    hold no e(d)."""
    spec = bundle.sentence
    if spec is None or spec.weight <= 0 or not block.ids:
        return
    dims = spec.dims
    sentences = np.asarray(block.embeddings[:, -dims:], dtype=np.float32) / np.float32(spec.weight)
    texts = [Document(i, t, x).full_text for i, t, x in zip(block.ids, block.titles, block.texts, strict=True)]
    precision = sentence_precision or spec.precision
    cache = SentenceCache(settings.index_dir / COLLECTION, encoder_key(bundle, precision), dims, _no_encoding)
    cache.seed(texts, sentences)


def _no_encoding(texts: list[str]) -> np.ndarray:
    raise RuntimeError("a shard's sentence cache is seeded with the job's vectors, never encoded here")


def counted_avg_len(bundle: Bundle, n_tokens: int, n_docs: int) -> float:
    """The avg_len of a collection of `n_docs` documents holding `n_tokens` tokens (their counted `lengths`), as the
    single node computes its collection's (service.state_builder.computed; the bundle's for no document)."""
    if not n_docs and bundle.vocab.bm25 is not None:
        return bundle.vocab.bm25.avg_len
    return average_length(n_tokens, n_docs)


def lexical_rows(bundle: Bundle, block: Block, avg_len: float | None) -> tuple[sp.csr_matrix, OpenRule | None]:
    """A shard's lexical rows and how its new words are weighed: the bundle's rows and rule, or with the collection's
    statistics both at the cluster's `avg_len` (as service.embedding.Embedder weighs a single node's)."""
    rule = OpenRule.of(bundle.vocab, bundle.form)
    if avg_len is None or rule is None:
        return block.tfidf, rule
    vocab = at_avg_len(bundle.vocab, avg_len)
    return vocab.featurize_documents(block_texts(block)), OpenRule.of(bundle.vocab, bundle.form, vocab.bm25)


def block_texts(block: Block) -> list[str]:
    """Each document's full text (title and text), as the service featurizes and tokenizes it."""
    return [
        Document(id=i, title=t, text=x).full_text for i, t, x in zip(block.ids, block.titles, block.texts, strict=True)
    ]


def open_postings(
    rule: OpenRule | None, block: Block, settings: Settings, avg_len: float | None = None
) -> dict[str, object] | None:
    """open_vocab.json of a shard's snapshot: its documents' new words (ssi.open_vocab), rows numbered as the block's,
    as service.state_builder indexes a collection's, and with the collection's statistics the avg_len its rows were
    weighed with (service.writes saves it so); None with the open vocabulary off or a bundle that stays closed."""
    if rule is None or not settings.open_vocab:
        return None
    saved = build_postings(rule, [tokenize(text) for text in block_texts(block)], settings.open_vocab_words).to_json()
    if avg_len is not None:
        saved["avg_len"] = avg_len
    return saved


def write_shard(
    root: Path,
    shard: int,
    bundle: Bundle,
    block: Block,
    index_type: IndexType = "flat",
    collection_type: CollectionType = "documents",
    open_vocab: bool = False,
    open_vocab_words: int = DEFAULT_MAX_WORDS,
    avg_len: float | None = None,
    declared: dict[str, str] | None = None,
    sentence_precision: Precision | None = None,
) -> ShardEntry:
    """Seed the shard's store with its documents and save the snapshot the shard server will load (with
    `open_vocab`, its documents' new words too: at most `open_vocab_words` of them; with `avg_len`, the cluster's,
    its lexical rows and new words weighed with it: the collection's statistics; with `declared`, the field types
    of a schema file, fixed before any document is read, as `ssi serve --schema` fixes them; `sentence_precision`:
    the job's `Encoding.keyed`, which keys the snapshot).

    The store is seeded from a JSONL file exactly as `ssi serve --corpus` seeds one (a repeated id is
    refused there; an adverts collection's lines carry each advert's metadata, read as its fields with the four
    metadata types declared); then the file is removed: the store is the shard's truth from now on.
    """
    started = time.perf_counter()
    folder = shard_dir(root, shard)
    folder.mkdir(parents=True, exist_ok=True)
    statistics: Statistics = "collection" if avg_len is not None else "bundle"
    settings = shard_settings(folder, bundle.path, index_type, 1, open_vocab, open_vocab_words, statistics, avg_len)
    seed = folder / "seed.jsonl"
    with seed.open("w", encoding="utf-8") as handle:
        rows = zip(block.ids, block.titles, block.texts, block.meta, block.fields, strict=True)
        for doc_id, title, text, meta, fields in rows:
            record = {"id": doc_id, "title": title, "text": text} | (json.loads(meta) if meta else {})
            if fields:
                record["fields"] = json.loads(fields)
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    corpus = seed if block.ids else None
    adverts = collection_type == "adverts"
    try:
        store = DocumentStore.open_for_corpus(
            settings.store_dir,
            COLLECTION,
            corpus,
            on_change="refuse",
            fields={**(declared_fields(None) if adverts else {}), **(declared or {})} or None,
            line_fields=corpus_fields if adverts else None,
        )
    except DataFileError as exc:  # a document's fields, named by its id (the seed file is the build's own)
        seed.unlink()
        raise ClusterIndexError(f"shard {shard}: {exc.problem}") from None
    try:
        field_types = store.field_types()
        config = index_config(settings, sentence_precision)
        dims = bundle.manifest.index_dims
        embeddings = np.ascontiguousarray(block.embeddings, dtype=np.float32).reshape(len(block.ids), dims)
        # A flat index is its vectors, saved as embeddings; the others are saved built (holding their vectors).
        blob = VectorIndex.build(config, dims, embeddings).serialize()
        lexical, rule = lexical_rows(bundle, block, settings.open_vocab_avg_len)
        write_snapshot(
            cache_folder(settings.index_dir, COLLECTION, bundle.content_hash, store.uuid, config.tag()),
            SnapshotData(
                seq=store.last_seq,
                store_uuid=store.uuid,
                bundle_hash=bundle.content_hash,
                index_tag=config.tag(),
                index_blob=blob,
                embeddings=embeddings if blob is None else None,
                dims=dims,
                tfidf=sp.csc_matrix(lexical, dtype=np.float32),
                doc_ids=list(block.ids),
                live=np.ones(len(block.ids), dtype=bool),
                open_vocab=open_postings(rule, block, settings, settings.open_vocab_avg_len),
            ),
        )
    finally:
        store.close()
        seed.unlink()
    keep_sentences(settings, bundle, block, sentence_precision)
    listed = json.dumps(sorted(block.ids), ensure_ascii=False)
    (folder / "ids.json").write_text(listed, encoding="utf-8")
    return ShardEntry(
        shard=shard,
        folder=folder.name,
        documents=len(block.ids),
        ids_file=f"{folder.name}/ids.json",
        ids_sha256=hashlib.sha256(listed.encode("utf-8", "surrogatepass")).hexdigest(),
        seconds=round(time.perf_counter() - started, 3),
        fields=field_types,
    )
