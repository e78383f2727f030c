"""The router's core: fan a request out to the shards, merge their exact answers, route writes to owners.

Why the merge is exact: a document's score f(q, d) depends only on q and d (the bundle's vocabulary and
idf, not the collection), so each shard's exact top (k + offset) (service.rerank, the single node's
code) holds every document of its shard that can be in the global top (k + offset); sorting the
union by score and cutting gives the single node's answer. Ties are broken by document id here (the
single node breaks them by row), so only documents of exactly equal score may change places.
The same holds for adverts matched to a page (`match`): a filter admits or refuses an advert on its own
metadata, so each shard's exact top k admitted adverts holds every admitted advert of the global top k.

With the open vocabulary (SSI_OPEN_VOCAB), f also depends on the collection's live counts of the query's new words
(words the bundle lacks: their document frequency and the number of documents, ssi.open_vocab), and every shard
must weigh them by the cluster's counts, as one node holding every document would (`ranked`). A query whose new
words no shard holds (every query while the vocabulary is closed) costs one round trip, as before: each shard says
what it needs with its answer. Where a shard holds one of them, it ranks that query only once the router has summed
every shard's document frequencies of those words and live documents, and sent them back (a second round trip,
to the shards that need them only). The merge is then exact as above. With the collection's statistics
(SSI_OPEN_VOCAB_STATISTICS=collection) every word's idf is the collection's, so a shard also reports the live
document frequency of each of the query's bundle words it holds, the router sums those too (`OpenCounts.summed`),
and every query with a word some shard holds takes the second round trip; each shard's lexical rows are weighed with
the cluster's avg_len (cluster.shard_settings).

A shard that cannot answer (its replica died, is restarting, or is unreachable) is retried until
`retry_seconds` have passed; after that the request fails with a 503 naming the shard. A shard call
that neither answers nor fails (Ray Serve queues it while the shard has no live replica) is given up
after `timeout_seconds` with the same 503, so a shard that cannot come back never holds a request.
A ranking is never assembled from the shards that did answer: a missing shard would silently drop its
documents (docs/cluster-faults.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Protocol

from cluster.facet_merge import merge_facets
from cluster.field_schema import FieldSchema
from cluster.shard_server import FieldAsk, Reply, ShardAnswers, ShardServer
from cluster.sharding import shard_of
from service.advert_schemas import AdMatch, PageMatchOut
from service.errors import Conflict, Forbidden, InvalidInput, NotFound, ServiceError, Unauthorized, Unavailable
from service.fields.http import FieldOptions
from service.schemas import FacetOut, FacetValue, Hit, SearchResult
from ssi.fields.filter_form import filter_fields
from ssi.open_vocab import OpenCounts

ERRORS: dict[int, type[ServiceError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: InvalidInput,
    503: Unavailable,
}


class ShardUnavailable(Unavailable):
    """A shard did not answer within the retry window: no ranking is returned without it."""


class Shards(Protocol):
    """How the router reaches shard i: `call(i, method, *args)` runs ShardServer.method there."""

    count: int

    async def call(self, shard: int, method: str, *args: Any) -> Reply: ...


class LocalShards:
    """Shards in this process (no Ray): the same router over ShardServer objects, for tests and the benchmark."""

    def __init__(self, servers: Sequence[ShardServer]) -> None:
        self.servers = list(servers)
        self.count = len(self.servers)

    async def call(self, shard: int, method: str, *args: Any) -> Reply:
        return await asyncio.to_thread(getattr(self.servers[shard], method), *args)


def unwrap(reply: Reply) -> Any:
    """The reply's value, or its service error raised again with the shard's status and message."""
    if reply.status == 200:
        return reply.value
    raise ERRORS.get(reply.status, ServiceError)(reply.message, headers=reply.headers)


def by_score(hit: Hit | AdMatch) -> tuple[float, str]:
    """The merged order: score, best first, then id (the one tie-break every shard's hits share)."""
    return -hit.score, hit.id


def merge(results: Sequence[dict[str, Any]], k: int, offset: int) -> SearchResult:
    """One query's answer from each shard's exact top (k + offset): the global top k after `offset`."""
    hits = [Hit(**hit) for result in results for hit in result["hits"]]
    hits.sort(key=by_score)
    return SearchResult(
        hits=hits[offset : offset + k],
        query_words=max((r["query_words"] for r in results), default=0),
        candidates=sum(r["candidates"] for r in results),
    )


def merge_matches(results: Sequence[dict[str, Any]], k: int) -> PageMatchOut:
    """One page's adverts from each shard's exact top k admitted ones: the global top k. The page's known words are
    the same in every shard (the bundle's vocabulary); the adverts ranked exactly add up, as /search's candidates."""
    ads = [AdMatch(**ad) for result in results for ad in result["ads"]]
    ads.sort(key=by_score)
    return PageMatchOut(
        ads=ads[:k],
        page_words=max((r["page_words"] for r in results), default=0),
        ranked=sum(r["ranked"] for r in results),
    )


class Fanout:
    """Search, "more like this" and writes over all shards, with the single node's answers."""

    def __init__(self, shards: Shards) -> None:
        self.shards = shards
        self.schema = FieldSchema(lambda: self._all("field_types"))  # the cluster's field types (cluster.field_schema)

    async def _all(self, method: str, *args: Any) -> list[Any]:
        replies = await asyncio.gather(*(self.shards.call(i, method, *args) for i in range(self.shards.count)))
        return [unwrap(reply) for reply in replies]

    async def ranked(self, method: str, texts: list[str], *args: Any) -> list[list[dict[str, Any]]]:
        """Every shard's answers to `texts` (ShardServer.`method`(texts, *args, counts) answers ShardAnswers):
        answers[shard][i], each shard's exact top for text i with the cluster's counts of its words."""
        first: list[ShardAnswers] = await self._all(method, texts, *args)
        n_docs = sum(answers.n_live for answers in first)
        counts: dict[int, OpenCounts] = {}
        for i in range(len(texts)):
            summed = OpenCounts.summed([need for answers in first if (need := answers.needs[i]) is not None], n_docs)
            if summed.df or summed.known:  # some shard holds one of its words: the shards that need them rank it again
                counts[i] = summed
        asked = {s: [i for i in counts if first[s].needs[i] is not None] for s in range(self.shards.count)}
        asked = {s: texts_asked for s, texts_asked in asked.items() if texts_asked}
        replies = await asyncio.gather(
            *(
                self.shards.call(s, method, [texts[i] for i in at], *args, [counts[i] for i in at])
                for s, at in asked.items()
            )
        )
        results = [list(answers.results) for answers in first]
        for (s, at), reply in zip(asked.items(), replies, strict=True):
            for i, result in zip(at, unwrap(reply).results, strict=True):
                results[s][i] = result
        return results  # type: ignore[return-value]  # every text waiting somewhere was asked again there

    async def search(
        self,
        queries: Sequence[str],
        k: int,
        offset: int,
        ef_search: int | None = None,
        nprobe: int | None = None,
        options: FieldOptions | None = None,
        facet_size: int = 10,
    ) -> list[SearchResult]:
        """Each query's global top k after `offset`; with `options` (a filter, facets, fields with each hit) among
        the documents matching its filter, with `matched` summed over the shards and the facets merged exactly
        (cluster.facet_merge, at most `facet_size` values each)."""
        asked = await self.field_ask(options, facet_size) if options is not None and options.asks_fields() else None
        per_shard = await self.ranked("search", list(queries), k + offset, ef_search, nprobe, asked)
        results = [merge([shard[i] for shard in per_shard], k, offset) for i in range(len(queries))]
        if asked is None or (asked.filter is None and not asked.facets):
            return results
        facets = None
        if asked.facets:
            first = [shard[0]["facets"] for shard in per_shard]  # one filter for every query: the same facets
            merged = await merge_facets(first, asked.facets, asked.facet_size, self._count_values(asked))
            facets = {
                name: FacetOut(values=[FacetValue(value=v, count=n) for v, n in f.values], other=f.other)
                for name, f in merged.items()
            }
        for i, result in enumerate(results):
            result.matched = sum(int(shard[i]["matched"]) for shard in per_shard)
            result.facets = facets
        return results

    async def field_ask(self, options: FieldOptions, facet_size: int = 10) -> FieldAsk:
        """What a search asks of the fields, as the shards take it, with the cluster's types of the fields it names
        (cluster.field_schema: asked from the shards when one is new to the router; a 409 for a field the shards
        type differently). Its filter has the form of one already (cluster.http checks it: check_filter_form)."""
        names = set(options.facets) | (filter_fields(options.filter) if options.filter is not None else set())
        types = await self.schema.known(names) if names else self.schema.types
        return FieldAsk(options.filter, tuple(options.facets), tuple(options.fields), dict(types), facet_size)

    def _count_values(self, asked: FieldAsk) -> Any:
        async def count(shard: int, wanted: dict[str, list[Any] | None]) -> dict[str, list[tuple[Any, int]]]:
            return unwrap(await self.shards.call(shard, "count_values", asked, wanted))

        return count

    async def search_candidate(self, queries: Sequence[str], k: int, spec: dict[str, Any]) -> list[SearchResult]:
        """Each query's first page of `k` by a comparison's candidate (cluster.interleave), merged as `search`'s."""
        per_shard = await self.ranked("search_candidate", list(queries), k, spec)
        return [merge([shard[i] for shard in per_shard], k, 0) for i in range(len(queries))]

    async def load_candidate(self, spec: dict[str, Any]) -> list[dict[str, str]]:
        """Every shard loads the comparison's candidate: each one's content hash and form (a shard's error raised)."""
        return await self._all("load_candidate", spec)

    async def drop_candidate(self) -> None:
        """Every shard forgets the candidate; a shard that cannot be reached drops it with its process."""
        await asyncio.gather(
            *(self.shards.call(i, "drop_candidate") for i in range(self.shards.count)), return_exceptions=True
        )

    async def match(self, pages: Sequence[str], k: int, filter: dict[str, Any]) -> list[PageMatchOut]:
        """POST /match: each page's top k adverts matching `filter` (service.adverts.match_filter: one filter, the
        same on every shard) over every shard (all of them answer, or a 503)."""
        per_shard = await self.ranked("match", list(pages), k, filter)
        return [merge_matches([shard[i] for shard in per_shard], k) for i in range(len(pages))]

    async def similar(self, doc_id: str, k: int, offset: int, filter: Any = None) -> SearchResult:
        """The documents most like `doc_id` (left out) over every shard, among those matching `filter` if given."""
        asked = None if filter is None else await self.field_ask(FieldOptions(filter=filter))
        text = unwrap(await self.shards.call(self.owner(doc_id), "page_text", doc_id))
        per_shard = await self.ranked("search_page", [text], k + offset, doc_id, asked)
        return merge([shard[0] for shard in per_shard], k, offset)

    def owner(self, doc_id: str) -> int:
        return shard_of(doc_id, self.shards.count)

    async def get(self, doc_id: str) -> dict[str, Any]:
        return unwrap(await self.shards.call(self.owner(doc_id), "get", doc_id))

    async def put(self, docs: Sequence[dict[str, Any]]) -> list[int]:
        """Each document to the shard that owns it (one transaction per shard); the write sequence of each. Fields
        are checked against the cluster's types first (cluster.field_schema: a 409 writes nothing anywhere).

        A batch spanning shards is atomic per shard, not across shards: if one shard fails, the
        others' documents are written and the error names the shard (the request can be repeated:
        a put is idempotent).
        """
        return await self.schema.admit(docs, self._put)

    async def _put(self, docs: list[dict[str, Any]], types: dict[str, str]) -> list[int]:
        groups: dict[int, list[int]] = {}
        for i, doc in enumerate(docs):
            groups.setdefault(self.owner(doc["id"]), []).append(i)
        shards = sorted(groups)

        def used(at: list[int]) -> dict[str, str] | None:
            names = {name for i in at for name in docs[i].get("fields") or {}}
            return {name: types[name] for name in names} or None

        replies = await asyncio.gather(
            *(self.shards.call(s, "put", [docs[i] for i in groups[s]], used(groups[s])) for s in shards)
        )
        seqs = [0] * len(docs)
        for shard, reply in zip(shards, replies, strict=True):
            for i, seq in zip(groups[shard], unwrap(reply), strict=True):
                seqs[i] = seq
        return seqs

    async def delete(self, doc_id: str) -> int:
        return unwrap(await self.shards.call(self.owner(doc_id), "delete", doc_id))

    async def model(self) -> dict[str, Any]:
        """GET /model: shard 0's bundle record (all shards serve one bundle), with every shard's index."""
        records = await self._all("model")
        about = dict(records[0])
        about["index"] = {
            "shards": self.shards.count,
            "documents": sum(int(m["index"].get("documents", 0)) for m in records),
            "per_shard": [m["index"] for m in records],
        }
        return about

    async def reload(self, bundle: str) -> dict[str, Any]:
        """POST /admin/reload: every shard builds its state for `bundle`, and only when all have, the manifest
        records it and every shard swaps. A shard that cannot prepare (a bad bundle, a replica that cannot, not
        answering) aborts the others: the cluster keeps serving the old bundle, whose scores all shards share.
        """
        replies = await asyncio.gather(
            *(self.shards.call(i, "prepare_reload", bundle) for i in range(self.shards.count)), return_exceptions=True
        )
        failed = [r for r in replies if isinstance(r, BaseException) or r.status != 200]
        if failed:
            await asyncio.gather(
                *(self.shards.call(i, "abort_reload") for i in range(self.shards.count)), return_exceptions=True
            )
            first = failed[0]
            if isinstance(first, BaseException):
                raise first
            unwrap(first)
        prepared = {(reply.value["content_hash"], reply.value["form"]) for reply in replies}  # type: ignore[union-attr]
        if len(prepared) != 1:
            await asyncio.gather(
                *(self.shards.call(i, "abort_reload") for i in range(self.shards.count)), return_exceptions=True
            )
            raise Conflict(f"the shards loaded different bundles from {bundle}: none swapped")
        content_hash, form = prepared.pop()
        previous = await self.model()
        unwrap(await self.shards.call(0, "record_bundle", bundle, content_hash, form))
        swapped = await self._all("commit_reload", content_hash)
        return {
            "bundle": bundle,
            "previous_content_hash": previous["content_hash"],
            "content_hash": content_hash,
            "form": form,
            "documents": sum(s["documents"] for s in swapped),
            "loaded_from": ",".join(sorted({s["loaded_from"] for s in swapped})),
        }

    async def nearest(self, word: str, k: int) -> dict[str, Any]:
        """GET /words/{word}/nearest: from the bundle, which every shard holds; shard 0 answers."""
        return unwrap(await self.shards.call(0, "nearest", word, k))

    async def describe(self) -> list[dict[str, Any]]:
        """Every shard's state; a shard that does not answer is listed as unavailable (GET /cluster, /readyz
        name the missing shard instead of failing whole)."""

        async def one(i: int) -> dict[str, Any]:
            try:
                reply = await self.shards.call(i, "describe")
            except ServiceError as exc:
                return {"shard": i, "status": "unavailable", "error": exc.message}
            return reply.value if reply.status == 200 else {"shard": i, "status": "unavailable", "error": reply.message}

        return list(await asyncio.gather(*(one(i) for i in range(self.shards.count))))


async def retrying(
    call: Any,
    shard: int,
    retry_seconds: float,
    errors: tuple[type[BaseException], ...],
    timeout_seconds: float | None = None,
) -> Reply:
    """`await call()` again while it fails with one of `errors` (a dead or restarting replica), up to
    `retry_seconds`; then a ShardUnavailable naming the shard and the last error. With `timeout_seconds`,
    the whole call (attempts and waits) ends by then: an attempt still pending is cancelled and the
    answer is the same ShardUnavailable (a write given up this way may still have been applied)."""
    started = time.monotonic()
    deadline = started + retry_seconds
    cutoff = None if timeout_seconds is None else started + timeout_seconds
    delay = 0.1
    while True:
        try:
            if cutoff is None:
                return await call()
            return await asyncio.wait_for(call(), max(cutoff - time.monotonic(), 0.0))
        except TimeoutError:
            raise unavailable(shard, timeout_seconds or 0.0, "no answer") from None
        except errors as exc:
            now = time.monotonic()
            if cutoff is not None and now + delay > cutoff:
                raise unavailable(shard, timeout_seconds or 0.0, type(exc).__name__) from None
            if now + delay > deadline:
                raise unavailable(shard, retry_seconds, type(exc).__name__) from None
            await asyncio.sleep(delay)
            delay = min(2 * delay, 2.0)


def unavailable(shard: int, seconds: float, why: str) -> ShardUnavailable:
    """The 503 of a shard that did not answer: it names the shard, so a client knows which part is missing."""
    return ShardUnavailable(
        f"shard {shard} did not answer within {seconds:g}s ({why}); no partial ranking is returned: retry shortly",
        headers={"Retry-After": "5"},
    )
