"""The live, searchable state of one bundle over one collection's documents, and the search itself.

A `ModelState` holds everything that depends on the model: the embedder (vocabulary, query encoder,
the form's document embedding), the embedding of every row, the rows' tf-idf vectors (the lexical
index) and the FAISS index, all numbered by the same rows (service.rows). It is built by
`service.state_builder` and changed only by `service.writes`, under its read–write lock.

A request's path, top to bottom: `search` featurizes and embeds the query texts, takes the first
candidate pool from the index for a chunk of them at once, and `_rank` orders each query's
candidates (pool + lexical rows) by the exact f (service.rerank), returning document ids with
score parts. With a flat index, a query whose lexical part is summed for every row gets instead its
semantic score for every row from the chunk's matrix product, and the top k of f over all rows
(service.rerank.every_row_top); the scan is spread over idle cores (service.busy).

The read lock is taken per query, never across a batch: a write waits for at most one query of
each search in flight (not for a 64-query batch), and since waiting writers hold off new readers,
single searches do not queue behind a batch either. A chunk's pool is only reused while `version`
(bumped by every write) is unchanged; after a write the next query searches the index again, so
each query still sees one consistent state.

A reload builds a new `ModelState` off to the side and the collection swaps its reference, so
requests that already hold the old state finish on it undisturbed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from pyroaring import BitMap

from service import int8_gemm, quantized, topk
from service.embedding import Embedder
from service.fields.facets import Facet, facet, value_counts
from service.fields.plan import Planner, exact_scan, filtered_ef, selector_bits
from service.index import IndexConfig, VectorIndex
from service.lexical import LexicalIndex, LexicalQuery, RareSum
from service.open_lexical import OpenLexicalQuery, with_open
from service.rerank import Ranked, SemanticSearch, every_row_top, exact_top, prefers_dense
from service.rows import RowTable
from service.rwlock import ReadWriteLock
from service.topk import EveryScore
from ssi.bundle import Bundle
from ssi.fields.filters import Clause, matching_rows
from ssi.fields.index import FieldIndex, bitmap_of
from ssi.hybrid import split_parts
from ssi.open_vocab import OpenCounts, OpenPostings, QueryWords, collection_idf, collection_query_values

# At most this many queries of a chunk get their lexical part summed beside the flat scan (`_search_chunk`).
LEXICAL_BESIDE_SCAN = 4
# A flat index's chunk holds at most this many bytes of every-row scores (float32 [queries, rows]): 64 queries
# at 100k rows, 8 at 1 M.
EVERY_SCORE_BYTES = 32 * 2**20
SEARCH_CHUNK = 64  # queries searched in the index at once (one FAISS call) within a batch (see max_concurrency)


@dataclass
class LoadReport:
    """How a state was obtained: what a restart test checks to know the cache was used."""

    source: str  # "cache" or "computed"
    seconds: float = 0.0
    embedded: int = 0  # documents embedded during the load
    # A hybrid bundle's documents during the load (service.sentence_cache): e(d) encoded, or the sentence cache's
    # (kept by an earlier bundle with the same encoder, or by a write); 0 and 0 for any other bundle.
    encoded: int = 0
    sentence_cached: int = 0
    replayed: int = 0  # documents re-applied from the write log after the snapshot
    snapshot: str | None = None
    compacted: bool = False


@dataclass(frozen=True, slots=True)
class _Chunk:
    """What one index call answered for the queries start … stop − 1 of a batch, valid while the state's
    `version` and the first pool's size are unchanged."""

    version: int
    first_k: int
    start: int
    stop: int
    bits: np.ndarray | None  # the live rows' bitmap FAISS searched with
    lexical: list[LexicalQuery | OpenLexicalQuery]  # each query's lexical term
    # query number → (the scan's every-row s, that query's number in it, l or None: not summed yet) for the
    # queries ranked from them
    every: dict[int, tuple[EveryScore, int, RareSum | None]]
    pools: dict[int, tuple[np.ndarray, np.ndarray]]  # query number → the first pool (scores, rows) of the others

    def holds(self, query: int, version: int, first_k: int) -> bool:
        return version == self.version and first_k == self.first_k and self.start <= query < self.stop


