"""Retrieval tasks: which queries are asked, which documents answer them, which are left out.

One typed `RetrievalTask` serves every protocol of DESIGN.md ("Evaluation protocol"):

- document–document (`doc_doc_task`): a query is a corpus document (title + body), its relevant
  documents are those it links to in the split being evaluated. Filtered setting: the query itself
  and the documents it already links to in the training pairs are left out of its ranking, so a
  model is not punished for ranking a known link (a true answer that is not the one asked for) first;
- keyword queries (`keyword_task`): the same judgments, the query cut to n random words of the
  query document, drawn with a fixed seed;
- natural-language queries (`beir_task`): BEIR queries and qrels, nothing excluded; a query with a `filter`
  (ssi.fields, the service's filter language) ranks only the documents matching it (`allowed`), as a filtered
  search of the service does; a judged document outside its query's filter cannot be ranked and is dropped
  from its judgments (counted in `TaskStats.outside_filter`).

Pairs that name an unknown id are counted in `TaskStats` and reported, never silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from ssi.fields.corpus import CorpusFields
from ssi.fields.errors import FieldError
from ssi.keywords import keyword_query
from ssi.records import Document, Pair, Query
from training.evaluate.features import TokenTable

KEYWORD_SIZES = (5, 10, 20)


class TaskError(ValueError):
    """The inputs cannot make a task (no judged query, repeated ids); the message says why."""


@dataclass(frozen=True)
class TaskStats:
    """What the task builder read and what it could not use, with a few example ids."""

    eval_pairs: int = 0
    train_pairs: int = 0
    unknown_query_pairs: int = 0
    unknown_doc_pairs: int = 0
    unknown_train_pairs: int = 0
    self_pairs: int = 0
    duplicate_pairs: int = 0
    eval_also_in_train: int = 0
    queries_without_relevant: int = 0
    outside_filter: int = 0
    unknown_examples: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        """One human line per non-zero count (what a user must see before trusting a figure)."""
        lines = []
        for count, what in (
            (self.unknown_query_pairs, "evaluation pairs name an unknown query id"),
            (self.unknown_doc_pairs, "evaluation pairs name an unknown document id"),
            (self.unknown_train_pairs, "training pairs name an unknown id"),
            (self.self_pairs, "evaluation pairs link a document to itself (dropped)"),
            (self.duplicate_pairs, "evaluation pairs are duplicates"),
            (self.eval_also_in_train, "evaluation pairs are also training pairs (kept relevant, not filtered)"),
            (self.outside_filter, "evaluation pairs name a document outside their query's filter (dropped)"),
        ):
            if count:
                lines.append(f"{count} {what}")
        if self.unknown_examples:
            lines.append("unknown ids, e.g. " + ", ".join(repr(x) for x in self.unknown_examples))
        return lines


@dataclass(frozen=True, eq=False)
class RetrievalTask:
    """Queries to rank all `doc_ids` for, with binary judgments and per-query exclusions.

    `qrels[q]` is the set of relevant doc ids of query q (never empty), `excluded[q]` the doc ids
    left out of q's ranking (never overlapping `qrels[q]`). `query_doc_ids[i]`, when set, is the
    document the i-th query was made from (document–document tasks), so a trainer can reuse that
    document's tf-idf row instead of featurizing the text again. `allowed[q]`, for a query with a filter: the
    sorted rows of the documents it matches, the only ones q ranks (every other is excluded).
    """

    name: str
    doc_ids: tuple[str, ...]
    query_ids: tuple[str, ...]
    query_texts: tuple[str, ...]
    qrels: dict[str, frozenset[str]]
    excluded: dict[str, frozenset[str]] = field(default_factory=dict)
    primary_metric: str = "map"
    query_doc_ids: tuple[str, ...] | None = None
    stats: TaskStats = field(default_factory=TaskStats)
    allowed: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.query_ids) != len(self.query_texts):
            raise TaskError("query_ids and query_texts differ in length")
        if len(set(self.query_ids)) != len(self.query_ids):
            raise TaskError("query ids must be unique")
        if len(set(self.doc_ids)) != len(self.doc_ids):
            raise TaskError("document ids must be unique")
        missing = [q for q in self.query_ids if not self.qrels.get(q)]
        if missing:
            raise TaskError(f"{len(missing)} queries have no relevant document, e.g. {missing[0]!r}")

    @property
    def n_queries(self) -> int:
        return len(self.query_ids)

    @property
    def n_docs(self) -> int:
        return len(self.doc_ids)

    @cached_property
    def doc_index(self) -> dict[str, int]:
        return {d: i for i, d in enumerate(self.doc_ids)}

    @cached_property
    def relevant_matrix(self) -> sp.csr_matrix:
        """Boolean [n_queries, n_docs] CSR of the judgments (sorted column indices per row)."""
        return self._id_sets_to_csr(self.qrels)

    @cached_property
    def excluded_matrix(self) -> sp.csr_matrix:
        """Boolean [n_queries, n_docs] CSR of the documents left out of each ranking: those `excluded` names, and
        for a filtered query every document its filter does not match."""
        return self._id_sets_to_csr(self.excluded, self.allowed)

    @cached_property
    def query_doc_rows(self) -> np.ndarray | None:
        """Row of each query's source document in `doc_ids`, or None for free-text queries."""
        if self.query_doc_ids is None:
            return None
        return np.asarray([self.doc_index[d] for d in self.query_doc_ids], dtype=np.int64)

    def _id_sets_to_csr(
        self, sets: dict[str, frozenset[str]], inside: dict[str, np.ndarray] | None = None
    ) -> sp.csr_matrix:
        """The rows of `sets` as a CSR; with `inside` (by query: rows), also every row outside a query's own."""
        index = self.doc_index
        indptr = np.zeros(self.n_queries + 1, dtype=np.int64)
        cols: list[np.ndarray] = []
        for row, qid in enumerate(self.query_ids):
            ids = np.sort(np.fromiter((index[d] for d in sets.get(qid, ())), dtype=np.int64))
            if inside is not None and qid in inside:
                outside = np.ones(self.n_docs, dtype=bool)
                outside[inside[qid]] = False
                outside[ids] = True
                ids = np.flatnonzero(outside)
            cols.append(ids)
            indptr[row + 1] = indptr[row] + ids.shape[0]
        indices = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
        data = np.ones(indices.shape[0], dtype=bool)
        return sp.csr_matrix((data, indices, indptr), shape=(self.n_queries, self.n_docs))

    def subset(self, max_queries: int, seed: int = 0) -> RetrievalTask:
        """At most `max_queries` queries drawn without replacement (order kept), e.g. for tuning."""
        if max_queries <= 0 or max_queries >= self.n_queries:
            return self
        rng = np.random.default_rng(seed)
        keep = np.sort(rng.choice(self.n_queries, size=max_queries, replace=False))
        return self.select(keep.tolist())

    def select(self, rows: Sequence[int]) -> RetrievalTask:
        """The task restricted to the queries at `rows` (in that order)."""
        qids = tuple(self.query_ids[r] for r in rows)
        return replace(
            self,
            query_ids=qids,
            query_texts=tuple(self.query_texts[r] for r in rows),
            qrels={q: self.qrels[q] for q in qids},
            excluded={q: self.excluded[q] for q in qids if q in self.excluded},
            allowed={q: self.allowed[q] for q in qids if q in self.allowed},
            query_doc_ids=None if self.query_doc_ids is None else tuple(self.query_doc_ids[r] for r in rows),
        )

    def describe(self) -> dict[str, object]:
        """A JSON-ready summary for reports."""
        n_rel = [len(self.qrels[q]) for q in self.query_ids]
        n_exc = [len(self.excluded.get(q, ())) for q in self.query_ids]
        return {
            "name": self.name,
            "queries": self.n_queries,
            "documents": self.n_docs,
            "relevant_per_query": float(np.mean(n_rel)) if n_rel else 0.0,
            "excluded_per_query": float(np.mean(n_exc)) if n_exc else 0.0,
            **({"filtered_queries": len(self.allowed)} if self.allowed else {}),
            "primary_metric": self.primary_metric,
            "stats": {k: v for k, v in self.stats.__dict__.items() if k != "unknown_examples"},
            "problems": self.stats.problems(),
        }


