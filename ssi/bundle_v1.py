"""Reading version-1 bundles, so models exported before the forms registry keep serving.

Version 1 stored every kind in one scoring form, f(q, d) = (U q)·(V d) + Σ_i w_i q_i d_i, as U.npy,
V.npy and lexical.npy. Each kind maps onto its form's arrays; a file that does not fit its kind
(a low-rank bundle whose diagonal is not all ones, say) is refused with the command that re-exports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from ssi.bundle import (
    ENCODER_FILE,
    MANIFEST,
    VOCAB,
    Bundle,
    BundleError,
    Manifest,
    bind_form,
    check_text_pipeline,
    load_array,
    read_vocab,
    verify_files,
)
from ssi.forms import form_class

V1_FILES = (VOCAB, "U.npy", "V.npy", "lexical.npy", ENCODER_FILE)
REEXPORT = "re-export it with `ssi train` (this build writes bundle format 2)"


def _shapes(kind: str, n_dims: int, vocab_size: int) -> tuple[int, dict[str, list[int]]]:
    """(N, array shapes) of the form a version-1 bundle of `kind` becomes."""
    if kind in ("lowrank", "noidentity"):
        return n_dims, {"U": [n_dims, vocab_size], "V": [n_dims, vocab_size]}
    if kind == "symmetric":
        return n_dims, {"U": [n_dims, vocab_size]}
    if kind == "diagonal":
        return 0, {"w": [vocab_size]}
    if kind == "fullw":
        return 0, {"W": [vocab_size, vocab_size]}
    raise BundleError(f"version-1 bundle of unknown kind '{kind}': {REEXPORT}")


def upgrade_manifest(path: Path, raw: dict[str, Any]) -> Manifest:
    """A version-1 manifest as this build's Manifest (format_version stays 1)."""
    try:
        kind = str(raw["kind"])
        index_dims = int(raw["n_dims"])
        vocab_size = int(raw["vocab_size"])
        n_dims, arrays = _shapes(kind, index_dims, vocab_size)
        fields = {k: raw[k] for k in ("tokenizer", "tf_scheme", "files", "content_hash", "created_at")}
        extra = {k: raw.get(k) or {} for k in ("training", "data", "metrics")}
        return Manifest(
            format_version=1, form=kind, n_dims=n_dims, index_dims=index_dims, vocab_size=vocab_size,
            arrays=arrays, **fields, **extra,
        )  # fmt: skip
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        if isinstance(exc, BundleError):
            raise
        raise BundleError(f"{path / MANIFEST}: invalid version-1 manifest ({exc}); {REEXPORT}") from None


def load_v1(path: Path, manifest: Manifest, *, mmap: bool, verify_hashes: bool) -> Bundle:
    if sorted(manifest.files) != sorted(V1_FILES):
        raise BundleError(f"{path / MANIFEST}: file list does not match format 1; {REEXPORT}")
    verify_files(path, manifest.files, manifest.content_hash, verify_hashes)
    check_text_pipeline(path, manifest.tokenizer, manifest.tf_scheme)
    vocab = read_vocab(path / VOCAB, manifest.tokenizer, manifest.tf_scheme)
    D = manifest.vocab_size
    if vocab.size != D:
        raise BundleError(f"{path / VOCAB}: {vocab.size} words, the manifest says {D}")
    U, V, w = (load_array(path / name, mmap) for name in ("U.npy", "V.npy", "lexical.npy"))
    for name, array, shape in (("U.npy", U, (manifest.index_dims, D)), ("V.npy", V, (manifest.index_dims, D))):
        if array.shape != shape or array.dtype != np.float32:
            raise BundleError(f"{path / name}: expected float32 {shape}, found {array.dtype} {array.shape}")
    if w.shape != (D,) or w.dtype != np.float32:
        raise BundleError(f"{path / 'lexical.npy'}: expected float32 ({D},), found {w.dtype} {w.shape}")
    kind = manifest.form
    expected_w = {"lowrank": 1.0, "symmetric": 1.0, "fullw": 1.0, "noidentity": 0.0}.get(kind)
    if expected_w is not None and not np.all(w == expected_w):
        raise BundleError(f"{path / 'lexical.npy'}: a '{kind}' bundle needs a diagonal of {expected_w:g}; {REEXPORT}")
    if kind in ("lowrank", "noidentity"):
        arrays = {"U": U, "V": V}
    elif kind == "symmetric":
        if not np.array_equal(U, V):
            raise BundleError(f"{path / 'V.npy'}: a symmetric bundle needs V = U; {REEXPORT}")
        arrays = {"U": U}
    elif kind == "diagonal":
        arrays = {"w": w}
    else:  # fullw: U = Wᵀ, V = I
        if not np.array_equal(V, np.eye(D, dtype=np.float32)):
            raise BundleError(f"{path / 'V.npy'}: a fullw bundle needs V = I; {REEXPORT}")
        arrays = {"W": np.ascontiguousarray(np.asarray(U).T)}
    form = bind_form(path, form_class(kind), arrays, manifest.index_dims)
    return Bundle(path=path, manifest=manifest, vocab=vocab, form=form)
