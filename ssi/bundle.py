"""The model bundle: the one format the trainer writes and the service verifies when it loads.

A bundle is a folder of plain files (Style: bm25s's saved models):

    manifest.json   format + version, model form, N, D, the index dimension M, text pipeline
                    (tokenizer, tf scheme, and `lexical`: BM25's k1, b, average length, or null: tf-idf),
                    per-file sha256, content hash, training config, data fingerprint, metrics
    vocab.tsv       word<TAB>idf, one line per word id (BM25's idf for a BM25 vocabulary)
    <name>.npy      each array the form declares (ssi.forms), float32, e.g. U.npy and V.npy
    encoder.onnx    the query encoder x ↦ (query map) x on the tf-idf vector, run by onnxruntime
                    (absent for a form not served exactly, e.g. hash kernels: index_dims 0)
    documents.tsv   fingerprint<TAB>id per training document of a keyed form (half-transductive:
                    row i of its free vectors v), absent for the others (manifest `documents` null)
    cfh_*           the correlated-hashing map of a vocabulary that has one (ssi.feature_hashing; manifest
                    `hashing`, null without): rare words and 2-grams → k frequent words each
    sentence/       a hybrid bundle's pre-trained sentence encoder and its weight λ (ssi.sentence,
                    ssi.hybrid; manifest `sentence`, a key absent from every other bundle, so a bundle
                    without it is written as before, byte for byte); index_dims is then M + E

The manifest names the form; the form says which arrays there are and how to score with them.
Loading checks the format version, every file's hash and every shape, and refuses a mismatch
with a `BundleError` that says what is wrong. A version-1 bundle (U, V and a diagonal weight for
every kind) is read through `ssi.bundle_v1` into the same form.
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

from ssi.feature_hashing import FILES as HASHING_FILES
from ssi.feature_hashing import HashingError, read_hashing, write_hashing
from ssi.forms import DocumentKeys, Form, FormError, form_class
from ssi.idf_table import read_idf_table, write_idf_table
from ssi.sentence import SENTENCE_DIR, SentenceError, SentenceSpec, files_of, read_spec
from ssi.stemming import STEMMERS, stemmer_of
from ssi.tokenize import TOKENIZER_VERSION
from ssi.vocab import TF_SCHEME, Vocabulary
from ssi.weighting import BM25_SCHEME, Bm25

FORMAT = "ssi-bundle"
# 3: the content hash covers the text pipeline (tokenizer, tf scheme, BM25's k1, b and average length) as well as
# the files, so two bundles that weight words differently never share a hash (nor a cached index snapshot).
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, FORMAT_VERSION)
MANIFEST = "manifest.json"
VOCAB = "vocab.tsv"
ENCODER_FILE = "encoder.onnx"
DOCUMENTS = "documents.tsv"


class BundleError(ValueError):
    """The bundle cannot be used; the message says which file and why."""


class Manifest(BaseModel):
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    form: str
    n_dims: int = Field(ge=0)  # N of the form's arrays (0: a form without embeddings)
    # M: the size of the query embedding and of each vector in the index; 0: a form not served exactly (no encoder)
    index_dims: int = Field(ge=0)
    vocab_size: int = Field(ge=1)
    arrays: dict[str, list[int]]  # array name -> shape; stored as <name>.npy
    tokenizer: str
    tf_scheme: str
    files: dict[str, str]
    content_hash: str
    created_at: str
    training: dict[str, Any] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, Any] = Field(default_factory=dict)
    documents: int | None = Field(None, ge=0)  # lines of documents.tsv: a keyed form's documents (None: no file)
    hashing: dict[str, Any] | None = None  # the vocabulary's correlated-hashing map (ssi.feature_hashing), if any
    # The BM25 weighting's k1, b and average length (ssi.weighting; tf_scheme BM25_SCHEME); None: tf-idf,
    # which every bundle written before the field existed is.
    lexical: dict[str, Any] | None = None
    # A hybrid bundle's sentence encoder (ssi.sentence.SentenceSpec, as sentence/sentence.json holds it); None:
    # none, and then the key is not written at all.
    sentence: dict[str, Any] | None = None

    def payload_files(self) -> list[str]:
        encoder = [ENCODER_FILE] if self.index_dims else []
        keys = [DOCUMENTS] if self.documents is not None else []
        keys += list(HASHING_FILES) if self.hashing is not None else []
        keys += sentence_files(SentenceSpec.model_validate(self.sentence)) if self.sentence is not None else []
        return [VOCAB, *encoder, *keys, *(array_file(name) for name in self.arrays)]

    @property
    def sentence_dims(self) -> int:
        """E, the sentence encoder's share of index_dims (0 without one)."""
        return int(self.sentence["dims"]) if self.sentence is not None else 0

    def to_json(self) -> str:
        """manifest.json's text; a bundle without a sentence encoder has no `sentence` key."""
        return self.model_dump_json(indent=2, exclude={"sentence"} if self.sentence is None else None)


