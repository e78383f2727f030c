"""The model bundle: the one format the trainer writes and the service verifies when it loads.

A bundle is a folder of plain files (Style: bm25s's saved models):

    manifest.json   format + version, model kind, N, D, text pipeline, per-file sha256,
                    content hash, training config, data fingerprint, validation metrics
    vocab.tsv       word<TAB>idf, one line per word id
    U.npy, V.npy    float32 N x D: the score is (U q)·(V d) + Σ_i w_i q_i d_i
    lexical.npy     float32 D: w, the weight of each word on the diagonal (exact-match) term;
                    ones for "UᵀV + I", zeros for "without I", learned for the diagonal model
    encoder.onnx    the query encoder x ↦ U x on the tf-idf vector, run by onnxruntime

Every model kind is exported to this one scoring form, so the service scores them all the same way.
Loading checks the format version, every file's hash and every shape, and refuses a mismatch
with a `BundleError` that says what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from ssi.vocab import Vocabulary

FORMAT = "ssi-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
VOCAB = "vocab.tsv"
U_FILE = "U.npy"
V_FILE = "V.npy"
LEXICAL_FILE = "lexical.npy"
ENCODER_FILE = "encoder.onnx"
PAYLOAD_FILES = (VOCAB, U_FILE, V_FILE, LEXICAL_FILE, ENCODER_FILE)


class BundleError(ValueError):
    """The bundle cannot be used; the message says which file and why."""


class Manifest(BaseModel):
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    kind: str
    n_dims: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    tokenizer: str
    tf_scheme: str
    files: dict[str, str]
    content_hash: str
    created_at: str
    training: dict[str, Any] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)


@dataclass
class Bundle:
    """A loaded, verified bundle. Arrays may be memory-mapped (read-only)."""

    path: Path
    manifest: Manifest
    vocab: Vocabulary
    U: np.ndarray
    V: np.ndarray
    lexical: np.ndarray

    @property
    def encoder_path(self) -> Path:
        return self.path / ENCODER_FILE

    @property
    def content_hash(self) -> str:
        return self.manifest.content_hash


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_hash(files: dict[str, str]) -> str:
    """One hash over the payload files' hashes: the identity of the model's behaviour."""
    lines = "".join(f"{name}:{files[name]}\n" for name in sorted(files))
    return hashlib.sha256(lines.encode()).hexdigest()


def _write_vocab(path: Path, vocab: Vocabulary) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for word, idf in zip(vocab.words, vocab.idf.tolist(), strict=True):
            handle.write(f"{word}\t{idf!r}\n")


def _read_vocab(path: Path, tokenizer: str, tf_scheme: str) -> Vocabulary:
    words: list[str] = []
    idf: list[float] = []
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            word, sep, value = line.rstrip("\n").partition("\t")
            try:
                if not sep or not word:
                    raise ValueError
                idf.append(float(value))
            except ValueError:
                raise BundleError(f"{path}:{number}: expected 'word<TAB>idf'") from None
            words.append(word)
    try:
        return Vocabulary(words=words, idf=np.asarray(idf, dtype=np.float32), tokenizer=tokenizer, tf_scheme=tf_scheme)
    except ValueError as exc:
        raise BundleError(f"{path}: {exc}") from None


def write_bundle(
    out_dir: Path | str,
    *,
    kind: str,
    vocab: Vocabulary,
    U: np.ndarray,
    V: np.ndarray,
    lexical: np.ndarray,
    encoder_onnx: bytes,
    training: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
) -> Manifest:
    """Write a bundle atomically: into a sibling temp folder, then renamed over `out_dir`."""
    out_dir = Path(out_dir)
    U = np.ascontiguousarray(U, dtype=np.float32)
    V = np.ascontiguousarray(V, dtype=np.float32)
    lexical = np.ascontiguousarray(lexical, dtype=np.float32)
    if U.ndim != 2 or U.shape != V.shape or U.shape[1] != vocab.size or lexical.shape != (vocab.size,):
        raise ValueError(
            f"inconsistent shapes: U {U.shape}, V {V.shape}, lexical {lexical.shape}, vocabulary {vocab.size}"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    tmp.chmod(0o755)  # mkdtemp makes 0700; the service may run as another user (docker)
    try:
        _write_vocab(tmp / VOCAB, vocab)
        np.save(tmp / U_FILE, U)
        np.save(tmp / V_FILE, V)
        np.save(tmp / LEXICAL_FILE, lexical)
        (tmp / ENCODER_FILE).write_bytes(encoder_onnx)
        files = {name: _sha256(tmp / name) for name in PAYLOAD_FILES}
        manifest = Manifest(
            kind=kind,
            n_dims=U.shape[0],
            vocab_size=vocab.size,
            tokenizer=vocab.tokenizer,
            tf_scheme=vocab.tf_scheme,
            files=files,
            content_hash=content_hash(files),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            training=training or {},
            data=data or {},
            metrics=metrics or {},
        )
        (tmp / MANIFEST).write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
        for name in (*PAYLOAD_FILES, MANIFEST):
            with (tmp / name).open("rb") as handle:
                os.fsync(handle.fileno())
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            out_dir.rename(old)
            tmp.rename(out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def read_manifest(path: Path | str) -> Manifest:
    """The manifest alone, checked for format and version (cheap: no arrays are read)."""
    path = Path(path)
    if not path.is_dir():
        raise BundleError(f"{path}: not a bundle folder (no such directory)")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise BundleError(f"{path}: not a bundle (missing {MANIFEST})")
    try:
        raw = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{manifest_path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise BundleError(f"{manifest_path}: not an {FORMAT} manifest")
    if raw.get("format_version") != FORMAT_VERSION:
        raise BundleError(
            f"{manifest_path}: format version {raw.get('format_version')!r} is not supported "
            f"(this build reads version {FORMAT_VERSION})"
        )
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        raise BundleError(
            f"{manifest_path}: invalid manifest: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}"
        ) from None


def _load_array(path: Path, mmap: bool) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise BundleError(f"{path}: not a readable .npy array ({exc})") from None


def load_bundle(path: Path | str, *, mmap: bool = True, verify_hashes: bool = True) -> Bundle:
    """Load and verify a bundle; any mismatch raises `BundleError` naming the file."""
    path = Path(path)
    manifest = read_manifest(path)
    missing = [name for name in PAYLOAD_FILES if not (path / name).is_file()]
    if missing:
        raise BundleError(f"{path}: bundle is missing {', '.join(missing)}")
    if set(manifest.files) != set(PAYLOAD_FILES):
        raise BundleError(f"{path / MANIFEST}: file list does not match the format")
    if content_hash(manifest.files) != manifest.content_hash:
        raise BundleError(f"{path / MANIFEST}: content hash does not match the listed files")
    if verify_hashes:
        for name, expected in manifest.files.items():
            if _sha256(path / name) != expected:
                raise BundleError(f"{path / name}: contents do not match the manifest's hash (corrupt or edited)")
    vocab = _read_vocab(path / VOCAB, manifest.tokenizer, manifest.tf_scheme)
    U = _load_array(path / U_FILE, mmap)
    V = _load_array(path / V_FILE, mmap)
    lexical = _load_array(path / LEXICAL_FILE, mmap)
    expected_shape = (manifest.n_dims, manifest.vocab_size)
    for name, array in ((U_FILE, U), (V_FILE, V)):
        if array.shape != expected_shape or array.dtype != np.float32:
            raise BundleError(f"{path / name}: expected float32 {expected_shape}, found {array.dtype} {array.shape}")
    if lexical.shape != (manifest.vocab_size,) or lexical.dtype != np.float32:
        raise BundleError(
            f"{path / LEXICAL_FILE}: expected float32 ({manifest.vocab_size},), found {lexical.dtype} {lexical.shape}"
        )
    if vocab.size != manifest.vocab_size:
        raise BundleError(f"{path / VOCAB}: {vocab.size} words, the manifest says {manifest.vocab_size}")
    from ssi.tokenize import TOKENIZER_VERSION
    from ssi.vocab import TF_SCHEME

    if manifest.tokenizer != TOKENIZER_VERSION or manifest.tf_scheme != TF_SCHEME:
        raise BundleError(
            f"{path / MANIFEST}: made with text pipeline {manifest.tokenizer}/{manifest.tf_scheme}, "
            f"this build has {TOKENIZER_VERSION}/{TF_SCHEME}"
        )
    return Bundle(path=path, manifest=manifest, vocab=vocab, U=U, V=V, lexical=lexical)
