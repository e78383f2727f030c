"""Index snapshots on disk: the cached document embeddings, tf-idf rows and FAISS index of one collection state.

A snapshot is a folder `snap-<seq>` of plain files (Style: bm25s's saved models) written into a
temporary sibling folder, fsynced, then renamed into place: a crash leaves either the previous
snapshot or the new one, never half of one. `meta.json` records the write sequence the snapshot
reflects, so the writes logged after it can be replayed from the store. The folder above it is the
cache key: bundle content hash + the store it derives from + what the index build depends on.

A second snapshot of the same sequence (a compacted one: same documents, fewer rows) gets a
suffix, `snap-<seq>-<n>`, which sorts after the first, so the compaction is found on the next
start instead of being discarded and redone. The newest KEEP snapshots are kept; a snapshot that
cannot be used is removed with a warning (`discard`), never kept to be retried on every start.

    meta.json           format, seq, store uuid, bundle hash, index tag, rows, dims
    index.faiss         the HNSW or IVF index (ids = rows; an IndexIDMap2 before format 3);
                        absent for a flat index, whose vectors are the embeddings
    embeddings.npy      float32 rows × M: every row's embedding (the form's embed_documents); only
                        for a flat index since format 3 (HNSW and IVF hold their vectors, and the
                        service reads them back from the index)
    codes.npy, code_scales.npy, code_radius.npy   a flat index's int8 copy of the embeddings (rows × M),
                        each row's scale and error radius (float32 rows; service.quantized), mapped
                        like the embeddings; a snapshot without them (older ones) has them computed
    tfidf_data.npy, tfidf_indices.npy, tfidf_indptr.npy   the rows' tf-idf vectors (CSC, rows × D)
    doc_ids.json        the document id of every row
    live.npy            bool per row: false for replaced or deleted documents
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from service.quantized import Codes

log = logging.getLogger(__name__)

FORMAT = "ssi-index-snapshot"
FORMAT_VERSION = 3  # 2: index.faiss may be absent (flat); 3: embeddings.npy only without index.faiss
READABLE_VERSIONS = (1, 2, 3)
KEEP = 2  # snapshots kept per cache folder: the newest, and one to fall back on if it is damaged
# The folder of service.sentence_cache beside a collection's cache folders: documents' sentence vectors kept across
# bundles, no snapshot in it; it bounds itself, so `prune_cache` leaves it alone.
SENTENCE_CACHE_DIR = "sentence"
_NAME = re.compile(r"^snap-(\d{15})(?:-(\d+))?$")


class SnapshotError(RuntimeError):
    """A snapshot cannot be used; the message says which file and why."""


@dataclass
class SnapshotData:
    seq: int
    store_uuid: str
    bundle_hash: str
    index_tag: str
    index_blob: np.ndarray | None  # serialized FAISS index (None: none saved; a flat index is rebuilt)
    # None when the index is saved (it holds the vectors). Read: one array (mapped); to write: also the row
    # blocks of a flat index in order (VectorIndex.vector_parts), saved as one file without joining them.
    embeddings: np.ndarray | list[np.ndarray] | None
    dims: int
    tfidf: sp.csc_matrix
    doc_ids: list[str]
    live: np.ndarray
    path: Path | None = None
    # A flat index's int8 codes (service.quantized), like `embeddings`: read, one Codes (mapped) or None where the
    # snapshot has none; to write, its row blocks in order.
    codes: Codes | list[Codes] | None = None
    # The open vocabulary's postings (ssi.open_vocab.OpenPostings.to_json); None: closed, or not in the snapshot.
    open_vocab: dict[str, object] | None = None

    @property
    def rows(self) -> int:
        return len(self.doc_ids)


def cache_folder(index_dir: Path, collection: str, bundle_hash: str, store_uuid: str, index_tag: str) -> Path:
    return index_dir / collection / f"{bundle_hash[:16]}-{store_uuid[:12]}-{index_tag}"


def fsync_file(path: Path) -> None:
    """Its bytes on disk before a rename publishes it (snapshots, service.sentence_cache)."""
    with path.open("rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def seq_of(path: Path) -> int:
    """The write sequence a snapshot reflects, from its folder name."""
    match = _NAME.match(path.name)
    if match is None:
        raise ValueError(f"{path}: not a snapshot folder name")
    return int(match.group(1))


def _free_name(folder: Path, seq: int) -> Path:
    final = folder / f"snap-{seq:015d}"
    n = 0
    while final.exists():
        n += 1
        final = folder / f"snap-{seq:015d}-{n:03d}"
    return final


def _save_rows(path: Path, blocks: np.ndarray | list[np.ndarray], dims: int, dtype: type = np.float32) -> None:
    """Row blocks written one after another as one .npy (rows × dims; dims 0: one value a row), never joined
    in memory.

    Written through the file, not a writable mapping: a full disk is then an OSError the snapshot's
    retry handles, where writing into mapped pages would kill the process with SIGBUS."""
    pieces = [blocks] if isinstance(blocks, np.ndarray) else blocks
    rows = sum(piece.shape[0] for piece in pieces)
    descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
    header = {"descr": descr, "fortran_order": False, "shape": (rows, dims) if dims else (rows,)}
    with path.open("wb") as out:
        np.lib.format.write_array_header_1_0(out, header)
        for piece in pieces:
            out.write(np.ascontiguousarray(piece, dtype=dtype).data)


_CODE_FILES = ("codes.npy", "code_scales.npy", "code_radius.npy")


def _save_codes(folder: Path, codes: Codes | list[Codes], dims: int) -> None:
    pieces = [codes] if isinstance(codes, Codes) else codes
    _save_rows(folder / "codes.npy", [piece.codes for piece in pieces], dims, np.int8)
    _save_rows(folder / "code_scales.npy", [piece.scales for piece in pieces], 0)
    _save_rows(folder / "code_radius.npy", [piece.radius for piece in pieces], 0)


def _read_codes(folder: Path, rows: int, dims: int) -> Codes | None:
    """The saved int8 codes, mapped, or None where the snapshot has none (they are then computed)."""
    if not all((folder / name).exists() for name in _CODE_FILES):
        return None
    codes, scales, radius = (np.load(folder / name, mmap_mode="r", allow_pickle=False) for name in _CODE_FILES)
    if codes.shape != (rows, dims) or codes.dtype != np.int8 or scales.shape != (rows,) or radius.shape != (rows,):
        raise SnapshotError(f"{folder}: the int8 codes disagree with the embeddings' {rows} rows × {dims}")
    if scales.dtype != np.float32 or radius.dtype != np.float32:
        raise SnapshotError(f"{folder}: the int8 codes' scales and radius must be float32")
    return Codes(codes, scales, radius)


def write_snapshot(folder: Path, data: SnapshotData) -> Path:
    """Write atomically as `folder/snap-<seq>` (suffixed if that exists), then drop snapshots beyond the last KEEP."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-snap-", dir=folder))
    try:
        if data.index_blob is not None:
            data.index_blob.tofile(tmp / "index.faiss")
        if data.embeddings is not None:
            _save_rows(tmp / "embeddings.npy", data.embeddings, data.dims)
        if data.codes is not None:
            _save_codes(tmp, data.codes, data.dims)
        np.save(tmp / "tfidf_data.npy", data.tfidf.data.astype(np.float32, copy=False))
        np.save(tmp / "tfidf_indices.npy", data.tfidf.indices.astype(np.int32, copy=False))
        np.save(tmp / "tfidf_indptr.npy", data.tfidf.indptr.astype(np.int64, copy=False))
        np.save(tmp / "live.npy", np.asarray(data.live, dtype=bool))
        (tmp / "doc_ids.json").write_text(json.dumps(data.doc_ids, ensure_ascii=False), encoding="utf-8")
        if data.open_vocab is not None:
            (tmp / "open_vocab.json").write_text(json.dumps(data.open_vocab, ensure_ascii=False), encoding="utf-8")
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "seq": data.seq,
            "store_uuid": data.store_uuid,
            "bundle_hash": data.bundle_hash,
            "index_tag": data.index_tag,
            "rows": data.rows,
            "n_dims": int(data.dims),
            "vocab_size": int(data.tfidf.shape[1]),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        for path in tmp.iterdir():
            fsync_file(path)
        fsync_dir(tmp)
        final = _free_name(folder, data.seq)
        tmp.rename(final)
        fsync_dir(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list(snapshots(folder))[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in folder.glob(".tmp-snap-*"):
        if stale != tmp:
            shutil.rmtree(stale, ignore_errors=True)
    return final


def snapshots(folder: Path) -> Iterator[Path]:
    """Complete snapshot folders, newest first (by sequence, then by suffix: a compaction comes first)."""
    if not folder.is_dir():
        return iter(())
    found = sorted((p for p in folder.glob("snap-*") if p.is_dir() and _NAME.match(p.name)), key=_order, reverse=True)
    return iter(found)


def _order(path: Path) -> tuple[int, int]:
    match = _NAME.match(path.name)
    assert match is not None
    return int(match.group(1)), int(match.group(2) or 0)


def discard(path: Path) -> None:
    """Remove a snapshot that cannot be used, so it is neither retried on every start nor kept on disk.

    The caller logs why. Removing is safe: a snapshot is a cache of what the store and its log hold.
    """
    shutil.rmtree(path, ignore_errors=True)


def disk_bytes(folder: Path) -> int:
    """Bytes of every file under `folder` (0 if it does not exist)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # removed meanwhile
                pass
    return total


def prune_cache(collection_dir: Path, current: Path, store_uuid: str, log_floor: int) -> list[Path]:
    """Remove the cache folders of one collection that can no longer load: another store's, or older than the log.

    A snapshot can only be brought up to date if the write log still holds every write after it
    (`log_floor`); cache folders of other bundles or index settings whose newest snapshot is older
    are dead weight, and so are those of a store that no longer exists. Returns what was removed.
    """
    removed: list[Path] = []
    if not collection_dir.is_dir():
        return removed
    for folder in collection_dir.iterdir():
        if not folder.is_dir() or folder == current or folder.name == SENTENCE_CACHE_DIR:
            continue
        newest = next(snapshots(folder), None)
        other_store = f"-{store_uuid[:12]}-" not in folder.name
        if other_store or newest is None or seq_of(newest) < log_floor:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    if removed:
        log.info("removed %d cache folders that can no longer load: %s", len(removed), ", ".join(map(str, removed)))
    return removed


def read_snapshot(
    path: Path,
    *,
    bundle_hash: str,
    store_uuid: str,
    index_tag: str,
    index_dims: int,
    vocab_size: int,
    open_vocab: bool = False,
) -> SnapshotData:
    """Load and check a snapshot (the FAISS index is read separately); raises SnapshotError. `open_vocab`: read
    its open_vocab.json too, where it has one (SSI_OPEN_VOCAB on); off, that file is left unread."""
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"{path}: unreadable meta.json ({exc})") from None
    if meta.get("format_version") not in READABLE_VERSIONS:
        raise SnapshotError(f"{path}: format_version is {meta.get('format_version')!r}, expected {READABLE_VERSIONS}")
    expected = {
        "format": FORMAT,
        "bundle_hash": bundle_hash,
        "store_uuid": store_uuid,
        "index_tag": index_tag,
        "n_dims": index_dims,  # the key of format 1: the size of each stored vector (M)
        "vocab_size": vocab_size,
    }
    for key, value in expected.items():
        if meta.get(key) != value:
            raise SnapshotError(f"{path}: {key} is {meta.get(key)!r}, expected {value!r}")
    rows = int(meta["rows"])
    try:
        embeddings = codes = None
        if not (path / "index.faiss").exists():  # a saved index holds the vectors (older ones saved both)
            embeddings = np.load(path / "embeddings.npy", mmap_mode="r", allow_pickle=False)
            codes = _read_codes(path, rows, index_dims)
        # Memory-mapped: the pages are the page cache's, shared by the workers of a server that load the same
        # snapshot (service.workers), until writes merge the matrix into a private one. A snapshot's files are
        # never rewritten in place (written to a new folder, then renamed; old ones unlinked), so a mapping
        # stays valid for as long as the process holds it.
        data = np.load(path / "tfidf_data.npy", mmap_mode="r", allow_pickle=False)
        indices = np.load(path / "tfidf_indices.npy", mmap_mode="r", allow_pickle=False)
        indptr = np.load(path / "tfidf_indptr.npy", allow_pickle=False)
        live = np.load(path / "live.npy", allow_pickle=False)
        doc_ids = json.loads((path / "doc_ids.json").read_text(encoding="utf-8"))
        tfidf = sp.csc_matrix((data, indices, indptr), shape=(rows, vocab_size))
        open_path = path / "open_vocab.json"
        open_postings = None
        if open_vocab and open_path.exists():
            open_postings = json.loads(open_path.read_text(encoding="utf-8"))
            if not isinstance(open_postings, dict):
                raise ValueError("open_vocab.json must be an object")
    except (OSError, ValueError, TypeError) as exc:
        raise SnapshotError(f"{path}: damaged snapshot ({exc})") from None
    shape_ok = embeddings is None or embeddings.shape == (rows, index_dims)
    if not shape_ok or live.shape != (rows,) or len(doc_ids) != rows:
        raise SnapshotError(f"{path}: files disagree on the number of rows ({rows})")
    if not all(isinstance(doc_id, str) for doc_id in doc_ids):
        raise SnapshotError(f"{path}: doc_ids.json must be a list of strings")
    return SnapshotData(
        seq=int(meta["seq"]),
        store_uuid=store_uuid,
        bundle_hash=bundle_hash,
        index_tag=index_tag,
        index_blob=None,
        embeddings=embeddings,
        dims=index_dims,
        tfidf=tfidf,
        doc_ids=doc_ids,
        live=live,
        path=path,
        codes=codes,
        open_vocab=open_postings,
    )
