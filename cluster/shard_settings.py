"""The service settings of one shard: an ordinary collection whose data and cache folders are the shard's folder.

The index job and the shard server build them the same way, so the snapshot the job writes lands in
the cache folder the shard looks in (service.snapshot.cache_folder: bundle hash + store + index tag).
Shards are reached only through the router, which checks keys and bounds, so a shard accepts writes
without a key of its own (it listens on no port). A shard featurizes in its own process: forking a
pool (SSI_BUILD_WORKERS) inside a Ray actor, with its threads, is not safe.
"""

from __future__ import annotations

from pathlib import Path

from cluster.manifest import COLLECTION
from service.settings import IndexType, Settings


def shard_settings(folder: Path, bundle: Path, index_type: IndexType = "flat", threads: int = 1) -> Settings:
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
        # Closed, whatever SSI_OPEN_VOCAB says: a shard would weigh new words by its own document frequencies,
        # not the cluster's (docs/guides/open-vocabulary.md, "Not yet").
        open_vocab=False,
    )
