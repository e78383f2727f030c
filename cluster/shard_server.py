"""One shard: an ordinary service collection (store, snapshot, exact search) over the shard's folder.

A shard of an adverts index (the manifest's `type`) is an adverts collection with its metadata book
(service.adverts), and matches pages with the single node's code (service.matching.match_pages).

With the open vocabulary (the router's SSI_OPEN_VOCAB), a ranking method answers `ShardAnswers`: a text whose new
words this shard holds (with the collection's statistics, SSI_OPEN_VOCAB_STATISTICS, also any of its bundle words) is
not ranked at once but waits for the cluster's counts of them (cluster.fanout); its lexical rows are then weighed
with the cluster's avg_len from cluster.json (cluster.shard_settings.cluster_avg_len).

The Ray Serve deployment of a shard is this class (cluster.deploy); the router's in-process twin
(cluster.fanout.LocalShards) uses it directly. Every method answers a `Reply` instead of raising: a
service error (404, 503 while loading, 422) crosses the process boundary as its status and message,
and the router raises it again, so a caller sees the single node's error and never a Ray traceback.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cluster.manifest import COLLECTION, ClusterIndexError, read_manifest, write_manifest
from cluster.shard_settings import cluster_avg_len, shard_settings
from service.bounds import cut_long_text
from service.collection import Collection, FieldRequest
from service.errors import Conflict, InvalidInput, ServiceError
from service.interleave.challenger import Challenger, build_state
from service.interleave.record import ComparisonSpec
from service.matching import match_pages
from service.metrics import Metrics
from service.model_state import ModelState
from service.routes.match import page_match_out, warm_adverts
from service.routes.model import model_response
from service.routes.search import scan_chars, to_result, to_results
from service.routes.words import nearest_response
from service.settings import CollectionSpec
from service.store import DocumentStore
from service.threads import release_free_memory
from ssi.bundle import BundleError
from ssi.open_vocab import DEFAULT_MAX_WORDS, OpenCounts, Statistics
from ssi.records import Document

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Reply:
    """A shard's answer: `value`, or the service error it raised (`status`, `message`)."""

    value: Any = None
    status: int = 200
    message: str = ""
    headers: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class FieldAsk:
    """What a search through the router asks of the documents' fields (service.fields.http.FieldOptions): its
    filter, facets and fields with each hit, and the cluster's field types (every shard's: a shard parses the filter
    with them, so a field no document of this shard has yet matches nothing here instead of being unknown)."""

    filter: Any = None
    facets: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    types: dict[str, str] = field(default_factory=dict)
    facet_size: int = 10  # values listed per facet (the router's SSI_FACET_SIZE: it merges as many)


@dataclass(frozen=True, slots=True)
class ShardAnswers:
    """A shard's answers to a batch of texts (queries, pages): `results[i]` text i's exact top k here as a dict, or
    None where it waits for the cluster's counts of its words; `needs[i]` what it needs from the other shards
    (ModelState.shard_counts: None, nothing; else its own counts of the text's words held here, to be summed, and
    its answer is final only if no shard holds one); `n_live` the live documents here."""

    results: list[dict[str, Any] | None]
    needs: list[OpenCounts | None]
    n_live: int


def waits(need: OpenCounts | None) -> bool:
    """Whether a text's ranking here waits for the cluster's counts: some word it is weighed by is held here."""
    return need is not None and bool(need.df or need.known)


def answer(work: Callable[[], T]) -> Reply:
    try:
        return Reply(value=work())
    except ServiceError as exc:
        return Reply(status=exc.status_code, message=exc.message, headers=exc.headers)