def _examples(found: list[str], new: str, limit: int = 5) -> None:
    if len(found) < limit and new not in found:
        found.append(new)


def _no_queries_message(n_pairs: int, n_unknown: int, unknown: list[str]) -> str:
    message = f"no query has a relevant document ({n_pairs} judgment pairs read, {n_unknown} name unknown ids"
    if unknown:
        message += ", e.g. " + ", ".join(repr(x) for x in unknown[:3])
    return message + ")"


def doc_doc_task(
    docs: Sequence[Document],
    eval_pairs: Iterable[Pair],
    train_pairs: Iterable[Pair] = (),
    *,
    name: str = "doc-doc",
    filtered: bool = True,
) -> RetrievalTask:
    """Document–document link ranking in the filtered setting.

    relevant(q) = {d : (q, d) in eval_pairs, d ≠ q};
    excluded(q) = ({q} ∪ {d : (q, d) in train_pairs}) − relevant(q)   (only {q} if not `filtered`).
    Documents with no relevant document are not queries. Queries come in corpus order.
    """
    doc_ids = tuple(d.id for d in docs)
    known = set(doc_ids)
    unknown: list[str] = []
    relevant: dict[str, set[str]] = {}
    n_eval = n_unknown_q = n_unknown_d = n_self = n_dup = 0
    for pair in eval_pairs:
        n_eval += 1
        if pair.query_id not in known:
            n_unknown_q += 1
            _examples(unknown, pair.query_id)
            continue
        if pair.doc_id not in known:
            n_unknown_d += 1
            _examples(unknown, pair.doc_id)
            continue
        if pair.query_id == pair.doc_id:
            n_self += 1
            continue
        targets = relevant.setdefault(pair.query_id, set())
        if pair.doc_id in targets:
            n_dup += 1
        targets.add(pair.doc_id)
    trained: dict[str, set[str]] = {}
    n_train = n_unknown_train = 0
    for pair in train_pairs:
        n_train += 1
        if pair.query_id not in known or pair.doc_id not in known:
            n_unknown_train += 1
            _examples(unknown, pair.query_id if pair.query_id not in known else pair.doc_id)
            continue
        trained.setdefault(pair.query_id, set()).add(pair.doc_id)
    query_docs = [d for d in docs if relevant.get(d.id)]
    if not query_docs:
        raise TaskError(_no_queries_message(n_eval, n_unknown_q + n_unknown_d, unknown))
    qrels = {d.id: frozenset(relevant[d.id]) for d in query_docs}
    overlap = sum(len(qrels[q] & trained.get(q, set())) for q in qrels)
    excluded = {q: frozenset(({q} | (trained.get(q, set()) if filtered else set())) - qrels[q]) for q in qrels}
    stats = TaskStats(
        eval_pairs=n_eval,
        train_pairs=n_train,
        unknown_query_pairs=n_unknown_q,
        unknown_doc_pairs=n_unknown_d,
        unknown_train_pairs=n_unknown_train,
        self_pairs=n_self,
        duplicate_pairs=n_dup,
        eval_also_in_train=overlap,
        queries_without_relevant=len(docs) - len(query_docs),
        unknown_examples=tuple(unknown),
    )
    return RetrievalTask(
        name=name,
        doc_ids=doc_ids,
        query_ids=tuple(d.id for d in query_docs),
        query_texts=tuple(d.full_text for d in query_docs),
        qrels=qrels,
        excluded=excluded,
        primary_metric="map",
        query_doc_ids=tuple(d.id for d in query_docs),
        stats=stats,
    )


