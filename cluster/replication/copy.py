"""A whole copy of a live shard, sent to a replica that cannot catch up from the write log (a new or wiped disk, a
history that diverged): service.backup's consistent copy (index snapshot, then the store by SQLite's online
backup), packed as one tar archive in memory, and unpacked by the receiver into a new folder of its own."""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path

from cluster.manifest import COLLECTION
from service.backup import backup, restore
from service.settings import Settings


def pack(settings: Settings) -> bytes:
    """The shard whose folders `settings` name, copied while it serves and writes, as a tar archive."""
    with tempfile.TemporaryDirectory(prefix="ssi-copy-") as work:
        out = Path(work) / "copy"
        backup(settings, out, [COLLECTION])
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(out, arcname="copy")
        return buffer.getvalue()


def unpack(blob: bytes, settings: Settings) -> None:
    """Place the copy `blob` into the (empty) folders `settings` name; every file is checked against the copy's
    manifest first (service.backup.restore)."""
    with tempfile.TemporaryDirectory(prefix="ssi-copy-") as work:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as archive:
            archive.extractall(work, filter="data")
        restore(Path(work) / "copy", settings, [COLLECTION])
