"""Prometheus metrics: request counts and latency per route, index size, model version, loads, writes.

Each app gets its own registry (not the process-global one), so several apps in one process, as in
the tests, do not collide. Requests are labelled by route template (`/documents/{doc_id}`), never by
raw path, and by method only when it is a standard one (any other is "other"): a client choosing
either freely could create label sets without bound (a 60,000-character method made /metrics 1.2 MB).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# The *_created series double the output and say nothing a scraper needs.
disable_created_metrics()

# The methods labelled by name; uvicorn passes any token a client sends as the method.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"})

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "ssi_http_requests", "HTTP requests answered", ["route", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "ssi_http_request_duration_seconds",
            "Time to answer, by route",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("ssi_http_requests_in_flight", "Requests being answered", registry=r)
        self.rejected = Counter(
            "ssi_overload_rejections", "Requests turned away under load", ["limiter", "status"], registry=r
        )
        self.documents = Gauge("ssi_collection_documents", "Live documents", ["collection"], registry=r)
        self.rows = Gauge(
            "ssi_index_rows", "Rows in the index, including dead ones awaiting compaction", ["collection"], registry=r
        )
        self.model_info = Gauge(
            "ssi_model_info",
            "The served model (value 1)",
            ["collection", "form", "content_hash", "index_type"],
            registry=r,
        )
        self.write_seq = Gauge(
            "ssi_collection_write_seq", "Write sequence the index reflects", ["collection"], registry=r
        )
        self.loads = Counter(
            "ssi_index_loads", "Index loads, by source (cache or computed)", ["collection", "source"], registry=r
        )
        self.embedded = Counter(
            "ssi_documents_embedded",
            "Documents embedded for the index (the form's embed_documents)",
            ["collection"],
            registry=r,
        )
        self.writes = Counter("ssi_document_writes", "Acknowledged document writes", ["collection", "op"], registry=r)
        self.snapshots = Counter("ssi_snapshots_written", "Index snapshots written", ["collection"], registry=r)
        # Durability upkeep (service.collection): disk use, failed snapshots, online compactions.
        self.store_bytes = Gauge(
            "ssi_store_bytes", "Bytes of the document store (SQLite file, WAL)", ["collection"], registry=r
        )
        self.snapshot_bytes = Gauge(
            "ssi_snapshot_bytes", "Bytes of the index snapshots (every cache folder)", ["collection"], registry=r
        )
        self.write_log_entries = Gauge(
            "ssi_write_log_entries",
            "Write-log entries kept (trimmed up to the oldest snapshot)",
            ["collection"],
            registry=r,
        )
        self.snapshot_seq = Gauge(
            "ssi_snapshot_seq", "Write sequence the newest index snapshot reflects", ["collection"], registry=r
        )
        self.snapshot_failures = Counter(
            "ssi_snapshot_failures", "Index snapshots that failed (retried with backoff)", ["collection"], registry=r
        )
        self.compactions = Counter(
            "ssi_index_compactions", "Online compactions (dead rows dropped, index rebuilt)", ["collection"], registry=r
        )
        # The traffic log (service.events): answers named, clicks reported, the file's size.
        self.impressions = Counter(
            "ssi_impressions",
            "Answers logged (recorded) or not (dropped: writer queue full)",
            ["collection", "outcome"],
            registry=r,
        )
        self.clicks = Counter(
            "ssi_clicks", "Clicks reported (recorded, or a repeat counted once)", ["collection", "outcome"], registry=r
        )
        self.traffic_bytes = Gauge(
            "ssi_traffic_log_bytes", "Bytes of the traffic log (SQLite file, WAL)", ["collection"], registry=r
        )
        self.candidates = Histogram(
            "ssi_search_candidates",
            "Documents scored exactly per query",
            ["collection"],
            buckets=(10, 30, 100, 300, 1000, 3000, 10_000, 100_000, 1_000_000),
            registry=r,
        )
        # How many queries shared one search call (a micro-batch of concurrent /search requests, or one
        # /search/batch): the index scans a batch in one pass, so larger ones cost less a query.
        self.search_batch = Histogram(
            "ssi_search_batch_queries",
            "Queries searched together in one call",
            ["collection"],
            buckets=(1, 2, 4, 8, 16, 24, 32, 48, 64),
            registry=r,
        )
        # The open vocabulary (ssi.open_vocab, SSI_OPEN_VOCAB): words the bundle lacks held from the served
        # documents, their postings, and documents' words left out once SSI_OPEN_VOCAB_WORDS was reached. Set only
        # for a collection whose vocabulary is open (no series with it off, or for a bundle that stays closed).
        self.open_words = Gauge(
            "ssi_open_vocab_words", "Open-vocabulary words held (words the bundle lacks)", ["collection"], registry=r
        )
        self.open_postings = Gauge(
            "ssi_open_vocab_postings", "Open-vocabulary postings held (document-word pairs)", ["collection"], registry=r
        )
        self.open_dropped = Gauge(
            "ssi_open_vocab_dropped",
            "New words of documents not indexed because the open vocabulary was full",
            ["collection"],
            registry=r,
        )
        # A running comparison (service.interleave), counted from the shared traffic log every few seconds.
        self.interleave_running = Gauge(
            "ssi_interleave_running",
            "1 while a candidate is interleaved with the served model and undecided",
            ["collection"],
            registry=r,
        )
        self.interleave_impressions = Gauge(
            "ssi_interleave_impressions",
            "Interleaved answers of the running comparison: shown, and won, lost or tied by the candidate",
            ["collection", "outcome"],
            registry=r,
        )
        self.interleave_llr = Gauge(
            "ssi_interleave_log_likelihood_ratio",
            "The sequential test's log-likelihood ratio (promote at its upper bound, drop at its lower one)",
            ["collection"],
            registry=r,
        )
        self.interleaved_searches = Counter(
            "ssi_interleaved_searches", "First pages answered interleaved by this process", ["collection"], registry=r
        )
        self._model_labels: dict[str, tuple[str, ...]] = {}

    def reject(self, limiter: str, status: int) -> None:
        self.rejected.labels(limiter, str(status)).inc()

    def collection_state(
        self,
        name: str,
        *,
        form: str,
        content_hash: str,
        index_type: str,
        documents: int,
        rows: int,
        seq: int,
        open_vocab: tuple[int, int, int] | None = None,
    ) -> None:
        """`open_vocab`: (words, postings, dropped) of an open vocabulary; None (closed) removes its series."""
        labels = (name, form, content_hash, index_type)
        old = self._model_labels.get(name)
        if old is not None and old != labels:
            self.model_info.remove(*old)
        self.model_info.labels(*labels).set(1)
        self._model_labels[name] = labels
        self.documents.labels(name).set(documents)
        self.rows.labels(name).set(rows)
        self.write_seq.labels(name).set(seq)
        gauges = (self.open_words, self.open_postings, self.open_dropped)
        if open_vocab is None:
            for gauge in gauges:
                try:
                    gauge.remove(name)
                except KeyError:  # never set for this collection
                    pass
        else:
            for gauge, value in zip(gauges, open_vocab, strict=True):
                gauge.labels(name).set(value)


def method_label(method: str) -> str:
    return method if method in KNOWN_METHODS else "other"


def _route_of(scope: Scope) -> str:
    route: Any = scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    if path:
        return str(path)
    if scope.get("path", "").startswith("/static/"):
        return "/static"
    return "unmatched"


class MetricsMiddleware:
    """Counts and times every HTTP request (pure ASGI, so streaming and errors are counted too)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.in_flight.dec()
            route = _route_of(scope)
            method = method_label(scope.get("method", ""))
            self.metrics.requests.labels(route, method, str(status)).inc()
            self.metrics.latency.labels(route, method).observe(time.perf_counter() - started)
