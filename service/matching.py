"""Adverts for a page: the exact filtered top k of an adverts collection, with why each advert matched.

A page is a long query: cut to SSI_MAX_PAGE_CHARS and its SSI_MAX_PAGE_WORDS heaviest words, as
`/similar` does. The ranking is the collection's exact search (service.model_state: f(q, d) =
(U q)·(V d) + Σ w_i q_i d_i over cached V d, so a match costs N multiplications per advert scanned), with the
open vocabulary's term (ssi.open_vocab) added exactly as for /search when SSI_OPEN_VOCAB is on: an advert written
after training is found by a page word only it holds.

A match is a filtered search (service.fields): its filter (service.adverts.match_filter: not paused, the old
`filters`, the request's `filter`) is evaluated once to the matching adverts' rows from the field index, and
each page gets the exact top k of f among them, an exact scan of those rows or the index with them as a selector
(service.fields.plan), as /search's filter does. A request therefore gets k adverts whenever k adverts match,
and fewer only when fewer exist.

Why an advert matched, in words: `shared` are the words of both texts, by q_i d_i (their share of
the lexical part when the form has the identity term); `related` are the page words that pulled the
advert most through the semantic part, word i contributing q_i (U e_i)·(V d) (the query map is
linear, so these shares add up to the semantic score). A good content match often has no shared
word and only related ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np
import scipy.sparse as sp

from service.adverts import AdvertMeta
from service.bounds import cut_long_text
from service.collection import Collection
from service.model_state import ModelState, QueryResult
from service.settings import Settings
from ssi.forms.base import UNIT_EPS
from ssi.open_vocab import OpenCounts

EXPLAIN_WORDS = 5  # shared and related words reported per advert


@dataclass(frozen=True, slots=True)
class AdHit:
    id: str
    title: str
    text: str
    meta: AdvertMeta
    score: float
    semantic: float
    lexical: float
    shared: list[str]
    related: list[str]
    sentence: float | None = None  # a hybrid bundle's third part (ssi.hybrid); None for any other bundle


@dataclass(frozen=True, slots=True)
class PageMatch:
    hits: list[AdHit]
    page_words: int  # distinct page words the model knows (after the cut)
    ranked: int  # adverts scored exactly for this page


def match_pages(
    collection: Collection,
    settings: Settings,
    pages: Sequence[str],
    k: int,
    filter: dict[str, Any],
    open_counts: Sequence[OpenCounts | None] | None = None,
) -> list[PageMatch]:
    """The exact top k adverts matching `filter` (service.adverts.match_filter: a 422 naming a problem of it) of
    each page text.

    The pages are featurized once and searched together (one ONNX call for the batch, as /search does), the filter
    evaluated once for them all. `open_counts`: what weighs each page's new words where not the collection's own
    counts (a shard: the cluster's).
    """
    collection.require_type("adverts", "/match")
    state = collection.ready_state()
    asked = collection.where(state, filter)
    rows = state.matching(asked.clause)
    # Every advert matches (none paused, no filter or one that excludes none): the unfiltered search, batched as
    # /search's, rather than a selector or a scan over every row.
    where = None if rows.shape[0] == state.table.n_live else dataclasses.replace(asked, rows=rows)
    texts = [cut_long_text(text, settings.max_page_chars) for text in pages]
    # The page's words for the open term, as /search takes them (ssi.open_vocab): None while closed or none is held.
    rows, words = state.featurize(texts, settings.max_page_words, counted=open_counts is not None)
    pool = state.first_pool(settings.candidate_pool, settings.scan_pool)
    found = (
        state.search_rows(rows, k, pool=pool, open_words=words, open_counts=open_counts, texts=texts, where=where)
        if pages
        else []
    )
    return [
        _explained(collection, state, rows[i], found[i], open_counts[i] if open_counts is not None else None)
        for i in range(len(pages))
    ]


def _explained(
    collection: Collection, state: ModelState, page: sp.csr_matrix, result: QueryResult, counts: OpenCounts | None
) -> PageMatch:
    """One page's ranked adverts (`result`, of its query row `page`, weighed by `counts` where not the collection's
    own) with their texts, metadata and the words that made each match."""
    stored = collection.get_many(result.doc_ids)
    # Deleted, or paused, since the ranking: never shown (the stored fields are what a read sees now).
    chosen = [
        j
        for j, ad_id in enumerate(result.doc_ids)
        if ad_id in stored and AdvertMeta.of_fields(stored[ad_id].fields).active
    ]
    shared, related = explain(state, page, [result.rows[j] for j in chosen], result.open_weights, counts)
    hits = []
    for i, j in enumerate(chosen):
        doc = stored[result.doc_ids[j]]
        hits.append(
            AdHit(
                id=doc.id,
                title=doc.title,
                text=doc.text,
                meta=AdvertMeta.of_fields(doc.fields),
                score=result.scores[j],
                semantic=result.semantic[j],
                lexical=result.lexical[j],
                shared=shared[i],
                related=related[i],
                sentence=result.sentence[j] if result.sentence else None,
            )
        )
    return PageMatch(hits=hits, page_words=result.query_words, ranked=result.candidates)


def explain(
    state: ModelState,
    page: sp.csr_matrix,
    rows: list[int],
    open_weights: Mapping[str, float] | None = None,
    counts: OpenCounts | None = None,
) -> tuple[list[list[str]], list[list[str]]]:
    """(shared words, related page words) of each advert, strongest first, for the adverts at `rows` of `state`
    as they were ranked; `page` is the page's query row as it was searched, `open_weights` the weights its new
    words were ranked with (QueryResult.open_weights; empty or None: no open term), `counts` the counts it was
    ranked with where not the collection's own (a shard's: the cluster's), and a new word shared with an advert
    counts among its shared words by q_t·d_t.

    Both come from what the state holds, not from the adverts' texts: each advert's value of each page word
    from the lexical index's posting lists, its e(d) from the vector index (rows are never renumbered within
    a state, so they still name the adverts ranked).
    """
    if not rows:
        return [], []
    embedder = state.embedder
    vocab = embedder.bundle.vocab
    q_ids, q_vals = page.indices.astype(np.int64), page.data.astype(np.float64)
    at = np.asarray(rows, dtype=np.int64)
    with state.lock.read():
        # the page's lexical values as it was ranked (the collection's idf where the collection's statistics are on)
        lexical_vals = state.lexical_values(page, 0, int(page.indptr[1]), counts).astype(np.float64)
        ad_values = state.lexical.query(q_ids, q_vals).values_of(at)  # [ads, page words]: d_i
        ad_embedded = state.index.vectors(at).astype(np.float32)  # [ads, M (+ E)], as the index holds them
        opened = state.open_shares(open_weights or {}, rows)  # each advert's new words shared with the page
    page_map = np.asarray(embedder.form.query_map()[:, q_ids], dtype=np.float32)  # M × page words
    ad_embedded = ad_embedded[:, : page_map.shape[0]]  # a hybrid bundle's rows end with λ e(d), no word's share
    if embedder.form.normalizes_query:  # a cosine form's query embedding is A q/‖A q‖: its shares scale alike
        page_map /= max(float(np.linalg.norm(page_map @ q_vals)), UNIT_EPS)
    # contribution[a, i] = q_i (U e_i)·(V d_a): the page words' shares of each advert's semantic part
    contribution = (ad_embedded @ page_map) * q_vals[None, :]
    # q_i d_i, not w_i q_i d_i: a form without the identity (w = 0) still shows the words it shares
    shares = ad_values * lexical_vals[None, :]
    shared_all, related_all = [], []
    for a in range(at.shape[0]):
        present = np.flatnonzero(shares[a] > 0)
        strongest = present[np.lexsort((-q_ids[present], -shares[a, present]))][:EXPLAIN_WORDS]
        shared = [(float(shares[a, j]), vocab.feature_name(int(q_ids[j]))) for j in strongest.tolist()]
        if opened[a]:  # new words beside bundle words, by share (a bundle word first on a tie: a stable sort)
            shared += [(-v, w) for v, w in sorted((-v, w) for w, v in opened[a].items())]  # by share, then word
            shared.sort(key=itemgetter(0), reverse=True)
        shared_all.append([word for _, word in shared[:EXPLAIN_WORDS]])
        order = np.argsort(-contribution[a])[:EXPLAIN_WORDS]
        related_all.append([vocab.feature_name(int(q_ids[j])) for j in order.tolist() if contribution[a, j] > 0])
    return shared_all, related_all
