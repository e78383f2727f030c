"""Training data in index form: the vocabulary, tf-idf matrices for documents and queries, and pairs.

Two sources give the same `TrainingData`:
- document–document pairs (`query_id<TAB>doc_id`, both corpus documents): queries *are* documents,
  so the query matrix is the document matrix;
- BEIR queries + qrels: queries are separate texts.
A click log (training.clicks) gives query texts too, alone or beside BEIR queries and qrels; its pairs may
carry weights (training.debias), which the sampler and the loss apply.
Pairs that name an unknown id are counted and reported, never silently dropped.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from ssi.corpus import read_beir_queries, read_corpus, read_pairs, read_qrels
from ssi.records import Document, Pair, Query
from ssi.tokenize import tokenize
from ssi.vocab import Vocabulary
from ssi.weighting import Bm25
from training.debias import DEFAULT_CLIP, DEFAULT_RELEVANCE_FLOOR, DebiasMode
from training.dice import HashingPlan
from training.self_pairs import SelfPairMode, build_self_pairs
from training.splits import split_by_query, unseen_documents

if TYPE_CHECKING:
    from training.clicks import ClickPairs
    from training.pair_stream import PairStream, StreamCount

log = logging.getLogger(__name__)


@dataclass
class PairIndex:
    """Pairs as (query row, document row) index arrays, with what was dropped and why.

    `weights`: one per pair (a click log's debiased weight, training.debias), or None: every pair counts
    once and the trainer runs exactly as without weights. Weighted duplicates are merged, their weights
    summed (`n_merged`), not dropped.
    """

    query_rows: np.ndarray
    doc_rows: np.ndarray
    n_unknown_query: int = 0
    n_unknown_doc: int = 0
    n_self: int = 0
    n_duplicate: int = 0
    weights: np.ndarray | None = None
    n_merged: int = 0

    @property
    def size(self) -> int:
        return int(self.query_rows.shape[0])

    def dropped_summary(self) -> str:
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.n_unknown_query, "with an unknown query id"),
                (self.n_unknown_doc, "with an unknown document id"),
                (self.n_self, "pairing a document with itself"),
                (self.n_duplicate, "duplicates"),
            )
            if n
        ]
        return ", ".join(parts) if parts else "none"


@dataclass
class TrainingData:
    """Everything the trainer needs, in matrix form."""

    vocab: Vocabulary
    docs: list[Document]
    queries: list[Query]
    X_docs: sp.csr_matrix
    X_queries: sp.csr_matrix
    train: PairIndex
    valid: PairIndex | None
    doc_doc: bool
    # Streamed pairs (training.pair_stream): only the validation queries' training pairs, read on demand.
    train_pairs: Iterable[Pair] = field(default_factory=list)
    valid_pairs: list[Pair] = field(default_factory=list)
    fingerprint: dict[str, str] = field(default_factory=dict)
    unseen_docs: int = 0  # documents left out of training (the unseen-documents setting)
    unseen_pairs: int = 0  # training pairs touching them, left out too
    # The documents validation ranks when they are not the training documents: self-made pairs hold
    # their validation documents out of training (training.self_pairs says why).
    valid_docs: list[Document] | None = None
    X_valid_docs: sp.csr_matrix | None = None
    # Streamed pairs (--stream-pairs): the file read through a shuffle buffer, never held; `train` then holds
    # no pairs, only what the counting pass dropped and why, and `stream_count` what it kept.
    stream: PairStream | None = None
    stream_count: StreamCount | None = None
    # What loading has to tell the user (a click log's skipped lines, propensities and weights: training.debias),
    # and the click log's debiasing as the bundle records it.
    notes: list[str] = field(default_factory=list)
    clicks_info: dict[str, object] | None = None

    @property
    def doc_ids(self) -> list[str]:
        return [d.id for d in self.docs]

    @property
    def train_size(self) -> int:
        """Usable training pairs, held in memory or counted in the stream."""
        return self.stream_count.pairs if self.stream_count is not None else self.train.size


def index_pairs(
    pairs: list[Pair],
    query_row: dict[str, int],
    doc_row: dict[str, int],
    doc_doc: bool,
    weights: Sequence[float] | None = None,
) -> PairIndex:
    """Map id pairs to row pairs, counting (not hiding) what cannot be used.

    With `weights` (one per pair), a duplicate adds its weight to the first occurrence's instead of being dropped.
    """
    q_rows: list[int] = []
    d_rows: list[int] = []
    seen: dict[tuple[int, int], int] = {}
    kept_weights: list[float] = []
    unknown_q = unknown_d = self_pairs = duplicates = merged = 0
    if weights is not None and len(weights) != len(pairs):
        raise ValueError(f"{len(weights)} weights for {len(pairs)} pairs")
    for n, pair in enumerate(pairs):
        q = query_row.get(pair.query_id)
        d = doc_row.get(pair.doc_id)
        if q is None:
            unknown_q += 1
            continue
        if d is None:
            unknown_d += 1
            continue
        if doc_doc and q == d:
            self_pairs += 1
            continue
        if (q, d) in seen:
            if weights is None:
                duplicates += 1
            else:
                kept_weights[seen[(q, d)]] += float(weights[n])
                merged += 1
            continue
        seen[(q, d)] = len(q_rows)
        q_rows.append(q)
        d_rows.append(d)
        if weights is not None:
            kept_weights.append(float(weights[n]))
    return PairIndex(
        np.asarray(q_rows, dtype=np.int64),
        np.asarray(d_rows, dtype=np.int64),
        unknown_q,
        unknown_d,
        self_pairs,
        duplicates,
        weights=None if weights is None else np.asarray(kept_weights, dtype=np.float64),
        n_merged=merged,
    )


def file_fingerprint(path: Path | str) -> str:
    """sha256 of a file's bytes: recorded in the bundle so a model names the data it came from."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_training_data(
    corpus: Path,
    *,
    pairs: Path | None = None,
    valid_pairs: Path | None = None,
    queries: Path | None = None,
    qrels: Path | None = None,
    valid_qrels: Path | None = None,
    valid_share: float = 0.1,
    split_seed: int = 0,
    vocab_size: int = 30000,
    query_vocab_size: int = 0,
    min_df: int = 2,
    vocab: Vocabulary | None = None,
    unseen_share: float = 0.0,
    clicks: Path | None = None,
    valid_clicks: Path | None = None,
    pages: Path | None = None,
    clicked_position: int | None = None,
    debias: DebiasMode | None = None,
    propensity_clip: float = DEFAULT_CLIP,
    relevance_floor: float = DEFAULT_RELEVANCE_FLOOR,
    self_pairs: SelfPairMode | None = None,
    self_pair_words: int = 30,
    self_pair_unshared: bool = False,
    hashing: HashingPlan | None = None,
    stream_buffer: int | None = None,
    bm25: Bm25 | None = None,
    stemmer: str | None = None,
) -> TrainingData:
    """Read the files, build the vocabulary on the corpus (or use `vocab`, a warm start's), featurize once.

    BEIR data without `valid_qrels` holds out `valid_share` of the training queries (by query id,
    with the evaluation harness's `split_by_query`, so `ssi eval` can rebuild the same split).
    A click log (`clicks`, training.clicks) makes the adverts the corpus and the pages the queries;
    its one vocabulary is built on adverts and pages together, so page words have weights too. `debias`
    weighs its clicks (training.debias); with `queries` and `qrels` too, both train: labelled pairs weigh 1
    each and the click pairs their weights scaled to a mean of 1, so a labelled pair counts as an average click.
    `self_pairs` (training.self_pairs) makes pairs from the corpus itself, with no labels: the vocabulary
    comes from the full documents, the trainer's document rows from their texts without the query part.
    `query_vocab_size` (two languages, with `queries`) adds the queries' own top words to the vocabulary.
    `stream_buffer` (with `pairs`): the training pairs are streamed through a shuffle buffer of that many
    pairs (training.pair_stream) instead of read into memory; one counting pass checks and counts them.
    `bm25` (k1, b): a new vocabulary weighs the BM25 way (ssi.weighting), queries and documents apart.
    `stemmer`: a new vocabulary's words are stems of this Snowball stemmer (ssi.stemming).
    """
    docs = read_corpus(corpus)
    unseen: frozenset[str] = frozenset()
    unseen_pairs = 0
    if unseen_share:
        # The unseen-documents setting: these documents and every pair touching them are left out of
        # training altogether (text, vocabulary, pairs, negatives), as documents added after training are.
        unseen = unseen_documents([d.id for d in docs], unseen_share, split_seed)
        docs = [d for d in docs if d.id not in unseen]
    doc_row = {d.id: i for i, d in enumerate(docs)}
    doc_tokens = [tokenize(d.full_text) for d in docs]
    click_pairs = None
    if clicks is not None:
        from training.clicks import load_click_pairs

        click_pairs = load_click_pairs(
            clicks, pages=pages, valid_clicks=valid_clicks, clicked_position=clicked_position,
            valid_share=valid_share, split_seed=split_seed, debias=debias, propensity_clip=propensity_clip,
            require_texts=queries is None, relevance_floor=relevance_floor,
        )  # fmt: skip
    if vocab is None:
        page_tokens = [tokenize(q.text) for q in click_pairs.pages] if click_pairs is not None else []
        vocab = Vocabulary.build_from_tokens(
            doc_tokens + page_tokens, max_words=vocab_size, min_df=min_df, bm25=bm25, stemmer=stemmer
        )
        del page_tokens
        if query_vocab_size and queries is not None:  # two languages: the queries' words, by their own df
            query_tokens = (tokenize(q.text) for q in read_beir_queries(queries))
            query_vocab = Vocabulary.build_from_tokens(query_tokens, max_words=query_vocab_size, min_df=min_df)
            vocab = Vocabulary.interleaved(vocab, query_vocab)
    if hashing is not None:  # correlated feature hashing: the DICE map counted on the whole corpus
        vocab = hashing.build(doc_tokens, vocab)
    made = (
        build_self_pairs(
            docs,
            self_pairs,
            span_words=self_pair_words,
            valid_share=valid_share,
            seed=split_seed,
            unshared=self_pair_unshared,
        )  # fmt: skip
        if self_pairs
        else None
    )
    valid_docs: list[Document] | None = None
    X_valid_docs: sp.csr_matrix | None = None
    if made is not None:
        rest = [tokenize(text) for text in made.doc_texts]
        keep = [d.id not in made.held_out for d in docs]
        valid_docs = [d for d, kept in zip(docs, keep, strict=True) if not kept]
        X_valid_docs = vocab.featurize_tokens(
            [tokens for tokens, kept in zip(rest, keep, strict=True) if not kept], documents=True
        )
        docs = [d for d, kept in zip(docs, keep, strict=True) if kept]
        doc_row = {d.id: i for i, d in enumerate(docs)}
        doc_tokens = [tokens for tokens, kept in zip(rest, keep, strict=True) if kept]
        del rest
    X_docs = vocab.featurize_tokens(doc_tokens, documents=True)
    # A document as a query (document-document pairs) has a query row of its own where the weighting is asymmetric.
    X_docs_as_queries = X_docs if vocab.symmetric else vocab.featurize_tokens(doc_tokens, documents=False)
    del doc_tokens
    fingerprint = {"corpus": file_fingerprint(corpus)}
    stream: PairStream | None = None
    stream_count: StreamCount | None = None
    train_weights: list[float] | None = None
    if pairs is not None and click_pairs is not None:
        raise ValueError(
            "--clicks with --pairs is not supported: document-document pairs make the documents the queries, "
            "click-log pages are texts of their own (train on --clicks with --queries/--qrels instead)"
        )
    if pairs is not None:
        doc_doc = True
        query_list = [Query(d.id, d.full_text) for d in docs]
        X_queries = X_docs_as_queries
        query_row = doc_row
        valid_list = read_pairs(valid_pairs) if valid_pairs else []
        if stream_buffer is not None:
            from training.pair_stream import PairStream

            stream = PairStream(Path(pairs), doc_row, doc_row, True, stream_buffer, left_out=unseen)
            stream_count = stream.count()
            train_list = stream.known_pairs({p.query_id for p in valid_list})
        else:
            train_list = read_pairs(pairs)
        fingerprint["pairs"] = file_fingerprint(pairs)
        if valid_pairs:
            fingerprint["valid_pairs"] = file_fingerprint(valid_pairs)
    elif click_pairs is not None and queries is None:
        doc_doc = False
        query_list = click_pairs.pages
        query_row = {q.id: i for i, q in enumerate(query_list)}
        X_queries = vocab.featurize_queries([q.text for q in query_list])
        train_list, valid_list = click_pairs.train, click_pairs.valid
        train_weights = click_pairs.train_weights
        fingerprint.update(click_pairs.fingerprint)
    elif made is not None:
        doc_doc = False
        query_list = made.queries
        query_row = {q.id: i for i, q in enumerate(query_list)}
        X_queries = vocab.featurize_queries([q.text for q in query_list])
        train_list, valid_list = made.train, made.valid
        fingerprint["self_pairs"] = f"{self_pairs}, {self_pair_words} words, seed {split_seed}" + (
            ", unshared words" if self_pair_unshared else ""
        )
        log.info("self-made pairs (%s): %d, %d documents gave none", self_pairs, len(made.train), made.skipped)
    elif queries is not None and qrels is not None:
        doc_doc = False
        query_list = read_beir_queries(queries)
        if click_pairs is not None:  # click pages beside the queries (a page may name a query by its id)
            known = {q.id for q in query_list}
            query_list = query_list + [p for p in click_pairs.pages if p.id not in known]
        query_row = {q.id: i for i, q in enumerate(query_list)}
        X_queries = vocab.featurize_queries([q.text for q in query_list])
        train_list = read_qrels(qrels)
        if valid_qrels:
            valid_list = read_qrels(valid_qrels)
        elif valid_share > 0:
            train_list, valid_list = split_by_query(train_list, valid_share, split_seed)
        else:
            valid_list = []
        fingerprint["queries"] = file_fingerprint(queries)
        fingerprint["qrels"] = file_fingerprint(qrels)
        if click_pairs is not None:
            train_weights = [1.0] * len(train_list) + _mean_one(click_pairs.train_weights, len(click_pairs.train))
            train_list = train_list + click_pairs.train
            valid_list = valid_list + click_pairs.valid
            fingerprint.update(click_pairs.fingerprint)
    else:
        raise ValueError(
            "give --pairs (document-document), --queries with --qrels (BEIR), --clicks (adverts) or --self-pairs"
        )
    if stream_buffer is not None and stream is None:
        raise ValueError("streamed pairs (--stream-pairs, --ray) read a --pairs file")
    if stream is not None and stream_count is not None:  # the stream skips unseen documents' pairs itself
        valid_list = [p for p in valid_list if p.query_id not in unseen and p.doc_id not in unseen]
        if stream_count.pairs == 0:
            raise ValueError(f"no usable training pairs (dropped: {stream_count.dropped.dropped_summary()})")
        return TrainingData(
            vocab=vocab, docs=docs, queries=query_list, X_docs=X_docs, X_queries=X_queries,
            train=stream_count.dropped,
            valid=index_pairs(valid_list, query_row, doc_row, doc_doc) if valid_list else None,
            doc_doc=doc_doc, train_pairs=train_list, valid_pairs=valid_list, fingerprint=fingerprint,
            unseen_docs=len(unseen), unseen_pairs=stream_count.left_out, stream=stream, stream_count=stream_count,
        )  # fmt: skip
    if unseen:
        touches = (lambda p: p.doc_id in unseen or p.query_id in unseen) if doc_doc else (lambda p: p.doc_id in unseen)
        unseen_pairs = sum(touches(p) for p in train_list)
        if train_weights is not None:
            train_weights = [w for p, w in zip(train_list, train_weights, strict=True) if not touches(p)]
        train_list = [p for p in train_list if not touches(p)]
        valid_list = [p for p in valid_list if not touches(p)]
    train = index_pairs(train_list, query_row, doc_row, doc_doc, train_weights)
    valid_row = doc_row if valid_docs is None else {d.id: i for i, d in enumerate(valid_docs)}
    valid = index_pairs(valid_list, query_row, valid_row, doc_doc) if valid_list else None
    if train.size == 0:
        raise ValueError(f"no usable training pairs (dropped: {train.dropped_summary()})")
    return TrainingData(
        vocab=vocab,
        docs=docs,
        queries=query_list,
        X_docs=X_docs,
        X_queries=X_queries,
        train=train,
        valid=valid,
        doc_doc=doc_doc,
        train_pairs=train_list,
        valid_pairs=valid_list,
        fingerprint=fingerprint,
        unseen_docs=len(unseen),
        unseen_pairs=unseen_pairs,
        valid_docs=valid_docs,
        X_valid_docs=X_valid_docs,
        notes=click_pairs.notes if click_pairs is not None else [],
        clicks_info=_clicks_info(click_pairs, debias, propensity_clip) if click_pairs is not None else None,
    )


def _mean_one(weights: list[float] | None, n: int) -> list[float]:
    """Click-pair weights scaled to a mean of 1 (1 each where unweighted), to sit beside labelled pairs of weight 1."""
    if weights is None or not weights:
        return [1.0] * n
    mean = sum(weights) / len(weights)
    return [w / mean for w in weights]


def _clicks_info(made: ClickPairs, debias: str | None, clip: float) -> dict[str, object]:
    """What the bundle records of a click log's debiasing (training.debias)."""
    info: dict[str, object] = {"debias": debias or "top", "counts": made.counts}
    if made.propensities is not None:
        info["propensity"] = {
            "eta": round(made.propensities.eta, 4),
            "estimated": made.propensities.estimated,
            "randomized_results": made.propensities.randomized_results,
            "randomized_clicks": made.propensities.randomized_clicks,
            "clip": clip,
        }
    return info
