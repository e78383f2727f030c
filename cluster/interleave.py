"""The router's online comparison: a candidate bundle interleaved with the served one over every shard.

Why the router: a shard sees only its part of a ranking, so the merged first page of each model exists only at
the router, which merges them by team-draft interleaving (service.interleave.merge) and records who placed each
result in its own traffic log (cluster.events), as a single node does (service.interleave.comparisons). The
routes and bodies are the single node's (`/admin/interleave`), so `ssi learn --server` drives a cluster as it
drives `ssi serve`.

The shards hold the candidate beside the served model (cluster.shard_server.ShardServer.search_candidate): a
replica that does not hold it yet (started after the comparison began, or restarted) loads it on its first
interleaved answer. The comparison is recorded in the router's data folder (service.interleave.record), which
every router replica reads again at most once a second, so replicas and a restarted router interleave alike; the
log is shared, so each counts the same impressions.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool

from cluster.fanout import Fanout
from service.errors import Conflict, InvalidInput
from service.events.traffic import Traffic
from service.interleave.comparisons import TALLY_EVERY, count, export_tally, require_events
from service.interleave.record import ComparisonSpec, read_record, remove_record, write_record
from service.metrics import Metrics
from service.schemas import SearchResult
from ssi.interleaving import TEST_FIELDS, SequentialTest, Tally

log = logging.getLogger(__name__)

FOLLOW_EVERY = 1.0  # seconds between two reads of the record on the search path


class RouterComparison:
    """The cluster's comparison (one at most: a cluster serves one collection)."""

    def __init__(self, fanout: Fanout, traffic: Traffic, name: str, folder: Path | None, metrics: Metrics) -> None:
        self.fanout = fanout
        self.metrics = metrics  # the router's /metrics: the single node's ssi_interleave_* gauges
        self.traffic = traffic
        self.name = name
        self.folder = folder  # the router's data folder (None: no log is kept, so no comparison either)
        self.spec: ComparisonSpec | None = None
        self.tally: Tally | None = None
        self._followed_at = 0.0
        self._counted_at = 0.0
        self._lock = asyncio.Lock()  # a start, a stop
        self._rng = random.Random()
        self._follow(force=True)

    # -- the search path ----------------------------------------------------------------------------------

    def pick(self, offset: int, served_hash: str) -> ComparisonSpec | None:
        """The comparison this answer interleaves with, or None: a first page, while the compared model is served,
        undecided, with probability `share`."""
        self._follow()
        spec = self.spec
        if spec is None or offset != 0 or served_hash != spec.served_hash or self.decided:
            return None
        return spec if self._rng.random() < spec.share else None

    def rng(self) -> random.Random:
        return self._rng

    @property
    def decided(self) -> bool:
        return self.tally is not None and self.tally.decision != "running"

    async def count_now_and_then(self) -> None:
        """Count the comparison from the log every TALLY_EVERY seconds, so a decided one stops interleaving."""
        spec = self.spec
        if spec is not None and time.monotonic() - self._counted_at >= TALLY_EVERY:
            self._counted_at = time.monotonic()
            self.tally = await run_in_threadpool(count, self.traffic, self.name, spec)
            export_tally(self.metrics, self.name, self.tally)

    async def candidate_page(self, spec: ComparisonSpec, query: str, k: int) -> SearchResult | None:
        """The candidate's first page of `k` for `query`; None when it failed (the answer is then the served
        model's alone, and the failure logged)."""
        try:
            (page,) = await self.fanout.search_candidate([query], k, asdict(spec))
        except Exception:
            log.exception("the candidate of comparison %s failed on a shard", spec.id)
            return None
        self.metrics.interleaved_searches.labels(self.name).inc()
        return page

    # -- admin ----------------------------------------------------------------------------------------------

    async def start(self, bundle: Path, served_hash: str, share: float, test: dict[str, Any]) -> dict[str, Any]:
        """POST /admin/interleave: every shard loads the candidate, then the comparison is recorded."""
        require_events(self.traffic, self.name)
        try:
            SequentialTest(**{k: test[k] for k in TEST_FIELDS})
        except ValueError as exc:
            raise InvalidInput(f"cannot compare with {bundle}: {exc}") from None
        async with self._lock:
            self._follow(force=True)
            if self.spec is not None:
                raise Conflict(
                    f"collection '{self.name}' already compares {self.spec.bundle} (comparison {self.spec.id}): "
                    "DELETE /admin/interleave first"
                )
            spec = ComparisonSpec(
                id=secrets.token_hex(6), bundle=str(bundle), content_hash="", served_hash=served_hash,
                share=share, started=time.time(), **{k: test[k] for k in TEST_FIELDS},
            )  # fmt: skip
            try:
                loaded = await self.fanout.load_candidate(asdict(spec))
            except Exception:
                await self.fanout.drop_candidate()
                raise
            hashes = {shard["content_hash"] for shard in loaded}
            if len(hashes) != 1:  # the folder changed while the shards read it
                await self.fanout.drop_candidate()
                raise Conflict(f"the shards read different bundles at {bundle}: try again")
            (candidate,) = hashes
            if candidate == served_hash:
                await self.fanout.drop_candidate()
                raise Conflict(
                    f"{bundle} is the served model itself (content hash {served_hash[:12]}): nothing to compare"
                )
            spec = replace(spec, content_hash=candidate)
            assert self.folder is not None  # require_events: a router that keeps a log has its folder
            write_record(self.folder, spec)
            self.spec, self.tally, self._counted_at = spec, None, 0.0
        log.info("interleaving %s with the served model over every shard (comparison %s)", bundle, spec.id)
        return await self.status(served_hash)

    async def status(self, served_hash: str) -> dict[str, Any]:
        """GET /admin/interleave: the comparison and its count from the log now."""
        self._follow(force=True)
        spec = self.spec
        if spec is None:
            return {"collection": self.name, "running": False}
        self.traffic.flush()
        self.tally = counted = await run_in_threadpool(count, self.traffic, self.name, spec)
        self._counted_at = time.monotonic()
        export_tally(self.metrics, self.name, counted)
        return {
            "collection": self.name,
            "running": True,
            "comparison": asdict(spec),
            "serving_compared_model": served_hash == spec.served_hash,
            **({"tally": counted.to_dict(), "decision": counted.decision} if counted is not None else {}),
        }

    async def stop(self, served_hash: str) -> dict[str, Any]:
        """DELETE /admin/interleave: its last count, then no more interleaving; the shards drop the candidate."""
        answer = await self.status(served_hash)
        async with self._lock:
            if self.folder is not None:
                remove_record(self.folder)
            self.spec, self.tally = None, None
            await self.fanout.drop_candidate()
            self.metrics.interleave_running.labels(self.name).set(0)
        return {**answer, "running": False}

    # -- the record -----------------------------------------------------------------------------------------

    def _follow(self, force: bool = False) -> None:
        """Read the record again (at most once a second unless forced): another router replica may have started
        or ended the comparison."""
        now = time.monotonic()
        if self.folder is None or (not force and now - self._followed_at < FOLLOW_EVERY):
            return
        self._followed_at = now
        spec = read_record(self.folder)
        if spec is None or self.spec is None or spec.id != self.spec.id:
            self.spec, self.tally, self._counted_at = spec, None, 0.0