def sentence_files(spec: SentenceSpec) -> list[str]:
    """The sentence folder's files as the manifest lists them (int8 and query graphs only where the spec records
    them)."""
    return [f"{SENTENCE_DIR}/{name}" for name in files_of(spec)]


@dataclass
class Bundle:
    """A loaded, verified bundle: the vocabulary and the form bound to its (memory-mapped) arrays."""

    path: Path
    manifest: Manifest
    vocab: Vocabulary
    form: Form
    sentence: SentenceSpec | None = None  # a hybrid bundle's sentence encoder (ssi.hybrid), else None

    @property
    def encoder_path(self) -> Path:
        return self.path / ENCODER_FILE

    @property
    def sentence_path(self) -> Path:
        """The sentence encoder's folder (ssi.sentence.SentenceEncoder reads it); only for a hybrid bundle."""
        return self.path / SENTENCE_DIR

    @property
    def content_hash(self) -> str:
        return self.manifest.content_hash


def array_file(name: str) -> str:
    return f"{name}.npy"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_hash(files: dict[str, str], pipeline: dict[str, Any] | None = None) -> str:
    """One hash over the payload files' hashes and (format 3) the text pipeline: the identity of the model's
    behaviour. A version-2 manifest's hash covered the files alone; `pipeline` None computes that."""
    lines = "".join(f"{name}:{files[name]}\n" for name in sorted(files))
    if pipeline is not None:
        lines += f"pipeline:{json.dumps(pipeline, sort_keys=True, separators=(',', ':'))}\n"
    return hashlib.sha256(lines.encode()).hexdigest()


def pipeline_of(tokenizer: str, tf_scheme: str, lexical: dict[str, Any] | None) -> dict[str, Any]:
    """What, besides the files, decides how a bundle weights a text: the part of its manifest the hash covers."""
    return {"tokenizer": tokenizer, "tf_scheme": tf_scheme, "lexical": lexical}


def _write_vocab(path: Path, vocab: Vocabulary) -> None:
    write_idf_table(path, vocab.words, vocab.idf)


def read_vocab(path: Path, tokenizer: str, tf_scheme: str, lexical: dict[str, Any] | None = None) -> Vocabulary:
    try:
        words, idf = read_idf_table(path)
    except ValueError as exc:
        raise BundleError(str(exc)) from None
    try:
        bm25 = Bm25.from_manifest(lexical) if lexical is not None else None
        return Vocabulary(words=words, idf=idf, tokenizer=tokenizer, tf_scheme=tf_scheme, bm25=bm25)
    except ValueError as exc:
        raise BundleError(f"{path}: {exc}") from None


def _write_documents(path: Path, keys: DocumentKeys) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for doc_id, fingerprint in zip(keys.ids, keys.fingerprints, strict=True):
            if any(c in doc_id for c in "\t\r\n"):
                raise ValueError(f"document id {doc_id!r} has a tab or line break: it cannot be stored in {DOCUMENTS}")
            handle.write(f"{fingerprint}\t{doc_id}\n")


def read_documents(path: Path, expected: int) -> DocumentKeys:
    ids: list[str] = []
    prints: list[str] = []
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fingerprint, sep, doc_id = line.rstrip("\n").partition("\t")
            if not sep or not fingerprint or not doc_id:
                raise BundleError(f"{path}:{number}: expected 'fingerprint<TAB>document id'")
            prints.append(fingerprint)
            ids.append(doc_id)
    if len(ids) != expected:
        raise BundleError(f"{path}: {len(ids)} documents, the manifest says {expected}")
    try:
        return DocumentKeys(tuple(ids), tuple(prints))
    except FormError as exc:
        raise BundleError(f"{path}: {exc}") from None


