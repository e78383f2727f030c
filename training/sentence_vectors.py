"""A corpus's sentence vectors e(d), computed once per (encoder, texts) and kept on disk.

Encoding SciFact's 5,183 abstracts with all-MiniLM-L6-v2 took 279 s on this 2-core machine; `ssi eval`,
`ssi train --encoder` and the benchmarks ask for the same vectors again and again. The cache key is the
encoder's spec (pooling, length, E; λ left out: it does not change e), the sha256 of the files it was made from
(the spec's `source`: weights, tokenizer, configuration; an export's graph bytes may differ run to run; for a static
encoder, training.static_distil, its own graph and tokenizer: its source's files are those of every table distilled
from them), the precision and, for an int8 graph whose activations are scaled per token (training.token_quantization),
that (another graph of the same weights: other vectors), and every text, so a changed text or model is a miss, never
a stale hit. It holds the vectors before a
bundle's projection (`ssi train --sentence-dims`), which is applied on the way out. SSI_SENTENCE_CACHE names the folder
(default ~/.cache/ssi/sentence); an empty value turns the cache off.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ssi.bundle import sha256_file
from ssi.sentence import MODEL_FILE, TOKENIZER_FILE, SentenceEncoder, project

CACHE_ENV = "SSI_SENTENCE_CACHE"


def cache_folder() -> Path | None:
    value = os.environ.get(CACHE_ENV)
    if value == "":
        return None
    return Path(value) if value else Path.home() / ".cache" / "ssi" / "sentence"


def _key(encoder: SentenceEncoder, texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    spec = encoder.spec
    named = sorted(spec.source.items())
    if not named or spec.kind == "static":  # a static graph is its table, its bytes the same every time it is written
        named = [(n, sha256_file(encoder.folder / n)) for n in (MODEL_FILE, TOKENIZER_FILE)]
    for name, sha in named:
        digest.update(f"{name}:{sha}|".encode())
    digest.update(f"{spec.pooling}|{spec.normalize}|{spec.max_length}|{encoder.pooled_dims}|{len(texts)}".encode())
    if encoder.precision != "fp32":  # fp32 keeps the key it had before int8 graphs
        digest.update(f"|{encoder.precision}".encode())
        if encoder.int8 is not None and encoder.int8.activations != "tensor":  # int8 graphs before keep theirs too
            digest.update(f"|activations by {encoder.int8.activations}".encode())
    if encoder.part == "query" and spec.query is not None:  # the query graph: its own weights name it
        named = sorted(spec.query.source.items()) or [("graph", sha256_file(encoder.folder / encoder.graph_file))]
        digest.update(f"|query|{named}".encode())
    for text in texts:
        digest.update(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    return digest.hexdigest()


def encode_corpus(encoder: SentenceEncoder, texts: Sequence[str]) -> np.ndarray:
    """float32 [len(texts), E]: e of each text, from the cache where it holds them (written after a miss). The cache
    holds the pooled vectors before an encoder's projection (ssi.sentence.Projection), which is applied here: every
    cut of one encoder shares them."""
    pooled = _pooled(encoder, texts)
    return pooled if encoder.projection is None else project(encoder.projection, pooled)


def _pooled(encoder: SentenceEncoder, texts: Sequence[str]) -> np.ndarray:
    folder = cache_folder()
    path = folder / f"{_key(encoder, texts)}.npy" if folder is not None else None
    if path is not None and path.is_file():
        cached = np.load(path, allow_pickle=False)
        if cached.shape == (len(texts), encoder.pooled_dims) and cached.dtype == np.float32:
            return cached
    vectors = encoder.encode(texts, cut=False)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npy", delete=False) as handle:
            np.save(handle, vectors)
        os.replace(handle.name, path)
    return vectors
