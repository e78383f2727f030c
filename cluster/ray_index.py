"""The index build as a Ray Data job (imported only by `ssi index --ray`).

    read_text (JSONL: each line parsed by the task that embeds it) / read_parquet (blocks, in parallel)
      → map_batches(embed_batch): each block's shard, tf-idf rows and vectors (cluster.shard_build.embed_block),
        one bundle load per worker process
      → materialize (the embedding stage is timed on its own; with the collection's statistics the documents' token
        counts are summed from it: the cluster's avg_len, given to every shard's write)
      → groupby("shard").map_groups(write_group): each shard's store and snapshot written by one task

The output folder must be one every worker can write (a shared file system on a real cluster; on a
local cluster it is simply the local disk). A shard that receives no document is written empty by the
driver, so the manifest always lists every shard.
"""

from __future__ import annotations

import functools
import importlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from cluster.connect import connect
from cluster.manifest import ClusterIndexError, ShardEntry
from cluster.shard_build import (
    BUNDLE_ENCODING,
    Block,
    Encoding,
    advert_meta,
    counted_avg_len,
    document_of,
    embed_block,
    write_shard,
)
from service.embedding import Embedder
from service.settings import CollectionType, IndexType
from ssi.bundle import load_bundle
from ssi.open_vocab import DEFAULT_MAX_WORDS
from ssi.sentence import Precision


@functools.lru_cache(maxsize=2)
def _embedder(bundle_path: str, precision: Precision | None) -> Embedder:
    """One bundle load per worker process: Ray reuses a worker for task after task. `precision`: the job's
    `Encoding.served`, asked whatever this node's CPU (cluster.shard_build.Encoding)."""
    return Embedder(load_bundle(Path(bundle_path), mmap=False), 1, precision=precision)


def embed_batch(
    batch: Any,
    bundle_path: str,
    shards: int,
    adverts: bool = False,
    count_tokens: bool = False,
    lines: bool = False,
    precision: Precision | None = None,
) -> dict[str, np.ndarray]:
    """A Ray Data task: one block of corpus records (an Arrow table) → its rows with shard, vectors and tf-idf
    (cluster.shard_build), with `adverts` each advert's metadata from the same record, with `count_tokens` each
    document's token count. With `lines` the block is a JSONL corpus's lines (column `text`), each parsed here as
    `ssi serve` parses it, so that a document's `fields` keep JSON's types (Arrow's JSON reader would make a struct
    of them, with an integer made a float where another line has a float, and a date-like string a timestamp); else
    Parquet's columns, read as Python values from Arrow (numpy's batches would make an integer child of a `fields`
    struct a float wherever a row has no fields).

    Tasks rather than actors: an actor pool holds its CPUs for the whole job, and on a small cluster it
    can hold every CPU while the read tasks that feed it wait for one.
    """
    records = batch.to_pylist()
    if lines:
        records = [json_record(row["text"]) for row in records if row["text"].strip()]
    meta = [advert_meta(record) for record in records] if adverts else None
    docs = [document_of(r, columns=not lines) for r in records]
    return embed_block(_embedder(bundle_path, precision), docs, shards, meta, count_tokens).columns()


def write_group(
    batch: dict[str, np.ndarray],
    root: str,
    bundle_path: str,
    index_type: str,
    collection_type: str = "documents",
    open_vocab: bool = False,
    open_vocab_words: int = DEFAULT_MAX_WORDS,
    avg_len: float | None = None,
    declared: dict[str, str] | None = None,
    sentence_precision: Precision | None = None,
) -> dict[str, np.ndarray]:
    """One shard's rows (a Ray Data group) → its store and snapshot (and metadata book, open postings, weighed with
    the cluster's `avg_len` under the collection's statistics); its manifest entry as JSON."""
    bundle = load_bundle(Path(bundle_path), mmap=False)
    block = Block.from_columns(batch, bundle.manifest.vocab_size)
    shard = int(block.shards[0])
    entry = write_shard(
        Path(root),
        shard,
        bundle,
        block,
        index_type,  # type: ignore[arg-type]
        collection_type,  # type: ignore[arg-type]
        open_vocab,
        open_vocab_words,
        avg_len,
        declared,
        sentence_precision,
    )
    return {"entry": np.asarray([entry.model_dump_json()], dtype=object)}


