"""The service settings of one shard: an ordinary collection whose data and cache folders are the shard's folder.

The index job and the shard server build them the same way, so the snapshot the job writes lands in
the cache folder the shard looks in (service.snapshot.cache_folder: bundle hash + store + index tag).
Shards are reached only through the router, which checks keys and bounds, so a shard accepts writes
without a key of its own (it listens on no port). A shard featurizes in its own process: forking a
pool (SSI_BUILD_WORKERS) inside a Ray actor, with its threads, is not safe.

The open vocabulary (SSI_OPEN_VOCAB, docs/guides/open-vocabulary.md) is the router's setting, passed to every shard
(and to the index job, which then writes each shard's open postings): a shard indexes the new words of its own
documents, and the router weighs them by the cluster's document frequencies, summed over the shards at query time
(cluster.fanout). So are its statistics (SSI_OPEN_VOCAB_STATISTICS): with the collection's, every shard weighs its
lexical rows with the avg_len of the whole cluster's documents, counted by the index job and kept in cluster.json
(`cluster_avg_len`), and every query word by the cluster's live document frequency, summed as the new words' are.
"""

from __future__ import annotations

from pathlib import Path

from cluster.manifest import COLLECTION, ClusterIndexError, ClusterManifest
from service.settings import IndexType, Settings
from ssi.open_vocab import DEFAULT_MAX_WORDS, Statistics


def shard_settings(
    folder: Path,
    bundle: Path,
    index_type: IndexType = "flat",
    threads: int = 1,
    open_vocab: bool = False,
    open_vocab_words: int = DEFAULT_MAX_WORDS,
    statistics: Statistics = "bundle",
    avg_len: float | None = None,
) -> Settings:
    """`avg_len`: the cluster's, for the collection's `statistics` (`cluster_avg_len`)."""
    return Settings(
        bundle=bundle,
        corpus=None,
        collection=COLLECTION,
        cache_dir=folder,
        data_dir=folder,
        index_type=index_type,
        threads=threads,
        insecure_writes=True,
        host="127.0.0.1",
        build_workers=0,  # a shard may run inside a Ray actor: no forked featurizing pool there
        open_vocab=open_vocab,  # the router's, never the shard process's environment
        open_vocab_words=open_vocab_words,  # per shard
        open_vocab_statistics=statistics if open_vocab else "bundle",
        open_vocab_avg_len=avg_len if open_vocab and statistics == "collection" else None,
    )


def statistics_of(settings: Settings, manifest: ClusterManifest) -> Statistics:
    """The statistics the cluster serving `manifest`'s index with `settings` (the router's) weighs the lexical part
    with (SSI_OPEN_VOCAB_STATISTICS, "bundle" with the open vocabulary off); refuses the collection's for an index
    built without them, before any shard starts (`cluster_avg_len`)."""
    statistics: Statistics = settings.open_vocab_statistics if settings.open_vocab else "bundle"
    cluster_avg_len(manifest, statistics)
    return statistics


def cluster_avg_len(manifest: ClusterManifest, statistics: Statistics) -> float | None:
    """The avg_len every shard weighs its lexical rows with under `statistics`: the whole cluster's documents',
    recorded by the index job, for the collection's; None for the bundle's. A shard alone knows only its own
    documents, so an index built without it is refused rather than served with each shard's own."""
    if statistics != "collection":
        return None
    if manifest.avg_len is None:
        raise ClusterIndexError(
            "SSI_OPEN_VOCAB_STATISTICS=collection: this index was built without the collection's statistics (its "
            "cluster.json records no avg_len): build it again with `ssi index --statistics collection` (or "
            "SSI_OPEN_VOCAB_STATISTICS=collection), or serve it with SSI_OPEN_VOCAB_STATISTICS=bundle"
        )
    return manifest.avg_len
