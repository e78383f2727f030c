"""Documents' sentence vectors e(d), kept across the bundles that share an encoder: a reload encodes only new texts.

Why: a hybrid bundle's index stores [V d, λ e(d)] (ssi.hybrid), and its snapshots are keyed by the bundle's
content hash (service.snapshot), so a reload to any other bundle computed every row again. V d is a sparse
product; e(d) is a transformer's forward pass: SciFact's 5,183 abstracts took about 6 minutes on 2 cores, at every
promotion of the click-learning loop, whose bundles all have the same encoder. Kept here unscaled (λ differs from
bundle to bundle; the embedder scales them), e(d) of a text already seen is read back, and only new texts are
encoded: at a build, at a write (PUT) and at a replay of the write log alike.

Keys. The folder is index_dir/<collection>/sentence/<encoder key[:16]>/; the encoder key (`encoder_key`) is the
sha256 of what computes e: the graph's and the tokenizer's sha256 as the bundle's manifest lists them (checked
when the bundle loads), the spec's pooling, normalisation, maximum length, E and inputs, and the onnxruntime and
tokenizers versions; not λ, not the encoder's name. An entry's key is the sha256 of exactly the text the encoder
reads (a document's full text).

Cut vectors. A bundle whose vectors are cut to fewer dimensions (ssi.sentence.Projection, `ssi train --sentence-dims`)
keys its own folder by the cut too (its projection's sha256) and holds the cut vectors. What its folder lacks it reads
from the same graph's vectors before any cut (the folder of a bundle without a cut, `encoder_key(..., cut=False)`),
cut on the way (ssi.sentence.project, the encoder's own last step), before it encodes: so switching a collection from
a bundle to one with its vectors cut encodes no document (the 100,000 passages of docs/results/static-encoder.md took
75 minutes here). Read only: that folder is never written by a cut bundle.

Files. A segment `seg-<rows>-<token>.vec` holds rows × E float32 (little-endian), then rows × 32 bytes of text
digests, then a JSON trailer (format, the full encoder key, E, rows, the sha256 of all that precedes it), its
length and MAGIC. It is written under a temporary name, fsynced and renamed (as snapshots are), so a reader sees
a whole segment or none; one that fails a check (torn by a crash, damaged, another encoder's) is logged, removed
and never read. A miss costs an encoding, never a wrong vector.

Bounds. A build writes one segment of exactly its documents and removes the segments it read (texts no longer in
the collection go with them). A write adds a segment of what it encoded; whenever FANOUT segments share a tier
(⌊log₄ rows⌋) they are merged into one, so writes keep O(log n) segments and rewrite each vector O(log n) times.
At most KEEP_ENCODERS encoders' folders are kept per collection (the least recently built go; a cut bundle's
build counts as one of the whole vectors it reads too). A bundle without an encoder never opens any of it. It is a
cache: backups leave it out, and deleting it costs the next build its encodings, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import struct
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import numpy as np

from service.snapshot import SENTENCE_CACHE_DIR, fsync_dir, fsync_file
from ssi.bundle import Bundle
from ssi.sentence import (
    PROJECTION_FILE,
    SENTENCE_DIR,
    TOKENIZER_FILE,
    Part,
    Precision,
    model_file,
    project,
    read_projection,
)

log = logging.getLogger(__name__)

FORMAT = "ssi-sentence-vectors"
FORMAT_VERSION = 1
MAGIC = b"SSISENT1"
_TAIL = struct.Struct("<Q8s")  # the trailer's length, MAGIC
MAX_TRAILER = 4096
DIGEST = np.dtype("S32")  # sha256 of a text
FANOUT = 4  # segments of one tier merged into one
KEEP_ENCODERS = 2  # encoders' folders kept per collection: the one built now and the one before (a rollback)
STALE_TMP_SECONDS = 3600.0  # a temporary file not written to for this long was left by a crash
HASH_CHUNK = 1 << 24  # bytes hashed at a time when a segment is checked
COPY_ROWS = 1 << 16  # rows copied at a time when segments are merged

Encode = Callable[[list[str]], np.ndarray]


class CacheFileError(ValueError):
    """A segment that cannot be used: which check failed."""


def encoder_key(bundle: Bundle, precision: Precision | None = None, part: Part = "document", cut: bool = True) -> str:
    """sha256 hex naming the function e of a hybrid bundle's encoder run at `precision` (its fp32 or int8 graph; None:
    the one the bundle records, which a CPU without fast int8 does not serve: ssi.sentence.served_precision), λ left
    out (see the module's docstring); `part` "query": its query graph's (service.query_vectors' key); `cut` False: the
    graph's vectors before the bundle's cut, where it has one (the key of a bundle without it)."""
    spec = bundle.sentence
    if spec is None:
        raise ValueError(f"{bundle.path}: not a hybrid bundle (no sentence encoder)")
    precision = precision or spec.precision
    files = bundle.manifest.files
    described = spec.model_dump(include={"pooling", "normalize", "max_length", "dims", "inputs"})
    if spec.projection is not None and not cut:  # the graph's own vectors, named as a bundle without the cut names them
        described["dims"] = spec.projection.source_dims
    identity = {
        "format": FORMAT_VERSION,
        "graph": files[f"{SENTENCE_DIR}/{model_file(precision, part)}"],
        "tokenizer": files[f"{SENTENCE_DIR}/{TOKENIZER_FILE}"],
        "spec": described,
        "runtime": {name: _version(name) for name in ("onnxruntime", "tokenizers")},
    }
    # The vectors cut (ssi.sentence.Projection): keyed by the cut too; a bundle without one keeps its key.
    if spec.projection is not None and cut:
        identity["projection"] = files[f"{SENTENCE_DIR}/{PROJECTION_FILE}"]
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def text_digests(texts: Sequence[str]) -> np.ndarray:
    """S32 [texts]: each text's sha256, the key of its entry."""
    return np.array([hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest() for t in texts], dtype=DIGEST)


@dataclass
class Counts:
    """Documents whose e(d) the encoder computed, and those the cache held (LoadReport reads them at a load)."""

    encoded: int = 0
    cached: int = 0


@dataclass(frozen=True, slots=True)
class _Segment:
    """A verified segment, mapped: its keys sorted for lookups (`order`: their rows)."""

    path: Path
    vectors: np.ndarray  # float32 [rows, E], in file order
    keys: np.ndarray  # S32 [rows], sorted
    order: np.ndarray  # int64 [rows]: the row of each sorted key

    @property
    def rows(self) -> int:
        return int(self.keys.shape[0])


def _segment_rows(name: str) -> int | None:
    """The rows a segment's file name says it holds (`seg-<rows>-<token>.vec`), None for another name."""
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != "seg" or not name.endswith(".vec") or not parts[1].isdigit():
        return None
    return int(parts[1])


def _tier(rows: int) -> int:
    return (max(rows, 1).bit_length() - 1) // 2  # ⌊log₄ rows⌋


def read_segment(path: Path, key: str, dims: int) -> _Segment:
    """A segment checked whole (trailer, size, sha256 of its bytes); raises CacheFileError, or OSError."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        if size < _TAIL.size:
            raise CacheFileError(f"{size} bytes, shorter than its tail")
        handle.seek(size - _TAIL.size)
        length, magic = _TAIL.unpack(handle.read(_TAIL.size))
        if magic != MAGIC or length > min(MAX_TRAILER, size - _TAIL.size):
            raise CacheFileError("no segment trailer at its end (torn or not a segment)")
        handle.seek(size - _TAIL.size - length)
        try:
            trailer = json.loads(handle.read(length).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise CacheFileError(f"unreadable trailer ({exc})") from None
    if not isinstance(trailer, dict) or trailer.get("format") != FORMAT or trailer.get("version") != FORMAT_VERSION:
        raise CacheFileError(f"not a {FORMAT} segment of version {FORMAT_VERSION}")
    if trailer.get("encoder") != key:
        raise CacheFileError(f"another encoder's vectors ({str(trailer.get('encoder'))[:16]}…, not {key[:16]}…)")
    rows = trailer.get("rows")
    if trailer.get("dims") != dims or not isinstance(rows, int) or rows < 0:
        raise CacheFileError(f"rows {rows!r} × dims {trailer.get('dims')!r}, expected dims {dims}")
    body = rows * (4 * dims + DIGEST.itemsize)
    if body + length + _TAIL.size != size:
        raise CacheFileError(f"{size} bytes, not the {body + length + _TAIL.size} of {rows} rows")
    data = np.memmap(path, dtype=np.uint8, mode="r", shape=(body,)) if body else np.zeros(0, dtype=np.uint8)
    digest = hashlib.sha256()
    for start in range(0, body, HASH_CHUNK):
        digest.update(data[start : start + HASH_CHUNK])
    if digest.hexdigest() != trailer.get("sha256"):
        raise CacheFileError("its bytes do not match the sha256 its trailer records (damaged)")
    vectors = data[: rows * 4 * dims].view("<f4").reshape(rows, dims)
    digests = data[rows * 4 * dims :].view(DIGEST)
    order = np.argsort(digests, kind="stable")
    return _Segment(path, vectors, digests[order], order)


class _Writer:
    """One segment written whole: rows streamed into a temporary file, published by `finish` (fsync, rename)."""

    def __init__(self, folder: Path, key: str, dims: int) -> None:
        self.folder, self.key, self.dims = folder, key, dims
        self.rows = 0
        self._digest = hashlib.sha256()
        self._keys: list[np.ndarray] = []
        self._tmp: Path | None = None
        self._handle: BinaryIO | None = None

    def add(self, digests: np.ndarray, vectors: np.ndarray) -> None:
        if self._handle is None:  # opened on the first rows: a build's featurizing processes fork before them
            self.folder.mkdir(parents=True, exist_ok=True)
            self._tmp = self.folder / f".tmp-seg-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self._handle = self._tmp.open("wb")
        block = np.ascontiguousarray(vectors, dtype="<f4")
        if block.shape != (digests.shape[0], self.dims):
            raise ValueError(f"{digests.shape[0]} digests for vectors of shape {block.shape}, E = {self.dims}")
        self._handle.write(block.data)
        self._digest.update(block.data)
        self._keys.append(np.asarray(digests, dtype=DIGEST))
        self.rows += block.shape[0]

    def finish(self) -> Path | None:
        """Publish the segment (None: no rows, nothing written)."""
        if self._handle is None or self._tmp is None:
            return None
        keys = np.concatenate(self._keys).tobytes()
        self._digest.update(keys)
        self._handle.write(keys)
        sha256 = self._digest.hexdigest()
        fields = {"format": FORMAT, "version": FORMAT_VERSION, "encoder": self.key, "dims": self.dims}
        trailer = json.dumps({**fields, "rows": self.rows, "sha256": sha256}).encode()
        self._handle.write(trailer)
        self._handle.write(_TAIL.pack(len(trailer), MAGIC))
        self._handle.close()
        self._handle = None
        fsync_file(self._tmp)
        final = self.folder / f"seg-{self.rows:010d}-{uuid.uuid4().hex[:12]}.vec"
        os.rename(self._tmp, final)
        fsync_dir(self.folder)
        return final

    def abort(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class _Looked:
    vectors: np.ndarray  # float32 [texts, E]: e of each text, unscaled
    digests: np.ndarray  # S32 [texts]
    new: np.ndarray  # bool [texts]: not in this cache's folder (encoded now, or cut from the uncut vectors)


@dataclass(frozen=True, slots=True)
class Uncut:
    """A cut bundle's source of vectors before its own folder's encoder: the same graph's vectors before the cut, and
    the cut (ssi.sentence's projection array)."""

    cache: SentenceCache
    projection: np.ndarray


class SentenceCache:
    """e(d) of one encoder for one collection (see the module's docstring). Thread-safe; a failure to write only
    costs later encodings (logged), never the write or the build that asked."""

    def __init__(self, collection_dir: Path, key: str, dims: int, encode: Encode, uncut: Uncut | None = None) -> None:
        self.root = collection_dir / SENTENCE_CACHE_DIR
        self.folder = self.root / key[:16]
        self.key, self.dims = key, dims
        self.encode = encode
        self.uncut = uncut  # a cut bundle's: read where this folder lacks a text, before encoding it
        self.counts = Counts()
        self._segments: dict[str, _Segment] = {}  # by file name: what this process has read and checked
        self._read = False
        self._lock = threading.Lock()

    @classmethod
    def of(
        cls, collection_dir: Path, bundle: Bundle, encode: Encode, precision: Precision | None = None
    ) -> SentenceCache | None:
        """The cache of `bundle`'s encoder (its graph of `precision`) over the collection's index folder; None for a
        bundle without one. A bundle with its vectors cut reads, where its own folder lacks a text, the same graph's
        vectors before the cut (the module's docstring)."""
        spec = bundle.sentence
        if spec is None:
            return None
        uncut = None
        projection = read_projection(bundle.sentence_path, spec)  # None without a cut; checked by its encoder already
        if projection is not None and spec.projection is not None:
            whole = cls(collection_dir, encoder_key(bundle, precision, cut=False), spec.projection.source_dims, _never)
            uncut = Uncut(whole, projection)
        return cls(collection_dir, encoder_key(bundle, precision), spec.dims, encode, uncut)

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [texts, E]: e of each text; those the cache lacks are encoded and kept (a write's documents)."""
        looked = self._look(texts)
        if looked.new.any():
            with self._lock:
                self._keep(looked.digests[looked.new], looked.vectors[looked.new])
        return looked.vectors

    def seed(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Keep e(d) of `texts` computed elsewhere (a sharded index job's tasks, cluster.shard_build): one segment of
        them, as a write keeps what it encoded, so that a shard's later build (a reload to another bundle with this
        encoder) encodes none of them."""
        if len(texts):
            with self._lock:
                self._keep(text_digests(list(texts)), np.asarray(vectors, dtype=np.float32))

    def build(self, encode: Encode | None = None) -> SentenceBuild:
        """A full build's e(d): one segment of its documents replaces what the cache held (`SentenceBuild`);
        `encode`: what encodes the texts the cache lacks, where not the serving encoder (a start-up build's)."""
        return SentenceBuild(self, encode)

    def _held(self) -> set[str]:
        """The segments the folder holds now, read and checked (a build replaces them)."""
        with self._lock:
            self._refresh()
            self._read = True
            return set(self._segments)

    def _publish(self, writer: _Writer, replaces: set[str]) -> None:
        """A build's segment published, the segments it replaces removed, the folder and its siblings bounded."""
        with self._lock:
            try:
                writer.finish()
                for name in replaces:
                    (self.folder / name).unlink(missing_ok=True)
                    self._segments.pop(name, None)
                if self.folder.is_dir():
                    _remove_stale(self.folder)
                    source = self.uncut.cache.folder if self.uncut is not None else None
                    _prune_encoders(self.root, self.folder, source)
            except OSError as exc:
                writer.abort()
                log.warning("could not write the sentence cache's segment in %s: %s", self.folder, exc)

    def _look(self, texts: Sequence[str], encode: Encode | None = None) -> _Looked:
        texts = list(texts)
        digests = text_digests(texts)
        vectors, found = self._found(digests)
        new = ~found
        if self.uncut is not None and new.any():
            missing = np.flatnonzero(new)
            whole, hit = self.uncut.cache._found(digests[missing])
            if hit.any():
                vectors[missing[hit]] = project(self.uncut.projection, whole[hit])
                found[missing[hit]] = True
        todo = ~found
        if todo.any():
            vectors[todo] = (encode or self.encode)([texts[i] for i in np.flatnonzero(todo).tolist()])
        with self._lock:
            self.counts.encoded += int(todo.sum())
            self.counts.cached += int(found.sum())
        return _Looked(vectors, digests, new)

    def _found(self, digests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """float32 [texts, E] and bool [texts]: the vectors of the texts this folder holds (zeros elsewhere)."""
        with self._lock:
            if not self._read:
                self._refresh()
                self._read = True
            vectors, found = self._find(digests)
            if not found.all():  # another process may have kept them since (a worker's write, a merge)
                self._refresh()
                vectors, found = self._find(digests, vectors, found)
        return vectors, found

    def _find(
        self, digests: np.ndarray, vectors: np.ndarray | None = None, found: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        n = digests.shape[0]
        vectors = np.zeros((n, self.dims), dtype=np.float32) if vectors is None else vectors
        found = np.zeros(n, dtype=bool) if found is None else found
        for segment in self._segments.values():
            todo = np.flatnonzero(~found)
            if not todo.size:
                break
            if not segment.rows:
                continue
            wanted = digests[todo]
            at = np.minimum(np.searchsorted(segment.keys, wanted), segment.rows - 1)
            hit = segment.keys[at] == wanted
            vectors[todo[hit]] = segment.vectors[segment.order[at[hit]]]
            found[todo[hit]] = True
        return vectors, found

    def _refresh(self) -> None:
        """Read the segments that appeared in the folder since, forget those that went (the caller holds the lock)."""
        names = {p.name for p in self.folder.glob("seg-*.vec")} if self.folder.is_dir() else set()
        for gone in set(self._segments) - names:
            del self._segments[gone]
        for name in sorted(names - set(self._segments)):
            path = self.folder / name
            try:
                self._segments[name] = read_segment(path, self.key, self.dims)
            except FileNotFoundError:  # merged or replaced by another process meanwhile
                continue
            except CacheFileError as exc:
                log.warning("ignoring sentence cache file %s (removed it): %s", path, exc)
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("ignoring sentence cache file %s (unreadable): %s", path, exc)

    def _keep(self, digests: np.ndarray, vectors: np.ndarray) -> None:
        """Write a segment of these vectors, then merge full tiers (the caller holds the lock)."""
        _, first = np.unique(digests, return_index=True)  # a text twice in one write: once
        writer = _Writer(self.folder, self.key, self.dims)
        try:
            writer.add(digests[first], vectors[first])
            writer.finish()
            self._merge_tiers()
        except OSError as exc:
            writer.abort()
            log.warning("could not keep %d sentence vectors in %s: %s", first.shape[0], self.folder, exc)

    def _merge_tiers(self) -> None:
        while True:
            tiers: dict[int, list[str]] = {}
            for path in self.folder.glob("seg-*.vec"):
                rows = _segment_rows(path.name)
                if rows is not None:
                    tiers.setdefault(_tier(rows), []).append(path.name)
            full = sorted(tier for tier, names in tiers.items() if len(names) >= FANOUT)
            if not full:
                return
            self._refresh()
            merged = [self._segments[name] for name in tiers[full[0]] if name in self._segments]
            writer = _Writer(self.folder, self.key, self.dims)
            try:
                seen = np.empty(0, dtype=DIGEST)
                for segment in merged:  # one segment's rows in memory at a time, each text once
                    fresh = np.flatnonzero(~np.isin(segment.keys, seen))
                    for start in range(0, fresh.shape[0], COPY_ROWS):
                        chosen = fresh[start : start + COPY_ROWS]
                        writer.add(segment.keys[chosen], segment.vectors[segment.order[chosen]])
                    seen = np.concatenate([seen, segment.keys])
                writer.finish()
            except BaseException:
                writer.abort()
                raise
            for name in tiers[full[0]]:
                (self.folder / name).unlink(missing_ok=True)
                self._segments.pop(name, None)


class SentenceBuild:
    """A full build's e(d): `vectors` per batch of documents; `finish` publishes one segment of them all and removes
    the segments the cache held when the build began (those written meanwhile, by writes, stay). A context manager:
    after an error the cache is left as it was."""

    def __init__(self, cache: SentenceCache, encode: Encode | None = None) -> None:
        self.cache = cache
        self.encode = encode
        self._writer: _Writer | None = _Writer(cache.folder, cache.key, cache.dims)  # None: a write failed
        self._replaces: set[str] | None = None  # the segments held when the build began

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [texts, E]: e of each text, from the cache or encoded; each goes into the build's segment."""
        if self._replaces is None:
            self._replaces = self.cache._held()
        looked = self.cache._look(texts, self.encode)
        if self._writer is not None:
            try:
                self._writer.add(looked.digests, looked.vectors)
            except OSError as exc:  # a full disk: the build goes on, the cache keeps what it had
                log.warning("could not write the sentence cache's segment in %s: %s", self.cache.folder, exc)
                self._writer.abort()
                self._writer = None
        return looked.vectors

    def finish(self) -> None:
        if self._writer is not None:
            self.cache._publish(self._writer, self._replaces or set())

    def __enter__(self) -> SentenceBuild:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.finish()
        elif self._writer is not None:
            self._writer.abort()


def _remove_stale(folder: Path) -> None:
    """Temporary files a crashed writer left (one written to within STALE_TMP_SECONDS may be another's, live)."""
    now = time.time()
    for path in folder.glob(".tmp-seg-*"):
        try:
            if now - path.stat().st_mtime > STALE_TMP_SECONDS:
                path.unlink(missing_ok=True)
        except FileNotFoundError:
            pass


def _prune_encoders(root: Path, current: Path, source: Path | None = None) -> None:
    """Keep the KEEP_ENCODERS most recently built encoders' folders (`current` first), remove the others. A cut
    bundle's `source` (the whole vectors it cuts) counts as built now, after `current`: kept rather than the folder
    built before, which it can give again without an encoding."""
    if source is not None and source.is_dir():
        os.utime(source)
    os.utime(current)
    others: list[tuple[float, Path]] = []
    for path in root.iterdir():
        try:
            if path.is_dir() and path != current:
                others.append((path.stat().st_mtime, path))
        except FileNotFoundError:  # removed by another worker's build meanwhile
            continue
    for _, old in sorted(others, reverse=True)[KEEP_ENCODERS - 1 :]:
        shutil.rmtree(old, ignore_errors=True)
        log.info("removed the sentence cache of an encoder not built for a while: %s", old)


def _never(texts: list[str]) -> np.ndarray:
    raise RuntimeError("the uncut vectors of a cut bundle's cache are read, never encoded")
