"""`ssi index`: a bundle + a corpus → a sharded index (cluster.manifest), computed here or as a Ray Data job.

Without `--ray` the documents are read, embedded and written by this process (no Ray is imported);
with `--ray ADDRESS` the same two steps (cluster.shard_build) run as a Ray Data job: the corpus is read
in blocks in parallel, each block is embedded on a worker, and the rows are grouped by owner shard and
each shard written by one task (cluster.ray_index). Either way the manifest is written last.

An adverts collection (`collection_type="adverts"`, `ssi index --type adverts`) is built the same way; each
advert's metadata (category, advertiser, active, budget: the extra fields of its corpus line, as `ssi serve`
reads them) travels with its row and becomes four fields of its document in its shard's store (cluster.shard_build).

With `open_vocab` (`ssi index --open-vocab`, or SSI_OPEN_VOCAB) each shard's snapshot also holds its documents' new
words (cluster.shard_build.open_postings), so a cluster serving the open vocabulary starts from it. With the
collection's statistics as well (`statistics="collection"`, `ssi index --statistics collection` or
SSI_OPEN_VOCAB_STATISTICS), the embedding pass counts every document's tokens, and every shard is written with the
avg_len of all of them (its lexical rows, its new words' values), which the manifest records (`avg_len`): a shard
that computes its index again, or a document written later, is weighed with it, as a single node keeps the avg_len
its index was computed with.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from cluster.manifest import MANIFEST_FILE, ClusterIndexError, ClusterManifest, ShardEntry, write_manifest
from cluster.shard_build import BUNDLE_ENCODING, Block, Encoding, advert_meta, counted_avg_len, embed_block, write_shard
from cluster.shard_settings import shard_settings
from cluster.sharding import shard_folder_name
from service.embedding import Embedder
from service.settings import CollectionType, IndexType
from service.state_builder import index_config, keyed_precision
from ssi.bundle import load_bundle
from ssi.corpus import iter_corpus, numbered_lines
from ssi.open_vocab import DEFAULT_MAX_WORDS, Statistics
from ssi.records import Document
from ssi.sentence import Precision


def check_output(out: Path) -> None:
    """Refuse to write over an existing index or into a folder holding anything else."""
    if out.exists() and not out.is_dir():
        raise ClusterIndexError(f"{out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        what = "an index" if (out / MANIFEST_FILE).exists() else "files"
        raise ClusterIndexError(f"{out} already holds {what}: remove it or choose an empty folder")


def build_index(
    corpus: Path,
    bundle_path: Path,
    out: Path,
    shards: int,
    *,
    ray_address: str | None = None,
    index_type: IndexType = "flat",
    batch_size: int = 2048,
    workers: int | None = None,
    collection_type: CollectionType = "documents",
    open_vocab: bool = False,
    open_vocab_words: int = DEFAULT_MAX_WORDS,
    statistics: Statistics = "bundle",
    declared: dict[str, str] | None = None,
    precision: Precision | None = None,
) -> ClusterManifest:
    """Build the sharded index of `corpus` (documents, or adverts with their metadata) under `out`; its manifest.
    `declared`: field types of a schema file (`ssi index --schema`), fixed on every shard before its documents.
    `precision`: a hybrid bundle's sentence graph asked (SSI_ENCODER_PRECISION; None: the bundle's), resolved once
    here as a server on this machine would serve it (ssi.sentence.served_precision) and used by every task, so that
    every shard's e(d) come from one graph and its snapshot is keyed by it (a shard whose node serves another graph
    computes its index again rather than mixing them).
    `open_vocab`: write each shard's open postings (at most `open_vocab_words` words a shard), weighed with the
    `statistics` the cluster will serve (the collection's: with the avg_len of every document)."""
    if shards < 1:
        raise ClusterIndexError(f"shards must be at least 1 (got {shards})")
    if not corpus.exists():
        raise ClusterIndexError(f"corpus {corpus} does not exist")
    check_output(out)
    started = time.perf_counter()
    bundle = load_bundle(bundle_path, mmap=False)
    driver = Embedder(bundle, 1, precision=precision)  # refuses a form the service cannot serve before any work
    encoding = Encoding(driver.sentence.precision if driver.sentence is not None else None, keyed_precision(driver))
    out.mkdir(parents=True, exist_ok=True)
    collection = open_vocab and statistics == "collection"
    avg_len: float | None = None
    try:
        if ray_address is None:
            entries, embed_seconds, avg_len = _build_here(
                corpus,
                bundle_path,
                out,
                shards,
                index_type,
                batch_size,
                collection_type,
                (open_vocab, open_vocab_words),
                collection,
                declared,
                encoding,
            )
        else:
            from cluster.ray_index import build_with_ray

            entries, embed_seconds, avg_len = build_with_ray(
                corpus,
                bundle_path,
                out,
                shards,
                ray_address,
                index_type=index_type,
                batch_size=batch_size,
                workers=workers,
                collection_type=collection_type,
                open_vocab=open_vocab,
                open_vocab_words=open_vocab_words,
                collection_statistics=collection,
                declared=declared,
                encoding=encoding,
            )
        check_field_types(entries)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # half an index is no index: the folder was empty before
        raise
    settings = shard_settings(out / shard_folder_name(0), bundle.path, index_type, 1, open_vocab, 0, statistics)
    index_tag = index_config(settings, encoding.keyed).tag()
    manifest = ClusterManifest(
        bundle=str(bundle.path.resolve()),
        bundle_hash=bundle.content_hash,
        form=bundle.manifest.form,
        type=collection_type,
        shards=shards,
        index_type=index_type,
        index_tag=index_tag,
        documents=sum(e.documents for e in entries),
        avg_len=avg_len,
        engine="local" if ray_address is None else "ray",
        ray_address=ray_address,
        embed_seconds=round(embed_seconds, 3),
        seconds=round(time.perf_counter() - started, 3),
        entries=sorted(entries, key=lambda e: e.shard),
    )
    write_manifest(out, manifest)
    return manifest


def check_field_types(entries: list[ShardEntry]) -> None:
    """Refuse an index whose shards typed a field name two ways (service.fields: each shard's store fixes a name's
    type by its first document there): a cluster has one type per name (cluster.field_schema), as one node has."""
    by_name: dict[str, dict[int, str]] = {}
    for entry in entries:
        for name, field_type in entry.fields.items():
            by_name.setdefault(name, {})[entry.shard] = field_type
    for name, typed in sorted(by_name.items()):
        if len(set(typed.values())) > 1:
            held = ", ".join(f"{t} on shard {s}" for s, t in sorted(typed.items()))
            raise ClusterIndexError(
                f"field '{name}' has values of different types in the corpus ({held}, by the first document of each "
                "shard that has it): give every value of a field one type (a float as 3.0, not 3); nothing was written"
            )


def _build_here(
    corpus: Path,
    bundle_path: Path,
    out: Path,
    shards: int,
    index_type: IndexType,
    batch_size: int,
    collection_type: CollectionType = "documents",
    open_vocab: tuple[bool, int] = (False, DEFAULT_MAX_WORDS),
    collection_statistics: bool = False,
    declared: dict[str, str] | None = None,
    encoding: Encoding = BUNDLE_ENCODING,
) -> tuple[list[ShardEntry], float, float | None]:
    """The single-process build: every block embedded here, then each shard written (`open_vocab`: whether with
    its open postings, and at most how many words; `collection_statistics`: with the avg_len of every document,
    counted as they are embedded, which it returns)."""
    started = time.perf_counter()
    bundle = load_bundle(bundle_path, mmap=False)
    embedder = Embedder(bundle, 1, precision=encoding.served)
    per_shard: list[list[Block]] = [[] for _ in range(shards)]
    batch: list[tuple[Document, str]] = []
    for row in _corpus_rows(corpus, collection_type):
        batch.append(row)
        if len(batch) == batch_size:
            _split(_embed(embedder, batch, shards, collection_statistics), per_shard)
            batch = []
    if batch:
        _split(_embed(embedder, batch, shards, collection_statistics), per_shard)
    embed_seconds = time.perf_counter() - started
    dims, vocab = bundle.manifest.index_dims, bundle.manifest.vocab_size
    counted = [b.lengths for blocks in per_shard for b in blocks]
    n_tokens, n_docs = sum(int(c.sum()) for c in counted), sum(c.shape[0] for c in counted)
    avg_len = counted_avg_len(bundle, n_tokens, n_docs) if collection_statistics else None
    entries = [
        write_shard(
            out,
            shard,
            bundle,
            Block.concat(blocks, dims, vocab),
            index_type,
            collection_type,
            *open_vocab,
            avg_len,
            declared,
            encoding.keyed,
        )
        for shard, blocks in enumerate(per_shard)
    ]
    return entries, embed_seconds, avg_len


def _corpus_rows(corpus: Path, collection_type: CollectionType) -> Iterator[tuple[Document, str]]:
    """Each document of the corpus with its advert metadata (shard_build.advert_meta; "" in a documents collection).

    The documents come from ssi.corpus.iter_corpus, which names a malformed line; an advert's metadata are the
    fields it drops, so an adverts corpus is read a second time alongside, line for line (both skip blank lines).
    """
    docs = iter_corpus(corpus)
    if collection_type != "adverts":
        return ((doc, "") for doc in docs)
    return zip(docs, (advert_meta(json.loads(line)) for _, line in numbered_lines(corpus)), strict=True)


def _embed(embedder: Embedder, rows: list[tuple[Document, str]], shards: int, count_tokens: bool) -> Block:
    return embed_block(embedder, [doc for doc, _ in rows], shards, [meta for _, meta in rows], count_tokens)


def _split(block: Block, per_shard: list[list[Block]]) -> None:
    for shard in range(len(per_shard)):
        rows = (block.shards == shard).nonzero()[0]
        if rows.shape[0]:
            per_shard[shard].append(block.select(rows))
