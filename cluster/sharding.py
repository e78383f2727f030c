"""Which shard owns a document: a stable hash of its id, the same on every machine and every run.

Python's `hash()` is salted per process, so the owner is the first 8 bytes of the id's BLAKE2b digest
modulo the number of shards: the index job, the router and a test agree on it without talking.
"""

from __future__ import annotations

import hashlib

HASH_NAME = "blake2b-64 of the utf-8 id, modulo shards"


def shard_of(doc_id: str, shards: int) -> int:
    """The shard (0 … shards − 1) that holds `doc_id`."""
    digest = hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def shard_folder_name(shard: int) -> str:
    return f"shard-{shard:04d}"
