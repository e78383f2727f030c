"""Top-k rankings and TREC run files, the output of `ssi rank`.

A TREC run line is `qid Q0 docid rank score tag`, ranks from 1. Order: score descending, ties by
corpus position ascending — the rule the metrics use, so a run file and `ssi eval` agree. A query with a filter
(a JSONL query set's `filter`, ssi.fields) ranks only the documents matching it: the exact top k among them, as the
service's filtered search answers, and fewer lines when fewer match.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ssi.fields.corpus import top_k_among
from ssi.records import Query
from training.evaluate.scorer import DEFAULT_BLOCK, Scorer


class RankError(ValueError):
    """The ranking cannot be written (an id a TREC file cannot hold, non-finite scores)."""


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the columns of the k best scores (score desc, column asc) and those scores.

    Rows of an [n, m] matrix give [n, min(k, m)] arrays. Only the tail above the k-th value is
    sorted: everything tied with the k-th value is kept as a candidate so ties resolve by column.
    """
    if k < 1:
        raise ValueError(f"k must be positive, got {k}")
    n_rows, n_cols = scores.shape
    k = min(k, n_cols)
    if k == n_cols:
        order = np.argsort(-scores, axis=1, kind="stable")
        return order, np.take_along_axis(scores, order, axis=1)
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1]
    cols = np.empty((n_rows, k), dtype=np.int64)
    for row in range(n_rows):
        candidates = np.flatnonzero(scores[row] >= kth[row])
        cols[row] = candidates[np.argsort(-scores[row, candidates], kind="stable")[:k]]
    return cols, np.take_along_axis(scores, cols, axis=1)


def check_trec_id(kind: str, value: str) -> None:
    """TREC runs are whitespace-separated: an id with whitespace would corrupt the file."""
    if not value or any(ch.isspace() for ch in value):
        raise RankError(f"{kind} id {value!r} is empty or contains whitespace; a TREC run cannot hold it")


def write_trec_run(
    path: Path,
    scorer: Scorer,
    queries: Sequence[Query],
    doc_ids: Sequence[str],
    k: int,
    *,
    tag: str = "ssi",
    block_size: int = DEFAULT_BLOCK,
    allowed: Mapping[str, np.ndarray] | None = None,
) -> int:
    """Rank every query's top k documents into `path` (written atomically); returns the line count. `allowed`:
    for a filtered query (by id), the sorted rows of the documents its filter matches, the only ones it ranks."""
    allowed = allowed or {}
    for query in queries:
        check_trec_id("query", query.id)
    for doc_id in doc_ids:
        check_trec_id("document", doc_id)
    check_trec_id("run tag", tag)
    if scorer.n_docs != len(doc_ids):
        raise RankError(f"scorer ranks {scorer.n_docs} documents, {len(doc_ids)} ids given")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    lines = 0
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for start in range(0, len(queries), block_size):
                block = queries[start : start + block_size]
                scores = scorer.score([q.text for q in block])
                if not np.isfinite(scores).all():
                    raise RankError("the model produced non-finite scores (NaN or infinity)")
                best = top_k(scores, k)
                cols, values = list(best[0]), list(best[1])  # rows of their own lengths: a filter may match fewer
                for i, query in enumerate(block):  # a filtered query: its top k among the rows it may rank
                    if query.id in allowed:
                        cols[i], values[i] = top_k_among(scores[i], allowed[query.id], k)
                for query, row_cols, row_values in zip(block, cols, values, strict=True):
                    for rank, (col, value) in enumerate(zip(row_cols.tolist(), row_values.tolist(), strict=True), 1):
                        handle.write(f"{query.id} Q0 {doc_ids[col]} {rank} {value:.9g} {tag}\n")
                        lines += 1
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return lines