@dataclass(frozen=True, slots=True)
class QueryResult:
    doc_ids: list[str]
    scores: list[float]
    semantic: list[float]
    lexical: list[float]
    query_words: int  # distinct query words in the vocabulary
    candidates: int  # rows scored exactly
    rows: list[int] = field(default_factory=list)  # each hit's row in the state searched (service.rows)
    # The weights of the query's new words it was ranked with (ssi.open_vocab; empty: no open term), for /match's
    # shared words (service.matching.explain) without weighing them again.
    open_weights: Mapping[str, float] = field(default_factory=dict)
    # A hybrid bundle's third part λ e(q)·e(d) of each hit (ssi.hybrid), which `semantic` then excludes; empty
    # for any other bundle.
    sentence: list[float] = field(default_factory=list)

    def page(self, offset: int) -> QueryResult:
        """The hits after the first `offset` (paging)."""
        if offset == 0:
            return self
        return QueryResult(
            doc_ids=self.doc_ids[offset:],
            scores=self.scores[offset:],
            semantic=self.semantic[offset:],
            lexical=self.lexical[offset:],
            query_words=self.query_words,
            candidates=self.candidates,
            rows=self.rows[offset:],
            open_weights=self.open_weights,
            sentence=self.sentence[offset:],
        )


@dataclass(frozen=True, slots=True)
class Where:
    """A search restricted by its documents' fields (service.fields): the filter (None: every document), and how
    each query is searched (`Planner`: an exact scan of the matching rows or the index with them as a selector)."""

    clause: Clause | None
    planner: Planner
    # The live rows matching it when it was evaluated (`matching`), or None: evaluated by the search itself.
    rows: np.ndarray | None = None


# A scanning index's first pool grows with the collection: one row of K per SCAN_POOL_ROWS live rows, at least
# SSI_SCAN_POOL. The k-th pool score s_K bounds what the rows outside the pool can reach, and at 1 M passages
# (IVF 4,000 lists, nprobe 512) K = 128 left a median of 1,998 rows to score exactly and took 7.97 ms a query
# in process (p99 19.9), K = 512 left 498 and took 6.61 ms (p99 15.6; 7.34 ms in a second run), K = 2,048 left
# 143 and took 7.46 ms (benchmarks.search_stages --index-type ivf --pool K). At 100k the floor, 128, stays.
SCAN_POOL_ROWS = 2000


