"""One page from two rankings: the served model's and the candidate's results team-draft interleaved
(ssi.interleaving.team_draft), each hit with the score parts of the model that placed it."""

from __future__ import annotations

import random

from service.model_state import QueryResult
from service.schemas import SearchResult
from ssi.interleaving import SERVED, team_draft


def interleave_results(
    served: QueryResult, candidate: QueryResult, k: int, rng: random.Random
) -> tuple[QueryResult, str]:
    """The merged page of at most `k` hits and who placed each (one letter per hit)."""
    ids, teams = team_draft(served.doc_ids, candidate.doc_ids, k, rng)
    where = {SERVED: {d: i for i, d in enumerate(served.doc_ids)}}
    where_candidate = {d: i for i, d in enumerate(candidate.doc_ids)}
    picked = [
        (served, where[SERVED][d]) if team == SERVED else (candidate, where_candidate[d])
        for d, team in zip(ids, teams, strict=True)
    ]
    has_sentence = bool(served.sentence) and bool(candidate.sentence)
    merged = QueryResult(
        doc_ids=ids,
        scores=[r.scores[i] for r, i in picked],
        semantic=[r.semantic[i] for r, i in picked],
        lexical=[r.lexical[i] for r, i in picked],
        query_words=served.query_words,
        candidates=served.candidates + candidate.candidates,
        rows=[],  # rows of two states: neither's numbering holds for the page
        sentence=[r.sentence[i] for r, i in picked] if has_sentence else [],
    )
    return merged, teams


def interleave_hits(
    served: SearchResult, candidate: SearchResult, k: int, rng: random.Random
) -> tuple[SearchResult, str]:
    """The same merge for two answers already built (a sharded cluster's router merges its shards' pages): each
    hit as the model that placed it answered it."""
    ids, teams = team_draft([h.id for h in served.hits], [h.id for h in candidate.hits], k, rng)
    hits = {SERVED: {h.id: h for h in served.hits}, "candidate": {h.id: h for h in candidate.hits}}
    picked = [hits[SERVED][d] if team == SERVED else hits["candidate"][d] for d, team in zip(ids, teams, strict=True)]
    merged = SearchResult(
        hits=picked, query_words=served.query_words, candidates=served.candidates + candidate.candidates
    )
    return merged, teams
