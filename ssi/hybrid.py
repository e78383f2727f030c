"""The hybrid score: a form's f plus a pre-trained sentence encoder's part, defined once here.

    f_hybrid(q, d) = f(q, d) + λ e(q)·e(d)        e: the bundle's sentence encoder (ssi.sentence), λ ≥ 0

The form's f is its own reference score (ssi.forms); `hybrid_scores` adds the third part, and every
other place that ranks a hybrid bundle calls it (`ssi eval`, the trainer's validation, the oracle
tests). The service ranks it exactly with the machinery it has for any form, f = (A q)·v(d) + Σ wᵢ qᵢ dᵢ,
by joining the vectors: the index stores [v(d), λ e(d)] and a query is embedded as [A q, e(q)], so the
inner product is (A q)·v(d) + λ e(q)·e(d) (`join_queries`, `join_documents`). λ ≥ 0 keeps the exactness
bounds of service.rerank as they are (they ask nothing of how the semantic part is made up).
"""

from __future__ import annotations

import numpy as np


def sentence_scores(eq: np.ndarray, ed: np.ndarray, weight: float) -> np.ndarray:
    """float32 [queries, documents]: λ e(q)·e(d)."""
    return (np.float32(weight) * (np.asarray(eq, dtype=np.float32) @ np.asarray(ed, dtype=np.float32).T)).astype(
        np.float32
    )


def hybrid_scores(base: np.ndarray, eq: np.ndarray, ed: np.ndarray, weight: float) -> np.ndarray:
    """f(q, d) + λ e(q)·e(d) for a block of the form's reference scores `base` [queries, documents]."""
    return (np.asarray(base, dtype=np.float32) + sentence_scores(eq, ed, weight)).astype(np.float32)


def join_queries(aq: np.ndarray, eq: np.ndarray) -> np.ndarray:
    """[A q, e(q)]: a query's vector in a hybrid index."""
    return np.ascontiguousarray(np.hstack([np.asarray(aq, np.float32), np.asarray(eq, np.float32)]), dtype=np.float32)


def join_documents(vd: np.ndarray, ed: np.ndarray, weight: float) -> np.ndarray:
    """[v(d), λ e(d)]: a document's vector in a hybrid index."""
    scaled = np.float32(weight) * np.asarray(ed, dtype=np.float32)
    return np.ascontiguousarray(np.hstack([np.asarray(vd, np.float32), scaled]), dtype=np.float32)


def split_parts(joined_query: np.ndarray, joined_doc: np.ndarray, dims: int) -> tuple[float, float]:
    """(the form's semantic part, the sentence part λ e(q)·e(d)) of a joined query and document vector: the
    products of their first values and of their last `dims` values, each on its own (no difference of sums,
    whose rounding would show a form without a semantic part, e.g. BM25's, a part of ±1e-17)."""
    query, doc = np.asarray(joined_query, np.float64), np.asarray(joined_doc, np.float64)
    return float(np.dot(query[:-dims], doc[:-dims])), float(np.dot(query[-dims:], doc[-dims:]))