class ModelState:
    def __init__(
        self,
        *,
        bundle: Bundle,
        embedder: Embedder,
        config: IndexConfig,
        index: VectorIndex,
        lexical: LexicalIndex,
        table: RowTable,
        open_postings: OpenPostings | None = None,
        seq: int,
        store_uuid: str,
        folder: Path,
        report: LoadReport,
    ) -> None:
        if not (index.ntotal == lexical.rows == table.rows):
            raise ValueError(f"row counts disagree: index {index.ntotal}, tf-idf {lexical.rows}, ids {table.rows}")
        self.bundle = bundle
        self.embedder = embedder
        self.config = config
        self.index = index
        self.lexical = lexical
        # Rows' words the bundle lacks (ssi.open_vocab): mutated in place by writes, under the write lock.
        self.open = open_postings if open_postings is not None else OpenPostings()
        self.table = table
        # Every row's fields by value (ssi.fields.index): filters and facets read it. Built from the store when
        # the state is opened (service.state_builder.attach_fields), then kept up by the writes.
        self.fields = FieldIndex()
        self.seq = seq
        self.store_uuid = store_uuid
        self.folder = folder  # where this state's snapshots go (service.snapshot.cache_folder)
        self.report = report
        # The write sequence the newest snapshot of this state reflects (None: not saved yet).
        self.saved_seq: int | None = seq if report.source == "cache" else None
        self.lock = ReadWriteLock()
        self.version = 0  # bumped under the write lock whenever rows change (service.writes)
        # With the collection's statistics and dead rows: each word's live document frequency as of `version`
        # (counting a frequent word's live postings is most of what those statistics add to a search).
        self._live_df: tuple[int, dict[int, int]] = (-1, {})
        # Set when a write failed halfway through its in-memory apply: this state no longer matches
        # the store and must be neither searched nor snapshotted (the collection rebuilds it).
        self.broken = False
        if index.scans_every_row:
            topk.warm()
            quantized.warm()
            int8_gemm.warm()

    def first_pool(self, candidate_pool: int, scan_pool: int) -> int:
        """K of the first index search: SSI_CANDIDATE_POOL for HNSW (its cost grows with K), else SSI_SCAN_POOL
        or more for a large collection (SCAN_POOL_ROWS)."""
        if self.config.index_type == "hnsw":
            return candidate_pool
        return max(scan_pool, self.table.n_live // SCAN_POOL_ROWS)

    def search(
        self,
        queries: Sequence[str],
        want: int,
        *,
        pool: int,
        ef_search: int | None = None,
        nprobe: int | None = None,
        exclude: Sequence[str | None] | None = None,
        max_words: int | None = None,
        open_counts: Sequence[OpenCounts | None] | None = None,
        where: Where | None = None,
    ) -> list[QueryResult]:
        """The exact top `want` documents for each query text (see service.rerank for why it is exact).

        `exclude[i]`, when given, is a document id left out of query i's results (the query document
        of "more like this"); `max_words` keeps only a long text's most heavily weighted words;
        `open_counts[i]`, when given, weighs query i's new words (and with the collection's statistics its bundle
        words) instead of this collection's own counts (a shard of a sharded collection: the cluster's,
        cluster.fanout).
        """
        tfidf, words = self.featurize(queries, max_words, counted=open_counts is not None)
        return self.search_rows(
            tfidf,
            want,
            pool=pool,
            ef_search=ef_search,
            nprobe=nprobe,
            exclude=exclude,
            open_words=words,
            open_counts=open_counts,
            texts=queries,
            where=where,
        )

    def featurize(
        self, queries: Sequence[str], max_words: int | None = None, counted: bool = False
    ) -> tuple[sp.csr_matrix, list[QueryWords] | None]:
        """The queries' rows (Embedder.featurize_queries) and their words for the open vocabulary's term
        (ssi.open_vocab.QueryWords, found in the same pass as the rows), or None for the words: a closed vocabulary,
        or a collection holding no new word (then nothing more is done) unless the queries are `counted` by other
        counts than its own (a shard: another shard may hold their new words).

        With `max_words` (a long text cut to its heaviest bundle words), each text's words are those of the text
        with every other bundle word removed, so the open term's Z(q) is the norm that cut row was divided by.
        `/search`, `/similar` and `/match` all featurize here."""
        if self.embedder.open_rule is None or (not self.open.n_words and not counted):
            return self.embedder.featurize_queries(queries, max_words), None
        return self.embedder.featurize_with_words(queries, max_words)

    def shard_counts(self, texts: Sequence[str]) -> tuple[list[OpenCounts | None], int]:
        """What this collection, one shard of a sharded one, needs from the other shards to rank each text as one
        node holding every document would (cluster.fanout), and its live documents.

        None: nothing (a closed vocabulary; or no new word held here and, with the collection's statistics, no bundle
        word held here either: the scores here are the same whatever the counts). Else its own counts (`OpenCounts`:
        the live document frequency here of each of its new words held here, and with the collection's statistics
        of each of its bundle words held here): where any is held its ranking waits for the summed counts; where none
        is (new words, no bundle word) only whether another shard holds one decides whether it ranks anything here."""
        words = self.embedder.query_words(texts)
        needs: list[OpenCounts | None] = []
        with self.lock.read():
            n_live = self.table.n_live
            if words is None:
                return [None] * len(texts), n_live
            df = self.open.df()
            for text_words in words:
                held = {word: df[word] for word in text_words.new if df.get(word, 0) > 0}
                known: dict[int, int] = {}
                if self.embedder.collection_statistics and text_words.known.size:
                    counted = self._document_frequency(text_words.known)
                    known = {w: n for w, n in zip(text_words.known.tolist(), counted.tolist(), strict=True) if n > 0}
                if held or known or (text_words.new and not text_words.known.size):
                    needs.append(OpenCounts(held, n_live, known))
                else:
                    needs.append(None)
        return needs, n_live

    def lexical_values(self, rows: sp.csr_matrix, start: int, end: int, counts: OpenCounts | None = None) -> np.ndarray:
        """The lexical values of the query whose bundle row is rows' entries start … end − 1: those values, or with
        the collection's statistics each times idf_c / idf_b, idf_c from the words' live document frequencies
        (ssi.open_vocab.collection_query_values): `counts`' where given (a shard's: the cluster's), else this
        collection's own. The caller holds the read lock."""
        values = rows.data[start:end]
        if not self.embedder.collection_statistics or end == start:
            return values
        words = rows.indices[start:end]
        if counts is None:
            df, n_docs = self._document_frequency(words), self.table.n_live
        else:
            df = np.fromiter((counts.known.get(w, 0) for w in words.tolist()), dtype=np.int64, count=words.shape[0])
            n_docs = counts.n_docs
        vocab = self.bundle.vocab
        return collection_query_values(vocab, words, values, collection_idf(vocab, words, df, n_docs))

    def _document_frequency(self, words: np.ndarray) -> np.ndarray:
        """Live rows holding each of `words` (the caller holds the read lock): the posting lists' lengths while every
        row is live, else counted once per word and state version (writes bump it) and remembered."""
        if not self.table.n_dead:
            return self.lexical.document_frequency(words)
        version, known = self._live_df
        if version != self.version:
            version, known = self._live_df = (self.version, {})
        missing = [w for w in dict.fromkeys(words.tolist()) if w not in known]
        if missing:
            counted = self.lexical.document_frequency(np.asarray(missing, dtype=np.int64), self.table.live)
            known.update(zip(missing, counted.tolist(), strict=True))
        return np.fromiter((known[w] for w in words.tolist()), dtype=np.int64, count=words.shape[0])

    def open_shares(self, weights: Mapping[str, float], rows: Sequence[int]) -> list[dict[str, float]]:
        """For each of `rows`, its new words shared with a query whose new words were weighed `weights`
        (QueryResult.open_weights) and their q_t·d_t (o(q, d) = w_new · Σ_t q_t·d_t, the bundle words' q_i·d_i in
        the same scale): why an advert matched (service.matching). The caller holds the read lock."""
        rule = self.embedder.open_rule
        if rule is None or not weights or not rows:
            return [{} for _ in rows]
        held = [(w, weights[w] / rule.weight, lists) for w in weights if (lists := self.open.postings.get(w))]
        return [{w: q * lists[row] for w, q, lists in held if row in lists} for row in rows]

    def _counts(self, open_counts: Sequence[OpenCounts | None] | None, query: int) -> tuple[Mapping[str, int], int]:
        """What weighs query `query`'s new words, (document frequencies, live documents): the counts given for it
        (`search`), else this collection's own live counts (the caller holds the read lock; no `OpenCounts` made
        for them: asked for every query with a new word)."""
        given = open_counts[query] if open_counts is not None else None
        return (given.df, given.n_docs) if given is not None else (self.open.df(), self.table.n_live)

    def search_rows(
        self,
        tfidf: sp.csr_matrix,
        want: int,
        *,
        pool: int,
        ef_search: int | None = None,
        nprobe: int | None = None,
        exclude: Sequence[str | None] | None = None,
        open_words: Sequence[QueryWords] | None = None,
        open_counts: Sequence[OpenCounts | None] | None = None,
        texts: Sequence[str] | None = None,
        where: Where | None = None,
    ) -> list[QueryResult]:
        """`search` for queries already featurized (Embedder.featurize_queries): one ONNX call and one index
        call per chunk of them, as for texts. `open_words`: their words for the open vocabulary's term (`featurize`);
        `open_counts`: what weighs their new words where not this collection's own counts (`search`); `texts`: the
        queries' texts, which a hybrid bundle's sentence encoder reads (one call for them all); `where`: only the
        documents matching a filter (`_search_where`)."""
        n_queries = tfidf.shape[0]
        query_embeddings = self.embedder.embed_queries(tfidf, texts)
        excluded = list(exclude) if exclude is not None else [None] * n_queries
        asks = [want + (1 if doc_id is not None else 0) for doc_id in excluded]
        knobs = {"ef_search": ef_search, "nprobe": nprobe}
        if where is not None:
            return self._search_where(
                tfidf, query_embeddings, want, asks, excluded, pool, knobs, where, open_words, open_counts
            )
        results: list[QueryResult] = []
        chunk: _Chunk | None = None
        weighed: dict[int, tuple[int, dict[str, float]]] = {}  # `_open_weights`' memo for this call
        for i in range(n_queries):
            words = tfidf.indices[tfidf.indptr[i] : tfidf.indptr[i + 1]]
            with self.lock.read():
                n_live = self.table.n_live
                weights = self._open_weights(weighed, i, open_words, open_counts)
                opens = bool(weights)
                if (words.shape[0] == 0 and not opens) or n_live == 0:
                    results.append(QueryResult([], [], [], [], query_words=words.shape[0], candidates=0))
                    continue
                first_k = min(max(pool, max(asks, default=1)), max(1, n_live))
                if chunk is None or not chunk.holds(i, self.version, first_k):
                    chunk = self._search_chunk(
                        tfidf, query_embeddings, i, first_k, knobs, open_words, open_counts, weighed
                    )
                lexical = chunk.lexical[i - chunk.start]
                every = chunk.every.get(i)
                if every is not None:  # s and l of every row: no pool (service.rerank.every_row_top)
                    uq = np.asarray(query_embeddings[i], dtype=np.float64)
                    scanned, at, summed = every
                    if summed is None:
                        summed = lexical.everywhere_but_common()
                    ranked = every_row_top(uq, asks[i], scanned, at, summed, self.index.vectors, self.table.live)
                else:
                    first = (first_k, *chunk.pools[i])
                    semantic = self._semantic(query_embeddings[i : i + 1], first, chunk.bits, knobs)
                    ranked = self._rank(query_embeddings[i], asks[i], semantic, lexical, pool)
                results.append(self._result(ranked, want, excluded[i], words.shape[0], weights, query_embeddings[i]))
        return results

    def _search_where(
        self,
        tfidf: sp.csr_matrix,
        query_embeddings: np.ndarray,
        want: int,
        asks: list[int],
        excluded: list[str | None],
        pool: int,
        knobs: dict[str, int | None],
        where: Where,
        open_words: Sequence[QueryWords] | None,
        open_counts: Sequence[OpenCounts | None] | None,
    ) -> list[QueryResult]:
        """`search_rows` among the rows matching `where.clause` only: the exact top `want` of f over them, by an
        exact scan, a flat index's every-row pass or the index with them as a selector (service.fields.plan). The
        filter is evaluated once for the batch; each query takes the rows of it still live under its own read lock
        (a write may come between)."""
        matched = where.rows if where.rows is not None else self.matching(where.clause)
        weighed: dict[int, tuple[int, dict[str, float]]] = {}
        results: list[QueryResult] = []
        chunk: _Chunk | None = None
        for i in range(tfidf.shape[0]):
            words = tfidf.indices[tfidf.indptr[i] : tfidf.indptr[i + 1]]
            with self.lock.read():
                live = self.table.live
                rows = matched[live[matched]]
                weights = self._open_weights(weighed, i, open_words, open_counts)
                if (words.shape[0] == 0 and not weights) or rows.shape[0] == 0:
                    results.append(QueryResult([], [], [], [], query_words=words.shape[0], candidates=0))
                    continue
                uq = np.asarray(query_embeddings[i], dtype=np.float64)
                count = int(rows.shape[0])
                if not where.planner.exact(count, self.table.n_live) and self.index.scans_every_row:
                    # A flat index and a broad filter: the every-row pass of an unfiltered search (`search_rows`:
                    # one scan for the chunk's queries), with the matching rows as the live ones.
                    first_k = min(max(pool, max(asks, default=1)), max(1, self.table.n_live))
                    if chunk is None or not chunk.holds(i, self.version, first_k):
                        chunk = self._search_chunk(
                            tfidf, query_embeddings, i, first_k, knobs, open_words, open_counts, weighed
                        )
                    lexical = chunk.lexical[i - chunk.start]
                    every = chunk.every.get(i)
                    if every is not None:
                        ranked = self._every_row_among(uq, asks[i], rows, lexical, every)
                    else:
                        ranked = self._selected(query_embeddings[i], asks[i], rows, lexical, pool, knobs)
                else:
                    (lexical,) = self._lexical_terms(tfidf, i, i + 1, open_words, open_counts, weighed)
                    if where.planner.exact(count, self.table.n_live):
                        ranked = exact_scan(uq, asks[i], rows, lexical, self.index.vectors)
                    else:
                        ranked = self._selected(query_embeddings[i], asks[i], rows, lexical, pool, knobs)
                results.append(self._result(ranked, want, excluded[i], words.shape[0], weights, query_embeddings[i]))
        return results

    def _every_row_among(
        self,
        uq: np.ndarray,
        want: int,
        rows: np.ndarray,
        lexical: LexicalQuery | OpenLexicalQuery,
        every: tuple[EveryScore, int, RareSum | None],
    ) -> Ranked:
        """The exact top `want` of the live `rows` from a flat index's every-row pass (`every`: the chunk's scan,
        this query's place in it, its l summed beside it), as an unfiltered query of the same words takes it, with
        the matching rows as the live ones (service.rerank.every_row_top). A broad filter then costs what no filter
        costs, and a batch of queries under one filter (a tenant's key, a micro-batch) shares one scan, where
        FAISS's scan with the rows as a selector took twice the unfiltered query's time (100k passages, half of
        them matching: 2.1 ms against 1.0 of CPU a query), one query at a time. The caller holds the read lock."""
        scanned, at, summed = every
        if summed is None:
            summed = lexical.everywhere_but_common()
        mask = np.zeros(self.table.rows, dtype=bool)
        mask[rows] = True
        return every_row_top(uq, want, scanned, at, summed, self.index.vectors, mask)

    def _selected(
        self,
        query_embedding: np.ndarray,
        want: int,
        rows: np.ndarray,
        lexical: LexicalQuery | OpenLexicalQuery,
        pool: int,
        knobs: dict[str, int | None],
    ) -> Ranked:
        """The exact top `want` of the live `rows` through the index, searched with them as its selector and ranked
        by the reranker with their mask as the live rows; an exact scan of them when the index answered short
        (fewer rows than asked while as many match: an approximate index's walk cut off by the filter). The
        caller holds the read lock."""
        count = int(rows.shape[0])
        mask = np.zeros(self.table.rows, dtype=bool)
        mask[rows] = True
        bits = selector_bits(rows, self.table.rows)
        short = False
        config = self.index.config
        if config.index_type == "hnsw" and knobs.get("ef_search") is None:  # a wider walk under a filter
            knobs = {**knobs, "ef_search": filtered_ef(config.hnsw_ef_search, count, self.table.n_live)}

        def semantic(k: int) -> tuple[np.ndarray, np.ndarray]:
            nonlocal short
            scores, found = self.index.search(query_embedding[None, :], k, live_bits=bits, **knobs)
            if int((found[0] >= 0).sum()) < min(k, count):
                short = True
            return scores[0], found[0]

        ranked = self._rank(query_embedding, want, semantic, lexical, pool, live=mask, n_live=count)
        if short:
            return exact_scan(np.asarray(query_embedding, dtype=np.float64), want, rows, lexical, self.index.vectors)
        return ranked

    def matching(self, clause: Clause | None) -> np.ndarray:
        """The live rows matching `clause` (None: every live row), sorted: evaluated once for a request's search,
        its count and its facets."""
        with self.lock.read():
            return matching_rows(clause, self.fields, self.table.live)

    def facets(self, rows: np.ndarray, names: Sequence[str], size: int) -> dict[str, Facet]:
        """Each keyword field of `names`, its `size` most frequent values over the documents of `rows` (every one
        matching a filter: service.fields.facets), not over a page of hits."""
        with self.lock.read():
            matching = self._matching_bits(rows)
            return {name: facet(self.fields, name, matching, size) for name in names}

    def _matching_bits(self, rows: np.ndarray) -> BitMap | None:
        """`rows` (live rows, sorted) as the bitmap a facet intersects; None when they are every live row (a search
        without a filter): facets then count from the value bitmaps and the dead rows alone. Under the read lock."""
        return None if rows.shape[0] == self.table.n_live else bitmap_of(rows)

    def value_counts(
        self, rows: np.ndarray, wanted: Mapping[str, Sequence[Any] | None]
    ) -> dict[str, list[tuple[Any, int]]]:
        """For each field of `wanted`, how many documents of `rows` hold each of its values (service.fields.facets)."""
        with self.lock.read():
            matching = self._matching_bits(rows)
            return {name: value_counts(self.fields, name, matching, values) for name, values in wanted.items()}

    def _search_chunk(
        self,
        tfidf: sp.csr_matrix,
        query_embeddings: np.ndarray,
        start: int,
        first_k: int,
        knobs: dict[str, int | None],
        open_words: Sequence[QueryWords] | None = None,
        open_counts: Sequence[OpenCounts | None] | None = None,
        weighed: dict[int, tuple[int, dict[str, float]]] | None = None,
    ) -> _Chunk:
        """The index's answers for the queries start … start + SEARCH_CHUNK − 1 at once (under the read lock): for
        a flat index and a query whose l is summed for every row (service.rerank.prefers_dense), its s for every
        row from one matrix product; for the others, the first pool of `first_k` rows from one FAISS call."""
        flat = self.index.scans_every_row
        size = max(1, min(SEARCH_CHUNK, EVERY_SCORE_BYTES // (4 * max(1, self.index.ntotal)))) if flat else SEARCH_CHUNK
        stop = min(start + size, tfidf.shape[0])
        bits = self.table.live_bits()
        spans = [(int(tfidf.indptr[i]), int(tfidf.indptr[i + 1])) for i in range(start, stop)]
        lexical = self._lexical_terms(tfidf, start, stop, open_words, open_counts, weighed)
        dense = [
            flat and (b > a or isinstance(query, OpenLexicalQuery)) and prefers_dense(query, first_k, every_row=True)
            for (a, b), query in zip(spans, lexical, strict=True)
        ]
        every: dict[int, tuple[EveryScore, int, RareSum | None]] = {}
        if any(dense):
            chosen = [start + j for j, d in enumerate(dense) if d]
            # A few queries' l of every row are summed beside the scan, on the cores it leaves idle (service.busy);
            # a larger chunk's one at a time when ranked (an array of every row each).
            summed: dict[int, RareSum] = {}

            def sum_lexical(i: int) -> None:
                summed[i] = lexical[i - start].everywhere_but_common()

            beside = [partial(sum_lexical, i) for i in chosen] if len(chosen) <= LEXICAL_BESIDE_SCAN else []
            scanned = self.index.every_score(query_embeddings[chosen], beside)
            every = {i: (scanned, j, summed.get(i)) for j, i in enumerate(chosen)}
        pools: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        others = [start + j for j, d in enumerate(dense) if not d]
        if others:
            scores, rows = self.index.search(query_embeddings[others], first_k, live_bits=bits, **knobs)
            pools = {i: (scores[j], rows[j]) for j, i in enumerate(others)}
        return _Chunk(self.version, first_k, start, stop, bits, lexical, every, pools)

    def _lexical_terms(
        self,
        tfidf: sp.csr_matrix,
        start: int,
        stop: int,
        open_words: Sequence[QueryWords] | None = None,
        open_counts: Sequence[OpenCounts | None] | None = None,
        weighed: dict[int, tuple[int, dict[str, float]]] | None = None,
    ) -> list[LexicalQuery | OpenLexicalQuery]:
        """The lexical term l of the queries start … stop − 1 (with their new words' where the vocabulary is open).
        The caller holds the read lock."""
        spans = [(int(tfidf.indptr[i]), int(tfidf.indptr[i + 1])) for i in range(start, stop)]
        given = [None] * len(spans) if open_counts is None else open_counts[start:stop]
        lexical: list[LexicalQuery | OpenLexicalQuery] = [
            self.lexical.query(tfidf.indices[a:b], self.lexical_values(tfidf, a, b, counts))
            for (a, b), counts in zip(spans, given, strict=True)
        ]
        if open_words is not None:
            memo = {} if weighed is None else weighed
            lexical = [
                with_open(query, self.open, self._open_weights(memo, start + j, open_words, open_counts))
                for j, query in enumerate(lexical)
            ]
        return lexical

    def _open_weights(
        self,
        memo: dict[int, tuple[int, dict[str, float]]],
        query: int,
        open_words: Sequence[QueryWords] | None,
        open_counts: Sequence[OpenCounts | None] | None,
    ) -> dict[str, float]:
        """The weights of query `query`'s new words some live document holds (ssi.open_vocab; empty: no open term),
        weighed once per state version in `memo`: `search_rows` asks whether a query has an open term, its chunk
        builds the term, and /match's explain shows it, and a long page's weights cost milliseconds. The caller
        holds the read lock."""
        got = memo.get(query)
        if got is not None and got[0] == self.version:
            return got[1]
        rule = self.embedder.open_rule
        weights: dict[str, float] = {}
        if rule is not None and open_words is not None:
            df, n_docs = self._counts(open_counts, query)
            if df:
                weights = rule.query_weights(open_words[query], df, n_docs)
        memo[query] = (self.version, weights)
        return weights

    def _semantic(
        self,
        query_embedding: np.ndarray,
        first: tuple[int, np.ndarray, np.ndarray],
        bits: np.ndarray | None,
        knobs: dict[str, int | None],
    ) -> SemanticSearch:
        """The k best live rows by the index score for one query: its first pool, or a wider search."""
        first_k, first_scores, first_rows = first

        def semantic(k: int) -> tuple[np.ndarray, np.ndarray]:
            if k == first_k:
                return first_scores, first_rows
            scores, rows = self.index.search(query_embedding, k, live_bits=bits, **knobs)
            return scores[0], rows[0]

        return semantic

    def _rank(
        self,
        query_embedding: np.ndarray,
        want: int,
        semantic: SemanticSearch,
        lexical: LexicalQuery | OpenLexicalQuery,
        pool: int,
        live: np.ndarray | None = None,
        n_live: int | None = None,
    ) -> Ranked:
        """One query's exact top `want` rows, from the index pool and the rows sharing its words (`live` and
        `n_live`: the rows that may be ranked, the table's live rows unless a filter says fewer)."""
        # A flat or IVF search costs its scan whatever K is (the caller's pool is large for them);
        # an HNSW search grows with K, which bounds how far K is widened (service.rerank).
        return exact_top(
            query_embedding,
            want,
            semantic,
            lexical,
            self.index.vectors,
            self.table.live if live is None else live,
            self.table.n_live if n_live is None else n_live,
            pool,
            scan=self.config.index_type != "hnsw",
        )

    def _result(
        self,
        ranked: Ranked,
        want: int,
        excluded: str | None,
        query_words: int,
        open_weights: Mapping[str, float] | None = None,
        query_embedding: np.ndarray | None = None,
    ) -> QueryResult:
        rows = ranked.rows.tolist()
        ids = [self.table.doc_ids[row] for row in rows]
        chosen = [j for j, doc_id in enumerate(ids) if doc_id != excluded][:want]
        semantic = ranked.semantic[chosen].tolist()
        sentence: list[float] = []
        encoder = self.embedder.sentence
        if encoder is not None and query_embedding is not None:  # a hybrid bundle: its third part, apart
            stored = self.index.vectors(np.asarray([rows[j] for j in chosen], dtype=np.int64))
            parts = [split_parts(query_embedding, row, encoder.dims) for row in stored]
            semantic, sentence = [p[0] for p in parts], [p[1] for p in parts]
        return QueryResult(
            doc_ids=[ids[j] for j in chosen],
            scores=ranked.scores[chosen].tolist(),
            semantic=semantic,
            lexical=ranked.lexical[chosen].tolist(),
            query_words=query_words,
            candidates=ranked.candidates,
            rows=[rows[j] for j in chosen],
            open_weights=open_weights or {},
            sentence=sentence,
        )

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "index_type": self.config.index_type,
            "documents": self.table.n_live,
            "rows": self.table.rows,
            "dead_rows": self.table.n_dead,
            "seq": self.seq,
            "nlist": self.index.nlist,
            "nprobe": self.index.nprobe,
            # Flat and IVF vectors loaded from a snapshot are its files mapped: one copy for every worker process.
            "vectors_shared": self.index.shared_vectors,
            "loaded_from": self.report.source,
            "load_seconds": round(self.report.seconds, 4),
            "embedded_on_load": self.report.embedded,
            "replayed_on_load": self.report.replayed,
            "compacted_on_load": self.report.compacted,
        }
        if self.embedder.sentence is not None:  # a hybrid bundle's e(d): encoded, or kept (service.sentence_cache)
            described["encoded_on_load"] = self.report.encoded
            described["sentence_cached_on_load"] = self.report.sentence_cached
        if self.embedder.open_vocab:  # SSI_OPEN_VOCAB on (off: /model is what it always was)
            # The open vocabulary (ssi.open_vocab): words the bundle lacks, indexed from the served documents;
            # not enabled for a bundle whose vocabulary stays closed (tf-idf, or a form with no lexical diagonal).
            described["open_vocab"] = {
                "enabled": self.embedder.open_rule is not None,
                "words": self.open.n_words,
                "postings": self.open.n_postings,
                "max_words": self.open.max_words,
                "dropped": self.open.dropped,
                # whose idf and avg_len weigh the lexical part (SSI_OPEN_VOCAB_STATISTICS), and that avg_len
                "statistics": "collection" if self.embedder.collection_statistics else "bundle",
                "avg_len": self.embedder.lexical_vocab.bm25.avg_len if self.embedder.lexical_vocab.bm25 else None,
            }
        return described
