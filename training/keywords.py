"""Keyword queries for training: a query document cut to n of its distinct words, drawn afresh at
every step, so a model trained on documents learns to answer the short queries users type.

A cut keeps n distinct vocabulary words of the row, uniformly without replacement; each counts
once (tf = 1), so its tf-idf value is its idf, and the row is scaled to unit length — exactly what
`Vocabulary.featurize` gives for the text made of those words.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def cut_to_keywords(rows: sp.csr_matrix, idf: np.ndarray, n_words: int, rng: np.random.Generator) -> sp.csr_matrix:
    lengths = np.diff(rows.indptr)
    keep = np.minimum(lengths, n_words)
    indptr = np.concatenate([[0], np.cumsum(keep)])
    # Random keys per entry; the n smallest keys of a row are its uniform sample without replacement.
    keys = rng.random(rows.nnz) + np.repeat(np.arange(rows.shape[0]), lengths)
    order = np.argsort(keys, kind="stable")
    rank = np.empty(rows.nnz, dtype=np.int64)
    rank[order] = np.arange(rows.nnz)
    rank -= np.repeat(rows.indptr[:-1], lengths)
    picked = rank < np.repeat(keep, lengths)
    rows_of = np.repeat(np.arange(rows.shape[0]), lengths)[picked]
    cols = rows.indices[picked]
    values = idf[cols].astype(np.float32)
    norms = np.sqrt(np.bincount(rows_of, weights=values.astype(np.float64) ** 2, minlength=rows.shape[0]))
    values /= norms[rows_of].astype(np.float32)
    out = sp.csr_matrix((values, cols, indptr), shape=rows.shape)
    out.sort_indices()
    return out