class ShardServer:
    """Shard `shard` of the sharded index at `root`, loaded from the snapshot the index job wrote."""

    def __init__(
        self,
        root: str,
        shard: int,
        threads: int = 1,
        open_vocab: bool = False,
        open_vocab_words: int = DEFAULT_MAX_WORDS,
        statistics: Statistics = "bundle",
        folder: str | None = None,
    ) -> None:
        """`folder`: the data folder to serve instead of the index's own shard folder (a replica's copy on its node's
        disk, cluster.replication); it holds the shard's store and snapshots, the index folder its manifest."""
        index = Path(root)
        manifest = read_manifest(index)
        if not 0 <= shard < manifest.shards:
            raise ClusterIndexError(f"{index}: has shards 0…{manifest.shards - 1}, not {shard}")
        self._closed = False
        self.root = index
        self.shard = shard
        self._prepared: ModelState | None = None  # a reload's new state, built and waiting for its commit
        self._challenger: Challenger | None = None  # a comparison's candidate (cluster.interleave), when asked for
        self._candidate_lock = threading.Lock()
        self.shards = manifest.shards
        bundle = Path(manifest.bundle)
        folder = index / manifest.entries[shard].folder if folder is None else Path(folder)
        require_store(folder, bundle, shard)
        self.folder = folder
        self.settings = shard_settings(
            folder,
            bundle,
            manifest.index_type,  # type: ignore[arg-type]
            threads,
            open_vocab,
            open_vocab_words,
            statistics,
            cluster_avg_len(manifest, statistics if open_vocab else "bundle"),  # one avg_len for every shard
        )
        spec = CollectionSpec(bundle=bundle, type=manifest.type)
        self.collection = Collection(COLLECTION, spec, self.settings, Metrics())
        self.collection.load()
        state = self.collection.ready_state()
        if state.bundle.content_hash != manifest.bundle_hash:
            self.collection.close()
            raise ClusterIndexError(
                f"{index}: built with bundle {manifest.bundle_hash[:12]}, "
                f"but {bundle} is now {state.bundle.content_hash[:12]}"
            )
        warm_adverts(self.collection)  # as a worker of `ssi serve` does: not inside the first /match

    # -- reads ---------------------------------------------------------------------------------

    def search(
        self,
        queries: Sequence[str],
        want: int,
        ef_search: int | None = None,
        nprobe: int | None = None,
        asked: FieldAsk | None = None,
        counts: Sequence[OpenCounts] | None = None,
    ) -> Reply:
        """Each query's exact top `want` in this shard, as service.schemas.SearchResult dicts (snippets included), in
        `ShardAnswers`; `asked`: what the search asks of the fields (a filter, facets, fields with each hit): then
        each result also holds this shard's `matched` and its facets, `size` values each (FieldAsk); `counts`: the
        cluster's counts of each query's new words (cluster.fanout's second round)."""

        def rank(texts: list[str], given: Sequence[OpenCounts] | None) -> list[dict[str, Any]]:
            if asked is not None:
                return self._search_fields(texts, want, ef_search, nprobe, asked, given)
            results = self.collection.search(texts, want, 0, ef_search=ef_search, nprobe=nprobe, open_counts=given)
            scan = scan_chars(self.settings, sum(len(r.doc_ids) for r in results))
            return [r.model_dump() for r in to_results(self.collection, self.settings, results, texts, scan)]

        def work() -> ShardAnswers:
            self.collection.require_type("documents", "search")
            return self._answers(list(queries), counts, rank)

        return answer(work)

    def _search_fields(
        self,
        texts: list[str],
        want: int,
        ef_search: int | None,
        nprobe: int | None,
        asked: FieldAsk,
        given: Sequence[OpenCounts] | None,
    ) -> list[dict[str, Any]]:
        """`search` with a filter, facets or fields: the shard's exact top `want` among its matching documents
        (Collection.search_where), each result with the count of them and the facets over them."""
        request = FieldRequest(asked.filter, list(asked.facets), asked.types, asked.facet_size)
        found, counted = self.collection.search_where(
            texts, want, 0, request, ef_search=ef_search, nprobe=nprobe, open_counts=given
        )
        scan = scan_chars(self.settings, sum(len(r.doc_ids) for r in found))
        results = to_results(self.collection, self.settings, found, texts, scan, fields=asked.fields)
        facets = {name: {"values": facet.values, "other": facet.other} for name, facet in counted.facets.items()}
        return [r.model_dump() | {"matched": counted.matched, "facets": facets} for r in results]

    def count_values(self, asked: FieldAsk, wanted: dict[str, list[Any] | None]) -> Reply:
        """The exact count of each value of `wanted` (field → values; None: every value) among this shard's
        documents matching `asked.filter`: the router's second and third rounds of facets (cluster.facet_merge)."""
        request = FieldRequest(filter=asked.filter, types=asked.types)
        return answer(lambda: self.collection.count_values(request, wanted))

    def field_types(self) -> Reply:
        """This shard's field types (service.fields), as its store fixed them: the router's collection-wide schema
        is every shard's (cluster.field_schema)."""
        return answer(self.collection.field_types)

    def page_text(self, doc_id: str) -> Reply:
        """The stored document as a long query ("more like this"), cut as the single node cuts it."""
        return answer(
            lambda: cut_long_text(self.collection.get(doc_id).as_document().full_text, self.settings.max_page_chars)
        )

    def search_page(
        self,
        texts: Sequence[str],
        want: int,
        exclude: str,
        asked: FieldAsk | None = None,
        counts: Sequence[OpenCounts] | None = None,
    ) -> Reply:
        """The exact top `want` for a long text (its heaviest words; `texts` holds it alone), leaving out document
        `exclude`, among the documents matching `asked.filter` when there is one, in `ShardAnswers` (`counts` as for
        `search`)."""

        def rank(page: list[str], given: Sequence[OpenCounts] | None) -> list[dict[str, Any]]:
            state = self.collection.ready_state()
            pool = self.settings.candidate_pool if state.config.index_type == "hnsw" else self.settings.scan_pool
            max_words = self.settings.max_page_words
            where = None
            if asked is not None and asked.filter is not None:
                where = self.collection.where(state, asked.filter, known=asked.types)
            found = state.search(
                page,
                want,
                pool=pool,
                exclude=[exclude] * len(page),
                max_words=max_words,
                open_counts=given,
                where=where,
            )
            return [to_result(self.collection, self.settings, result, None).model_dump() for result in found]

        def work() -> ShardAnswers:
            self.collection.require_type("documents", "/similar")
            return self._answers(list(texts), counts, rank)

        return answer(work)

    def match(
        self, pages: Sequence[str], want: int, filter: dict[str, Any], counts: Sequence[OpenCounts] | None = None
    ) -> Reply:
        """Each page's exact top `want` adverts matching `filter` (service.adverts.match_filter) in this shard, as
        service.advert_schemas.PageMatchOut dicts (scores, their split and the words that made each match: all
        depend on the page and the advert, and on the counts of its new words), in `ShardAnswers` (`counts` as for
        `search`)."""

        def rank(texts: list[str], given: Sequence[OpenCounts] | None) -> list[dict[str, Any]]:
            matches = match_pages(self.collection, self.settings, texts, want, filter, given)
            return [page_match_out(m).model_dump() for m in matches]

        def work() -> ShardAnswers:
            self.collection.require_type("adverts", "/match")
            # cut as match_pages cuts them, so that the new words counted are those it ranks with
            texts = [cut_long_text(page, self.settings.max_page_chars) for page in pages]
            return self._answers(texts, counts, rank)

        return answer(work)

    # -- a comparison's candidate (cluster.interleave) -------------------------------------------

    def search_candidate(
        self, queries: Sequence[str], want: int, spec: dict[str, Any], counts: Sequence[OpenCounts] | None = None
    ) -> Reply:
        """As `search`, ranked by the comparison's candidate (`spec`: its ComparisonSpec as a dict). A replica that
        does not hold it (started after the comparison, or restarted) loads it first."""

        def work() -> ShardAnswers:
            self.collection.require_type("documents", "search")
            challenger = self._challenger_for(spec)

            def rank(texts: list[str], given: Sequence[OpenCounts] | None) -> list[dict[str, Any]]:
                results = challenger.search(texts, want, open_counts=given)
                scan = scan_chars(self.settings, sum(len(r.doc_ids) for r in results))
                return [r.model_dump() for r in to_results(self.collection, self.settings, results, texts, scan)]

            return self._answers(list(queries), counts, rank, challenger.current())

        return answer(work)

    def load_candidate(self, spec: dict[str, Any]) -> Reply:
        """Load the comparison's candidate beside the served model; its content hash and form."""

        def work() -> dict[str, str]:
            self.collection.require_type("documents", "/admin/interleave")
            bundle = self._challenger_for(spec).state.bundle
            return {"content_hash": bundle.content_hash, "form": bundle.manifest.form}

        return answer(work)

    def drop_candidate(self) -> Reply:
        """Forget the candidate (the comparison ended); whether one was held."""

        def work() -> bool:
            with self._candidate_lock:
                held, self._challenger = self._challenger, None
            if held is not None:
                release_free_memory()  # the candidate's index, as a reload gives back the old one
            return held is not None

        return answer(work)

    def _challenger_for(self, spec: dict[str, Any]) -> Challenger:
        with self._candidate_lock:
            held = self._challenger
            if held is not None and held.spec.id == spec.get("id"):
                return held
            try:
                comparison = ComparisonSpec(**spec)
                state = build_state(self.collection, Path(comparison.bundle), comparison.content_hash or None)
            except (BundleError, ValueError, TypeError, OSError, RuntimeError) as exc:
                raise InvalidInput(f"cannot compare with {spec.get('bundle')}: {exc}") from None
            self._challenger = Challenger(self.collection, comparison, state)
            return self._challenger

    def _answers(
        self,
        texts: list[str],
        counts: Sequence[OpenCounts] | None,
        rank: Callable[[list[str], Sequence[OpenCounts] | None], list[dict[str, Any]]],
        state: ModelState | None = None,
    ) -> ShardAnswers:
        """`rank`'s answers for `texts`: with `counts` (the second round), all of them ranked with those counts;
        without, those needing no other shard's counts ranked with this shard's own, the others left waiting.
        `state`: the model that ranks (default: the served one)."""
        state = state if state is not None else self.collection.ready_state()
        if counts is not None:
            return ShardAnswers(rank(texts, counts), [None] * len(texts), state.table.n_live)
        needs, n_live = state.shard_counts(texts)
        ready = [i for i, need in enumerate(needs) if not waits(need)]  # ranked with its own counts (none held here)
        results: list[dict[str, Any] | None] = [None] * len(texts)
        if ready:
            for i, result in zip(ready, rank([texts[i] for i in ready], None), strict=True):
                results[i] = result
        return ShardAnswers(results, needs, n_live)

    def get(self, doc_id: str) -> Reply:
        def work() -> dict[str, Any]:
            doc = self.collection.get(doc_id)
            return {"id": doc.id, "title": doc.title, "text": doc.text, "fields": doc.fields or {}, "seq": doc.seq}

        return answer(work)

    def model(self) -> Reply:
        """GET /model of this shard (service.routes.model): every shard serves the same bundle."""
        return answer(lambda: model_response(self.collection).model_dump())

    def nearest(self, word: str, k: int) -> Reply:
        """GET /words/{word}/nearest from the bundle (service.routes.words), the same on every shard."""
        return answer(lambda: nearest_response(self.collection, word, k).model_dump())

    # -- writes --------------------------------------------------------------------------------

    def put(self, docs: Sequence[dict[str, Any]], types: dict[str, str] | None = None) -> Reply:
        """Add or replace documents this shard owns: durable in its store when this returns; `types`: the cluster's
        types of the fields they use, fixed here first (cluster.field_schema: every shard types a name alike)."""
        return answer(lambda: self.collection.put([Document(**d) for d in docs], types=types))

    def delete(self, doc_id: str) -> Reply:
        return answer(lambda: self.collection.delete(doc_id))

    # -- reload (every shard swaps or none: cluster.fanout.Fanout.reload) --------------------------

    def prepare_reload(self, bundle: str) -> Reply:
        """Build this shard's state for the bundle at `bundle` beside the served one; its content hash and form."""

        def work() -> dict[str, str]:
            self._prepared = None
            self._prepared = self.collection.prepare_reload(Path(bundle))
            manifest = self._prepared.bundle.manifest
            return {"content_hash": manifest.content_hash, "form": manifest.form}

        return answer(work)

    def record_bundle(self, bundle: str, content_hash: str, form: str) -> Reply:
        """Write the new bundle into the index's manifest, so that a replica started again loads it."""

        def work() -> None:
            manifest = read_manifest(self.root)
            update = {"bundle": bundle, "bundle_hash": content_hash, "form": form}
            write_manifest(self.root, manifest.model_copy(update=update))

        return answer(work)

    def commit_reload(self, content_hash: str) -> Reply:
        """Serve the state `prepare_reload` built (brought up to the writes made since)."""

        def work() -> dict[str, Any]:
            prepared, self._prepared = self._prepared, None
            if prepared is None or prepared.bundle.content_hash != content_hash:
                raise Conflict(f"shard {self.shard}: no reload to bundle {content_hash[:12]} was prepared here")
            state = self.collection.commit_reload(prepared, prepared.bundle.path)
            return {"documents": state.table.n_live, "loaded_from": state.report.source}

        return answer(work)

    def abort_reload(self) -> Reply:
        """Drop a prepared reload (another shard could not prepare it)."""
        self._prepared = None
        return Reply()

    # -- upkeep --------------------------------------------------------------------------------

    def describe(self) -> Reply:
        def work() -> dict[str, Any]:
            info = self.collection.describe()
            info.update(shard=self.shard, pid=os.getpid(), replica=replica_name())
            return info

        return answer(work)

    def check_health(self) -> None:
        """Ray Serve's health check: a shard whose collection failed is restarted."""
        if self.collection.status == "failed":
            raise RuntimeError(f"shard {self.shard}: {self.collection.error}")

    def close(self) -> None:
        """Save what is unsaved and close the store (the write log has it all anyway); once."""
        if not self._closed:
            self._closed = True
            self.collection.close()

    def __del__(self) -> None:  # Serve drops a replica's object on a graceful stop
        try:
            self.close()
        except Exception:  # noqa: BLE001 — nothing to report to at interpreter exit
            pass


def require_store(folder: Path, bundle: Path, shard: int) -> None:
    """Refuse a shard whose store is not there: opened anyway, it would come back empty and be searched as if
    it held nothing (an index volume not mounted on the node Serve restarted the replica on leaves an empty
    mount point), hiding every document it held instead of a 503 for the shard until the folder is back."""
    store = DocumentStore.path_for(shard_settings(folder, bundle).store_dir, COLLECTION)
    if not store.is_file():
        raise ClusterIndexError(
            f"shard {shard}: its store {store} is missing (is the index volume mounted on this node?): "
            "not serving it empty"
        )


def replica_name() -> str | None:
    """This Ray actor's name (a Serve replica's), so a test can find and kill it; None outside Ray."""
    ray = sys.modules.get("ray")  # never imported here: only present when running on Ray
    try:
        if ray is not None and ray.is_initialized():
            return ray.get_runtime_context().get_actor_name()
    except Exception:  # noqa: BLE001 — not inside an actor
        return None
    return None
