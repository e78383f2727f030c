"""Backup and restore of a service's collections (documents, click log, index snapshots) on one machine.

A backup is taken while the service serves and writes, from its folders, without stopping it:

- each SQLite file of a collection (the document store, the click log and, in a store not yet opened since an
  earlier version, its adverts' metadata book, adopted into their fields when it opens: service.adverts;
  `<data>/stores/<collection>/`) is
  copied through SQLite's online backup API, which copies one transaction-consistent state of the database
  while writers carry on (WAL mode);
- the newest complete index snapshot of each of the collection's cache folders is copied *before* the store. A
  snapshot records the write sequence it reflects and is never changed once complete, so the store copied after
  it holds every write the snapshot lacks: a restored server loads the snapshot and replays the rest from the
  store's write log, or, where the log was trimmed past the snapshot meanwhile, rebuilds its index from the
  store, which is the truth either way.

Everything goes into a temporary folder beside the target, with a manifest of every file's sha256, and is
renamed into place only when complete, so an interrupted backup leaves no folder that looks like one. A restore
checks every file against the manifest first and never writes over a collection that already has a store:
a damaged backup or an occupied data folder is refused with the reason, and nothing is changed.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from service.adverts import BOOK_FILE
from service.settings import Settings
from service.snapshot import seq_of, snapshots
from service.store import STORE_FILE
from ssi.bundle import sha256_file
from ssi.traffic import EVENTS_FILE

MANIFEST = "backup.json"
FORMAT = 1


class BackupError(ValueError):
    """A backup or restore that cannot be done as asked; the message says why, and nothing was changed."""


@dataclass(frozen=True, slots=True)
class CollectionBackup:
    """What one collection's backup holds: the store's identity and write sequence, and the snapshots' sequences."""

    store_uuid: str
    store_seq: int
    documents: int
    events: bool
    snapshots: dict[str, int] = field(default_factory=dict)  # path under index/<collection>/ -> its sequence
    adverts: bool = False  # an earlier version's adverts metadata book (service.adverts.adopt_book), copied too


@dataclass(frozen=True, slots=True)
class BackupManifest:
    created: float
    collections: dict[str, CollectionBackup]
    files: dict[str, str]  # path under the backup folder -> sha256
    format: int = FORMAT

    def write(self, folder: Path) -> None:
        (folder / MANIFEST).write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, folder: Path) -> BackupManifest:
        path = folder / MANIFEST
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if raw.get("format") != FORMAT:
                raise BackupError(f"{path}: backup format {raw.get('format')!r}, this release reads {FORMAT}")
            collections = {name: CollectionBackup(**value) for name, value in raw["collections"].items()}
            return cls(created=raw["created"], collections=collections, files=dict(raw["files"]))
        except FileNotFoundError:
            raise BackupError(f"{folder} is not a backup: it has no {MANIFEST}") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, BackupError):
                raise
            raise BackupError(f"{path} cannot be read: {exc}") from None


def copy_sqlite(source: Path, target: Path) -> None:
    """One consistent state of a live SQLite database, however long its writers keep writing (the backup API
    reads it in one read transaction; WAL writers are not blocked)."""
    live = sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True, timeout=60)
    try:
        copy = sqlite3.connect(target)
        try:
            live.backup(copy)
        finally:
            copy.close()
    finally:
        live.close()
    with target.open("rb") as handle:
        os.fsync(handle.fileno())


def _store_identity(path: Path) -> tuple[str, int, int]:
    """The store's uuid, last write sequence and number of documents."""
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=60)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        documents = conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
    finally:
        conn.close()
    return meta["uuid"], int(meta["last_seq"]), int(documents)


def _copy_newest_snapshot(cache_folder: Path, target: Path) -> Path | None:
    """Copy the newest complete snapshot of `cache_folder` under `target`; the snapshot a compaction or a newer
    snapshot removes while it is being copied is skipped for the next one. Its path under `target`, or None."""
    for snapshot in snapshots(cache_folder):
        copied = target / snapshot.name
        try:
            shutil.copytree(snapshot, copied)
        except (FileNotFoundError, shutil.Error):
            shutil.rmtree(copied, ignore_errors=True)
            continue
        return copied
    return None


