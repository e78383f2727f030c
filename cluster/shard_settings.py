"""The service settings of one shard: an ordinary collection whose data and cache folders are the shard's folder.

The index job and the shard server build them the same way, so the snapshot the job writes lands in
the cache folder the shard looks in (service.snapshot.cache_folder: bundle hash + store + index tag).
Shards are reached only through the router, which checks keys and bounds, so a shard accepts writes
without a key of its own (it listens on no port). A shard featurizes in its own process: forking a
pool (SSI_BUILD_WORKERS) inside a Ray actor, with its threads, is not safe.

The open vocabulary (SSI_OPEN_VOCAB, docs/guides/open-vocabulary.md) is the router's setting, passed to every shard
(and to the index job, which then writes each shard's open postings): a shard indexes the new words of its own
documents, and the router weighs them by the cluster's document frequencies, summed over the shards at query time
(cluster.fanout). The collection's statistics (SSI_OPEN_VOCAB_STATISTICS=collection) are refused: they would need
every query word's global document frequency and one avg_len for all shards (`open_vocab_of`).
"""

from __future__ import annotations

from pathlib import Path

from cluster.manifest import COLLECTION, ClusterIndexError
from service.settings import IndexType, Settings
from ssi.open_vocab import DEFAULT_MAX_WORDS


def shard_settings(
    folder: Path,
    bundle: Path,
    index_type: IndexType = "flat",
    threads: int = 1,
    open_vocab: bool = False,
    open_vocab_words: int = DEFAULT_MAX_WORDS,
) -> Settings:
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
        open_vocab_statistics="bundle",
    )


def open_vocab_of(settings: Settings) -> bool:
    """Whether the cluster serving with `settings` (the router's) opens its shards' vocabulary (SSI_OPEN_VOCAB).
    Refuses SSI_OPEN_VOCAB_STATISTICS=collection, which the cluster does not have."""
    if settings.open_vocab and settings.open_vocab_statistics == "collection":
        raise ClusterIndexError(
            "SSI_OPEN_VOCAB_STATISTICS=collection is not supported by the Ray cluster (each shard would weigh "
            "every word by its own documents, not the cluster's): unset it, or set it to 'bundle' "
            "(docs/guides/open-vocabulary.md)"
        )
    return settings.open_vocab