def write_bundle(
    out_dir: Path | str,
    *,
    form: Form,
    vocab: Vocabulary,
    encoder_onnx: bytes | None,
    training: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    sentence: Path | None = None,
) -> Manifest:
    """Write a bundle atomically: into a sibling temp folder, then renamed over `out_dir`.

    `encoder_onnx` is the query encoder of a form served exactly, None for one that is not (no query map).
    `sentence`: a sentence encoder's folder (training.sentence_export, its λ set) for a hybrid bundle.
    """
    out_dir = Path(out_dir)
    if form.vocab_size != vocab.size:
        raise ValueError(f"the form's arrays have D = {form.vocab_size}, the vocabulary {vocab.size} words")
    if (encoder_onnx is None) != (not form.served_exactly):
        raise ValueError(
            f"form '{form.name}' "
            + ("is served exactly: it needs its query encoder" if form.served_exactly else "has no query encoder")
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    tmp.chmod(0o755)  # mkdtemp makes 0700; the service may run as another user (docker)
    try:
        _write_vocab(tmp / VOCAB, vocab)
        for name, array in form.values.items():
            np.save(tmp / array_file(name), np.ascontiguousarray(array, dtype=np.float32))
        if encoder_onnx is not None:
            (tmp / ENCODER_FILE).write_bytes(encoder_onnx)
        keys = form.document_keys
        if keys is not None:
            _write_documents(tmp / DOCUMENTS, keys)
        hashing = write_hashing(tmp, vocab.hashing) if vocab.hashing is not None else []
        spec = _copy_sentence(sentence, tmp, form) if sentence is not None else None
        arrays = {name: list(array.shape) for name, array in form.values.items()}
        encoder = [ENCODER_FILE] if encoder_onnx is not None else []
        names = [VOCAB, *encoder, *([DOCUMENTS] if keys is not None else []), *hashing]
        names += sentence_files(spec) if spec is not None else []
        names += [array_file(name) for name in arrays]
        files = {name: sha256_file(tmp / name) for name in names}
        lexical = vocab.bm25.manifest_entry() if vocab.bm25 is not None else None
        manifest = Manifest(
            form=form.name,
            n_dims=form.n_dims,
            index_dims=form.index_dims + (spec.dims if spec is not None else 0),
            vocab_size=vocab.size,
            arrays=arrays,
            tokenizer=vocab.tokenizer,
            tf_scheme=vocab.tf_scheme,
            files=files,
            content_hash=content_hash(files, pipeline_of(vocab.tokenizer, vocab.tf_scheme, lexical)),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            training=training or {},
            data=data or {},
            metrics=metrics or {},
            documents=len(keys) if keys is not None else None,
            hashing=vocab.hashing.manifest_entry() if vocab.hashing is not None else None,
            lexical=lexical,
            sentence=spec.model_dump() if spec is not None else None,
        )
        (tmp / MANIFEST).write_text(manifest.to_json(), encoding="utf-8")
        for name in (*names, MANIFEST):
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


def _copy_sentence(folder: Path, into: Path, form: Form) -> SentenceSpec:
    """Copy a sentence encoder's files into the bundle folder being written; returns its spec."""
    if not form.served_exactly:
        raise ValueError(f"form '{form.name}' is not served from an index: it cannot take a sentence encoder")
    try:
        spec = read_spec(folder)
    except SentenceError as exc:
        raise ValueError(str(exc)) from None
    (into / SENTENCE_DIR).mkdir()
    for name in files_of(spec):
        shutil.copyfile(folder / name, into / SENTENCE_DIR / name)
    return spec


def is_bundle(folder: Path) -> bool:
    """Whether `folder` is a bundle (it has a manifest), as opposed to, say, a model folder."""
    return (folder / MANIFEST).is_file()


def read_raw_manifest(path: Path) -> dict[str, Any]:
    """manifest.json as a dict, checked to be an ssi-bundle manifest (any version)."""
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
    return raw


def read_manifest(path: Path | str) -> Manifest:
    """The manifest alone, checked for format and version (cheap: no arrays are read)."""
    path = Path(path)
    raw = read_raw_manifest(path)
    manifest_path = path / MANIFEST
    if raw.get("format_version") == 1:
        from ssi.bundle_v1 import upgrade_manifest

        return upgrade_manifest(path, raw)
    if raw.get("format_version") not in READABLE_VERSIONS:
        raise BundleError(
            f"{manifest_path}: format version {raw.get('format_version')!r} is not supported "
            f"(this build reads versions {', '.join(map(str, READABLE_VERSIONS))}); re-export it with `ssi train`"
        )
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        raise BundleError(
            f"{manifest_path}: invalid manifest: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}"
        ) from None


def load_array(path: Path, mmap: bool) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise BundleError(f"{path}: not a readable .npy array ({exc})") from None


def verify_files(
    path: Path,
    files: dict[str, str],
    expected_hash: str,
    verify_hashes: bool,
    pipeline: dict[str, Any] | None = None,
) -> None:
    """Every listed file is there, the content hash covers them (and the pipeline, from format 3) and (optionally)
    each file's hash matches."""
    missing = [name for name in files if not (path / name).is_file()]
    if missing:
        raise BundleError(f"{path}: bundle is missing {', '.join(missing)}")
    if content_hash(files, pipeline) != expected_hash:
        raise BundleError(f"{path / MANIFEST}: content hash does not match the listed files")
    if verify_hashes:
        for name, expected in files.items():
            if sha256_file(path / name) != expected:
                raise BundleError(f"{path / name}: contents do not match the manifest's hash (corrupt or edited)")


def check_text_pipeline(path: Path, tokenizer: str, tf_scheme: str) -> None:
    try:
        stemmer_of(tokenizer)
        known = tf_scheme in (TF_SCHEME, BM25_SCHEME)
    except ValueError:
        known = False
    if not known:
        raise BundleError(
            f"{path / MANIFEST}: made with text pipeline {tokenizer}/{tf_scheme}, "
            f"this build has {TOKENIZER_VERSION} (+ a Snowball stemmer: {', '.join(STEMMERS[1:])})"
            f"/{TF_SCHEME} or {BM25_SCHEME}"
        )


def load_bundle(path: Path | str, *, mmap: bool = True, verify_hashes: bool = True) -> Bundle:
    """Load and verify a bundle; any mismatch raises `BundleError` naming the file."""
    path = Path(path)
    manifest = read_manifest(path)
    if manifest.format_version == 1:
        from ssi.bundle_v1 import load_v1

        return load_v1(path, manifest, mmap=mmap, verify_hashes=verify_hashes)
    if sorted(manifest.files) != sorted(manifest.payload_files()):
        raise BundleError(f"{path / MANIFEST}: file list does not match the form's arrays")
    check_text_pipeline(path, manifest.tokenizer, manifest.tf_scheme)  # first: another build's pipeline, named
    covered = (
        pipeline_of(manifest.tokenizer, manifest.tf_scheme, manifest.lexical) if manifest.format_version >= 3 else None
    )
    verify_files(path, manifest.files, manifest.content_hash, verify_hashes, covered)
    vocab = read_vocab(path / VOCAB, manifest.tokenizer, manifest.tf_scheme, manifest.lexical)
    if manifest.hashing is not None:
        try:
            vocab = Vocabulary(
                vocab.words, vocab.idf, vocab.tokenizer, vocab.tf_scheme, read_hashing(path, manifest.hashing)
            )
        except (HashingError, KeyError, ValueError) as exc:
            raise BundleError(f"{path}: correlated-hashing map: {exc}") from None
    if vocab.size != manifest.vocab_size:
        raise BundleError(f"{path / VOCAB}: {vocab.size} words, the manifest says {manifest.vocab_size}")
    try:
        cls = form_class(manifest.form)
        expected = cls.shapes(manifest.n_dims, manifest.vocab_size, **cls.free_sizes(manifest.arrays))
    except FormError as exc:
        raise BundleError(f"{path / MANIFEST}: {exc}") from None
    arrays: dict[str, np.ndarray] = {}
    for name, shape in expected.items():
        array = load_array(path / array_file(name), mmap)
        if array.shape != shape or array.dtype != np.float32 or list(shape) != manifest.arrays.get(name):
            raise BundleError(f"{path / array_file(name)}: expected float32 {shape}, found {array.dtype} {array.shape}")
        arrays[name] = array
    keys = read_documents(path / DOCUMENTS, manifest.documents) if manifest.documents is not None else None
    form = bind_form(path, cls, arrays, manifest.index_dims - manifest.sentence_dims, keys)
    return Bundle(path=path, manifest=manifest, vocab=vocab, form=form, sentence=_read_sentence(path, manifest))


def _read_sentence(path: Path, manifest: Manifest) -> SentenceSpec | None:
    """A hybrid bundle's sentence spec, the same as its manifest's copy; None for any other bundle."""
    if manifest.sentence is None:
        return None
    try:
        spec = read_spec(path / SENTENCE_DIR)
    except SentenceError as exc:
        raise BundleError(str(exc)) from None
    # Compared as specs, not dicts: a manifest written before a field existed lacks its key, and means its default.
    if spec != SentenceSpec.model_validate(manifest.sentence):
        raise BundleError(f"{path / MANIFEST}: its `sentence` differs from {SENTENCE_DIR}/ (edited?)")
    return spec


def bind_form(
    path: Path, cls: type[Form], arrays: dict[str, np.ndarray], index_dims: int, keys: DocumentKeys | None = None
) -> Form:
    try:
        form = cls(arrays, keys) if keys is not None else cls(arrays)
    except FormError as exc:
        raise BundleError(f"{path}: {exc}") from None
    if form.index_dims != index_dims:
        raise BundleError(f"{path / MANIFEST}: index dimension {index_dims}, the form gives {form.index_dims}")
    return form
