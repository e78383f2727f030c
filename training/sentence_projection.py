"""`ssi train --sentence-dims E`: a hybrid bundle's sentence vectors cut to E dimensions (ssi.sentence.Projection).

A flat index scans every document's stored vector for every query, and a hybrid bundle's vector is mostly its
sentence part (384 of 385 floats for all-MiniLM-L6-v2 on BM25), so the part's length is what a search over a large
collection pays for. The cut: the corpus documents' pooled vectors, their mean taken away, projected onto their
leading principal axes (a singular value decomposition of at most SAMPLE documents, a seeded sample: no labels), and
each vector scaled back to unit length; queries and documents alike, by ssi.sentence.project, which every encoder of
the bundle applies after pooling. Taking the mean away is most of what it changes in the ranking: a sentence encoder's
vectors share a common direction (all-MiniLM-L6-v2's cosines between unrelated texts are rarely near 0), which the
cut leaves out, so cosines spread over more of [−1, 1]. On SciFact's validation claims (`python -m
benchmarks.hybrid_weight --pca 32,64,96,128,192,256,384`, docs/results/hybrid.md#fewer-dimensions) the day-one
hybrid at λ = 1 went from 0.7651 (the whole vectors) to 0.7723 with the mean taken away alone, 0.7768 at 128
dimensions, 0.7705 at 64 and 0.7559 at 32.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ssi.bundle import sha256_file
from ssi.sentence import (
    PROJECTION_FILE,
    Projection,
    SentenceError,
    SentenceSpec,
    bulk_encoder,
    read_spec,
    write_spec,
)
from training.sentence_vectors import encode_corpus

# Documents the mean and axes are fitted on, at most (a corpus's first encoding costs what its documents cost:
# about 160 s for 2,048 SciFact abstracts on two cores); the rest are encoded when served.
SAMPLE = 2048
SEED = 0


def fitted_projection(vectors: np.ndarray, dims: int) -> tuple[np.ndarray, float]:
    """The PROJECTION_FILE array ([E₀ + 1, dims]: the leading axes' rows, then minus the mean's projection) of pooled
    vectors [n, E₀], and the share of their variance about the mean the axes keep."""
    vectors = np.asarray(vectors, dtype=np.float64)
    mean = vectors.mean(axis=0)
    _, singular, axes = np.linalg.svd(vectors - mean, full_matrices=False)
    basis = axes[:dims].T  # [E₀, dims]
    kept = float((singular[:dims] ** 2).sum() / max((singular**2).sum(), 1e-30))
    return np.vstack([basis, -(mean @ basis)[None, :]]).astype(np.float32), kept


def add_projection(folder: Path, texts: Sequence[str], dims: int, threads: int = 1) -> SentenceSpec:
    """Cut the encoder in `folder` to `dims` dimensions, fitted on (a sample of) the corpus `texts`: writes
    PROJECTION_FILE and the spec's `projection`. A folder cut to `dims` already is left as it is; SentenceError for
    one cut to another size, a size not below the graph's own E, or fewer documents than dimensions."""
    spec = read_spec(folder)
    if spec.projection is not None:
        if spec.dims == dims:
            return spec
        raise SentenceError(
            f"{folder}: its vectors are cut to {spec.dims} dimensions already; --sentence-dims {dims} would cut them "
            "again (give the model folder, not a bundle that has a cut, or leave --sentence-dims out)"
        )
    if not 2 <= dims < spec.dims:
        raise SentenceError(
            f"--sentence-dims {dims}: the encoder's vectors have {spec.dims}; give 2 to {spec.dims - 1}"
        )
    rng = np.random.default_rng(SEED)
    chosen = (
        np.sort(rng.choice(len(texts), size=SAMPLE, replace=False)) if len(texts) > SAMPLE else np.arange(len(texts))
    )
    if chosen.shape[0] <= dims:
        raise SentenceError(
            f"--sentence-dims {dims}: the corpus has {chosen.shape[0]} documents, too few to fit {dims} axes on"
        )
    raw = encode_corpus(bulk_encoder(folder, threads), [texts[i] for i in chosen])
    array, kept = fitted_projection(raw, dims)
    np.save(folder / PROJECTION_FILE, array, allow_pickle=False)
    projection = Projection(
        source_dims=spec.dims, documents=int(chosen.shape[0]), kept_variance=round(kept, 4),
        sha256=sha256_file(folder / PROJECTION_FILE),
    )  # fmt: skip
    spec = spec.model_copy(update={"dims": dims, "projection": projection})
    write_spec(folder, spec)
    return spec