def collections_in(settings: Settings) -> list[str]:
    """The collections that have a document store under the settings' data folder."""
    root = settings.store_dir
    return sorted(p.name for p in root.iterdir() if (p / STORE_FILE).is_file()) if root.is_dir() else []


def backup(settings: Settings, out: Path, names: list[str] | None = None) -> BackupManifest:
    """Copy the collections `names` (every one with a store when None) of the service using `settings`' folders
    into the new folder `out`."""
    out = out.absolute()
    if out.exists():
        raise BackupError(f"{out} exists: a backup goes into a new folder")
    found = collections_in(settings)
    chosen = found if names is None else names
    missing = [name for name in chosen if name not in found]
    if missing or not chosen:
        where = settings.store_dir
        raise BackupError(f"no document store for {', '.join(missing) or 'any collection'} under {where}")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        collections = {name: _backup_collection(settings, name, work) for name in chosen}
        files = {str(p.relative_to(work)): sha256_file(p) for p in sorted(work.rglob("*")) if p.is_file()}
        manifest = BackupManifest(created=time.time(), collections=collections, files=files)
        manifest.write(work)
        os.rename(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return manifest


def _backup_collection(settings: Settings, name: str, work: Path) -> CollectionBackup:
    store = settings.store_dir / name / STORE_FILE
    uuid, _, _ = _store_identity(store)
    # Snapshots first: the store copied after them holds every write they lack.
    copied: dict[str, int] = {}
    index = settings.index_dir / name
    for cache_folder in sorted(index.glob(f"*-{uuid[:12]}-*")) if index.is_dir() else []:
        snapshot = _copy_newest_snapshot(cache_folder, work / "index" / name / cache_folder.name)
        if snapshot is not None:
            copied[f"{cache_folder.name}/{snapshot.name}"] = seq_of(snapshot)
    stores = work / "stores" / name
    stores.mkdir(parents=True)
    copy_sqlite(store, stores / STORE_FILE)
    events = settings.store_dir / name / EVENTS_FILE
    if events.is_file():
        copy_sqlite(events, stores / EVENTS_FILE)
    book = settings.store_dir / name / BOOK_FILE
    if book.is_file():
        copy_sqlite(book, stores / BOOK_FILE)
    uuid, seq, documents = _store_identity(stores / STORE_FILE)
    return CollectionBackup(uuid, seq, documents, events.is_file(), copied, book.is_file())


def restore(source: Path, settings: Settings, names: list[str] | None = None) -> BackupManifest:
    """Copy the backup `source` (its collections `names`, every one when None) into `settings`' folders, which
    must not hold a store for any of them yet."""
    manifest = BackupManifest.read(source)
    chosen = list(manifest.collections) if names is None else names
    unknown = [name for name in chosen if name not in manifest.collections]
    if unknown:
        raise BackupError(
            f"{source} holds no collection {', '.join(unknown)} (it holds {', '.join(manifest.collections)})"
        )
    for relative, digest in manifest.files.items():
        path = source / relative
        if not path.is_file():
            raise BackupError(f"{source} is incomplete: {relative} is missing")
        if sha256_file(path) != digest:
            raise BackupError(f"{source} is damaged: {relative} does not match its sha256 in {MANIFEST}")
    for name in chosen:
        occupied = settings.store_dir / name
        if occupied.exists() and any(occupied.iterdir()):
            raise BackupError(f"{occupied} is not empty: restore a collection into a data folder that lacks it")
    for name in chosen:
        _place(source / "index" / name, settings.index_dir / name)
        _place(source / "stores" / name, settings.store_dir / name)
    return manifest


def _place(source: Path, target: Path) -> None:
    """Copy the folder `source` to `target` (whose parent may hold other things) through a temporary name."""
    if not source.is_dir():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        shutil.copytree(source, work, dirs_exist_ok=True)
        if target.exists():  # an index folder of other stores: add beside them
            for child in work.iterdir():
                if not (target / child.name).exists():
                    os.rename(child, target / child.name)
            shutil.rmtree(work)
        else:
            os.rename(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