def keyword_task(
    docs: Sequence[Document],
    eval_pairs: Iterable[Pair],
    train_pairs: Iterable[Pair] = (),
    *,
    n_words: int = 10,
    seed: int = 0,
    filtered: bool = True,
    tokens: TokenTable | None = None,
) -> RetrievalTask:
    """`doc_doc_task` whose queries are `n_words` random words of the query document.

    Pass the run's `TokenTable` to reuse its tokenization of the documents.
    """
    if n_words <= 0:
        raise TaskError(f"n_words must be positive, got {n_words}")
    base = doc_doc_task(docs, eval_pairs, train_pairs, name=f"keywords-{n_words}", filtered=filtered)
    if tokens is None:
        token_lists: list[list[str] | None] = [None] * base.n_queries
    else:
        token_lists = [[tokens.words[i] for i in ids.tolist()] for ids in tokens.ids(base.query_texts)]
    texts = tuple(
        keyword_query(t, n_words, seed, q, tokens=w)
        for q, t, w in zip(base.query_ids, base.query_texts, token_lists, strict=True)
    )
    # The short query is not the document's tf-idf row: drop query_doc_ids so nobody reuses it.
    return replace(base, query_texts=texts, query_doc_ids=None)


def beir_task(
    docs: Sequence[Document],
    queries: Sequence[Query],
    qrels: Iterable[Pair],
    *,
    name: str = "beir",
    known: Iterable[Pair] = (),
) -> RetrievalTask:
    """Natural-language queries judged by qrels; queries without a usable judgment are skipped.

    `known` (the filtered setting, e.g. the training clicks of a page): those documents are left out
    of their query's ranking unless judged relevant, as `doc_doc_task` does with training links.
    """
    doc_ids = tuple(d.id for d in docs)
    known_docs = set(doc_ids)
    query_text: dict[str, str] = {}
    for query in queries:
        if query.id in query_text:
            raise TaskError(f"query id {query.id!r} appears twice in the queries")
        query_text[query.id] = query.text
    unknown: list[str] = []
    relevant: dict[str, set[str]] = {}
    n_pairs = n_unknown_q = n_unknown_d = n_dup = 0
    for pair in qrels:
        n_pairs += 1
        if pair.query_id not in query_text:
            n_unknown_q += 1
            _examples(unknown, pair.query_id)
            continue
        if pair.doc_id not in known_docs:
            n_unknown_d += 1
            _examples(unknown, pair.doc_id)
            continue
        targets = relevant.setdefault(pair.query_id, set())
        if pair.doc_id in targets:
            n_dup += 1
        targets.add(pair.doc_id)
    allowed = filtered_rows(docs, queries)
    n_outside = 0
    for qid, rows in allowed.items():  # a judged document its query's filter leaves out cannot be ranked
        inside = {doc_ids[row] for row in rows.tolist()}
        targets = relevant.get(qid, set())
        n_outside += len(targets - inside)
        targets &= inside
    kept = [q for q in queries if relevant.get(q.id)]
    if not kept:
        raise TaskError(_no_queries_message(n_pairs, n_unknown_q + n_unknown_d, unknown))
    excluded: dict[str, set[str]] = {}
    n_known = 0
    for pair in known:
        n_known += 1
        if pair.doc_id in known_docs and pair.doc_id not in relevant.get(pair.query_id, ()):
            excluded.setdefault(pair.query_id, set()).add(pair.doc_id)
    stats = TaskStats(
        eval_pairs=n_pairs,
        unknown_query_pairs=n_unknown_q,
        unknown_doc_pairs=n_unknown_d,
        duplicate_pairs=n_dup,
        queries_without_relevant=len(queries) - len(kept),
        unknown_examples=tuple(unknown),
        train_pairs=n_known,
        outside_filter=n_outside,
    )
    return RetrievalTask(
        name=name,
        doc_ids=doc_ids,
        query_ids=tuple(q.id for q in kept),
        query_texts=tuple(q.text for q in kept),
        qrels={q.id: frozenset(relevant[q.id]) for q in kept},
        excluded={q.id: frozenset(excluded[q.id]) for q in kept if q.id in excluded},
        primary_metric="ndcg@10",
        stats=stats,
        allowed={q.id: allowed[q.id] for q in kept if q.id in allowed},
    )


def filtered_rows(docs: Sequence[Document], queries: Sequence[Query]) -> dict[str, np.ndarray]:
    """For each query with a `filter`, the sorted rows of the documents it matches (ssi.fields over the documents'
    `fields`, the service's filter language); a filter naming a field the corpus lacks, or a value of another type
    than the field's, is a `TaskError` naming the query. A filter given by several queries is evaluated once."""
    asked = [q for q in queries if q.filter is not None]
    if not asked:
        return {}
    try:
        fields = CorpusFields(docs)
    except FieldError as exc:
        raise TaskError(f"the corpus's fields: {exc}") from None
    found: dict[str, np.ndarray] = {}
    rows: dict[str, np.ndarray] = {}
    for query in asked:
        key = json.dumps(query.filter, sort_keys=True)
        if key not in found:
            try:
                found[key] = fields.rows(query.filter)
            except FieldError as exc:
                raise TaskError(f"query {query.id!r}: {exc}") from None
        rows[query.id] = found[key]
    return rows
