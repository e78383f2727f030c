"""What the query encoder's ONNX graph takes and gives: the names both halves use, and how tf-idf rows are fed.

The trainer writes the graph (training.encoder) and the service runs it (service.encoder); this is
the contract between them. Since format 2 the graph takes queries sparsely, as word ids and a
[batch, words] weight matrix, and computes weights · (query map)ᵀ[ids]: a Gather of the few
columns a query touches and one small MatMul, instead of a dense [batch, D] × [D, M] product whose
cost grows with the vocabulary (0.45 ms of a 3.7 ms search at D = 30,000, 0.16 ms after).
Bundles from before keep their dense graph (one input [batch, D]); `run_encoder` feeds either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import scipy.sparse as sp

DENSE_INPUT = "tfidf"  # format 1: float32 [batch, D]
WORD_IDS = "word_ids"  # format 2: int64 [words], the distinct word ids of the batch
WEIGHTS = "weights"  # format 2: float32 [batch, words], row b holds query b's tf-idf value of each word
OUTPUT = "embedding"  # float32 [batch, M]

# Rows of a dense (format 1) feed at once: batch × D float32 cells at most.
MAX_FEED_CELLS = 1 << 22

Feed = Mapping[str, np.ndarray]
Run = Callable[[Feed], np.ndarray]


def _row_feed(indices: np.ndarray, data: np.ndarray) -> dict[str, np.ndarray]:
    """The format-2 inputs of one row given by its (sorted, distinct) word ids and values."""
    if indices.shape[0] == 0:
        return {WORD_IDS: np.zeros(1, dtype=np.int64), WEIGHTS: np.zeros((1, 1), dtype=np.float32)}
    return {WORD_IDS: indices.astype(np.int64), WEIGHTS: data.astype(np.float32).reshape(1, -1)}


def run_encoder(run: Run, tfidf: sp.csr_matrix, *, sparse: bool = True, limit: int = MAX_FEED_CELLS) -> np.ndarray:
    """float32 [rows, M]: the graph's output for each tf-idf row; `run(feed)` runs the session on one feed.

    `sparse`: the graph takes format 2 (word ids and weights), else format 1 (dense rows).
    A format-2 graph gets one row per run: its MatMul sums over the batch's distinct words, and how the
    kernel blocks that sum depends on which words the other queries bring, so a batched query's
    embedding could differ from its own in the last bits (and a near-tie flip with it). A row alone
    costs a few tens of µs; the dense format's [rows, D] product is the same for any batch.
    """
    if not (sp.issparse(tfidf) and tfidf.format == "csr" and tfidf.dtype == np.float32):
        tfidf = sp.csr_matrix(tfidf, dtype=np.float32)
    if tfidf.shape[0] == 0:
        raise ValueError("no rows to encode")
    if not tfidf.has_canonical_format:  # each row's word ids sorted and distinct, as a feed needs them
        tfidf = tfidf.copy()
        tfidf.sum_duplicates()
    parts: list[np.ndarray] = []
    if sparse:
        indptr, indices, data = tfidf.indptr, tfidf.indices, tfidf.data
        for row in range(tfidf.shape[0]):
            a, b = indptr[row], indptr[row + 1]
            parts.append(np.asarray(run(_row_feed(indices[a:b], data[a:b])), dtype=np.float32))
    else:
        step = max(1, limit // max(1, tfidf.shape[1]))
        for start in range(0, tfidf.shape[0], step):
            rows = tfidf[start : start + step] if tfidf.shape[0] > step else tfidf
            parts.append(np.asarray(run({DENSE_INPUT: np.asarray(rows.toarray(), dtype=np.float32)}), dtype=np.float32))
    return np.ascontiguousarray(np.concatenate(parts) if len(parts) > 1 else parts[0], dtype=np.float32)