def json_record(line: str) -> dict[str, Any]:
    """One JSONL corpus line as a record (a line that is not a JSON object is a ValueError quoting its start)."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError(f"a corpus line is not a JSON object: {line[:80]!r}")
    return record


def read_corpus(ray_data: Any, corpus: Path) -> tuple[Any, bool]:
    """The corpus as a Ray dataset, and whether its rows are JSONL lines (parsed by `embed_batch`)."""
    name = corpus.name.lower()
    if name.endswith(".parquet") or corpus.is_dir():
        return ray_data.read_parquet(str(corpus), columns=None), False
    if name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson")):
        return ray_data.read_text(str(corpus)), True
    raise ClusterIndexError(
        f"corpus {corpus}: expected JSONL (.jsonl, .jsonl.gz) or Parquet (.parquet or a folder of them)"
    )


def build_with_ray(
    corpus: Path,
    bundle_path: Path,
    out: Path,
    shards: int,
    address: str,
    *,
    index_type: IndexType = "flat",
    batch_size: int = 2048,
    workers: int | None = None,
    collection_type: CollectionType = "documents",
    open_vocab: bool = False,
    open_vocab_words: int = DEFAULT_MAX_WORDS,
    collection_statistics: bool = False,
    declared: dict[str, str] | None = None,
    encoding: Encoding = BUNDLE_ENCODING,
) -> tuple[list[ShardEntry], float, float | None]:
    """Run the job on the cluster at `address` (`declared`: a schema file's field types for every shard; `encoding`:
    the sentence graph every task encodes with and the one the snapshots are keyed by); returns
    the shards' entries, the embedding stage's seconds and with `collection_statistics` the avg_len of every
    document (every shard's rows are weighed with it)."""
    connect(address, num_cpus=workers)
    ray_data = importlib.import_module("ray.data")

    ctx = ray_data.DataContext.get_current()
    ctx.enable_progress_bars = False
    started = time.perf_counter()
    adverts = collection_type == "adverts"
    dataset, lines = read_corpus(ray_data, corpus.resolve())
    embedded = dataset.map_batches(
        embed_batch,
        fn_kwargs={
            "bundle_path": str(bundle_path.resolve()),
            "shards": shards,
            "adverts": adverts,
            "count_tokens": collection_statistics,
            "lines": lines,
            "precision": encoding.served,
        },
        batch_size=batch_size,
        batch_format="pyarrow",
    ).materialize()
    embed_seconds = time.perf_counter() - started
    bundle = load_bundle(bundle_path, mmap=False)
    avg_len: float | None = None
    if collection_statistics:  # the embedding pass counted every document's tokens
        n_docs = embedded.count()
        avg_len = counted_avg_len(bundle, int(embedded.sum("lengths") or 0) if n_docs else 0, n_docs)
    written = (
        embedded.groupby("shard", num_partitions=shards)
        .map_groups(
            write_group,
            batch_format="numpy",
            fn_kwargs={
                "root": str(out.resolve()),
                "bundle_path": str(bundle_path.resolve()),
                "index_type": index_type,
                "collection_type": collection_type,
                "open_vocab": open_vocab,
                "open_vocab_words": open_vocab_words,
                "avg_len": avg_len,
                "declared": declared,
                "sentence_precision": encoding.keyed,
            },
        )
        .take_all()
    )
    entries = [ShardEntry.model_validate_json(row["entry"]) for row in written]
    have = {e.shard for e in entries}
    dims, vocab = bundle.manifest.index_dims, bundle.manifest.vocab_size
    for shard in sorted(set(range(shards)) - have):
        empty = Block.concat([], dims, vocab)
        entries.append(
            write_shard(
                out,
                shard,
                bundle,
                empty,
                index_type,
                collection_type,
                open_vocab,
                open_vocab_words,
                avg_len,
                declared,
                encoding.keyed,
            )
        )
    return entries, embed_seconds, avg_len
