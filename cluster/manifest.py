"""The sharded index on disk: one folder per shard and `cluster.json`, the manifest that ties them together.

    <index>/cluster.json          the manifest below
    <index>/shard-0000/           one service data folder: stores/documents/documents.sqlite (the shard's
                                  documents, the truth for its writes) and index/documents/... (the
                                  snapshot the index job computed, loaded by the shard like a restart)
    <index>/shard-0000/ids.json   the ids the index job put in this shard (a sorted JSON list)
    <index>/shard-0000/stores/documents/adverts.sqlite   an adverts index built before the fields only: its adverts'
                                                         metadata book, adopted into their fields when the shard opens

The manifest records the bundle's content hash (a shard refuses to serve another bundle over these
vectors), the hash that assigns documents to shards, and what each shard holds, so `ssi cluster serve`
and a test can check a shard before serving it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cluster.sharding import HASH_NAME, shard_folder_name
from service.settings import CollectionType

MANIFEST_FILE = "cluster.json"
FORMAT = "ssi-cluster-index"
COLLECTION = "documents"  # the collection name inside each shard's data folder


class ClusterIndexError(ValueError):
    """A sharded index that cannot be used; the message says which file and why."""


class ShardEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shard: int = Field(ge=0)
    folder: str = Field(description="the shard's data folder, relative to the index folder")
    documents: int = Field(ge=0)
    ids_file: str = Field(
        description="the ids the shard was built with (sorted JSON list), relative to the index folder"
    )
    ids_sha256: str = Field(description="SHA-256 of that file")
    seconds: float = Field(description="time to write the shard's store and snapshot")
    fields: dict[str, str] = Field(
        default_factory=dict,
        description="the field types the shard's documents fixed (service.fields): the build refuses a corpus whose "
        "shards would type a name two ways (cluster.index_job)",
    )


class ClusterManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["ssi-cluster-index"] = FORMAT
    format_version: Literal[1] = 1
    bundle: str = Field(description="the bundle folder the vectors were computed with")
    bundle_hash: str
    form: str
    type: CollectionType = Field(
        default="documents",
        description="what the shards hold: documents (searched) or adverts (matched to pages; an advert's metadata "
        "is four fields of its document, service.adverts)",
    )
    shards: int = Field(ge=1)
    shard_hash: str = HASH_NAME
    index_type: str
    index_tag: str
    documents: int
    avg_len: float | None = Field(
        default=None,
        gt=0,
        description="the mean token count of every document the index was built from, which every shard weighs its "
        "lexical rows with under the collection's statistics (SSI_OPEN_VOCAB_STATISTICS=collection); None: built "
        "with the bundle's",
    )
    engine: Literal["ray", "local"] = Field(description="who computed the vectors: a Ray Data job or this process")
    ray_address: str | None = None
    embed_seconds: float = Field(description="reading, featurizing and embedding every document")
    seconds: float = Field(description="the whole build, writing the shards included")
    entries: list[ShardEntry]

    def shard_dir(self, root: Path, shard: int) -> Path:
        return root / self.entries[shard].folder


def shard_dir(root: Path, shard: int) -> Path:
    return root / shard_folder_name(shard)


def write_manifest(root: Path, manifest: ClusterManifest) -> Path:
    """Written last and atomically (temporary file + rename): a folder without it is not an index."""
    path = root / MANIFEST_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(path)
    return path


def read_manifest(root: Path, bundle_hash: str | None = None) -> ClusterManifest:
    """The manifest of a sharded index, checked: every shard folder present, the bundle the one expected."""
    path = root / MANIFEST_FILE
    try:
        manifest = ClusterManifest.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise ClusterIndexError(
            f"{root} is not a sharded index (no {MANIFEST_FILE}; build one with `ssi index`)"
        ) from None
    except (OSError, ValueError) as exc:
        raise ClusterIndexError(f"{path}: unreadable manifest ({str(exc).splitlines()[0]})") from None
    if [e.shard for e in manifest.entries] != list(range(manifest.shards)):
        raise ClusterIndexError(
            f"{path}: lists shards {[e.shard for e in manifest.entries]}, expected 0…{manifest.shards - 1}"
        )
    for entry in manifest.entries:
        if not (root / entry.folder).is_dir():
            raise ClusterIndexError(f"{path}: shard {entry.shard}'s folder {entry.folder} is missing")
    if bundle_hash is not None and bundle_hash != manifest.bundle_hash:
        raise ClusterIndexError(
            f"{path}: built with bundle {manifest.bundle_hash[:12]}, not {bundle_hash[:12]}: "
            "rebuild it with `ssi index`"
        )
    return manifest
