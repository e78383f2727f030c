"""A server's running comparisons, one per collection at most: which answers interleave, and how each stands.

A watcher thread looks at each collection's record (service.interleave.record) once a second: it builds the
candidate's state when a comparison starts (in every worker of a group: each holds both models), drops it when
the record goes, and counts the comparison from the traffic log every TALLY_EVERY seconds, so that a comparison
the test has decided stops interleaving without anyone asking, and /metrics shows where it stands. The log is
shared by a group's workers, so every worker counts the same impressions.

On a search's path (`pick`, in the search batch's leader) there is a dict lookup and a coin per answer: an
answer interleaves when a comparison is loaded in this worker, still undecided, its served model is the one
served now, the answer is a first page, and its coin falls within the comparison's share. The choice is made
inside the batch, not before it, so that answers with and without the candidate still share one search of
the served index (a batch split in two by a key scans the index twice: throughput at 32 clients fell by half).
"""

from __future__ import annotations

import logging
import random
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from service.catalog import Catalog
from service.collection import Collection
from service.errors import Conflict, Forbidden, InvalidInput
from service.events.traffic import Traffic
from service.interleave.challenger import Challenger, build_state
from service.interleave.record import ComparisonSpec, read_record, remove_record, write_record
from service.metrics import Metrics
from service.threads import release_free_memory
from ssi.bundle import BundleError
from ssi.interleaving import TEST_FIELDS, SequentialTest, Tally, tally
from ssi.traffic import open_read_only, read_interleaved

log = logging.getLogger(__name__)

CHECK_EVERY = 1.0  # seconds between two looks at the records
TALLY_EVERY = 2.0  # seconds between two counts of a comparison from the log


@dataclass
class Live:
    """A comparison as this worker holds it."""

    spec: ComparisonSpec
    challenger: Challenger | None = None  # None until loaded, or when it could not be
    error: str | None = None
    tally: Tally | None = None

    @property
    def decided(self) -> bool:
        return self.tally is not None and self.tally.decision != "running"


class Comparisons:
    def __init__(self, catalog: Catalog, traffic: Traffic, metrics: Metrics) -> None:
        self.catalog = catalog
        self.traffic = traffic
        self.metrics = metrics
        self._live: dict[str, Live] = {}
        self._lock = threading.Lock()  # loads and drops, the watcher's and an admin request's
        # its own stream: with SSI_RANDOM_SEED, not the explore shuffle's (service.events.traffic)
        self._rng = random.Random(None if traffic.settings.random_seed is None else traffic.settings.random_seed + 1)
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def watch(self) -> None:
        """Start following the records (the app's lifespan; once)."""
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="interleave-watcher", daemon=True)
            self._watcher.start()

    # -- the search path ----------------------------------------------------------------------------------

    def pick(self, collection: Collection, offset: int, count: int) -> tuple[Live | None, list[int]]:
        """The comparison to interleave with, and which of a batch's `count` answers it takes (module docstring)."""
        live = self._live.get(collection.name)
        if live is None or offset != 0 or live.challenger is None or live.decided:
            return None, []
        state = collection.state
        if state is None or state.bundle.content_hash != live.spec.served_hash:
            return None, []
        share, draw = live.spec.share, self._rng.random
        return live, [i for i in range(count) if draw() < share]

    def rng(self) -> random.Random:
        """The team-draft coin (random.Random's draws are safe from several threads under the GIL)."""
        return self._rng

    # -- admin ------------------------------------------------------------------------------------------------

    def start(self, collection: Collection, bundle: str | None, **test: Any) -> dict[str, Any]:
        """Load the candidate here, then publish the comparison for the other workers (POST /admin/interleave)."""
        if bundle is None:
            raise InvalidInput("name the candidate's bundle folder: 'bundle'")
        require_events(self.traffic, collection)
        path = collection.resolve_bundle(bundle)
        served = collection.ready_state().bundle.content_hash
        folder = _folder(collection)
        with self._lock:
            running = read_record(folder)
            if running is not None:
                raise Conflict(
                    f"collection '{collection.name}' already compares {running.bundle} (comparison {running.id}): "
                    "DELETE /admin/interleave first"
                )
            try:
                SequentialTest(**{k: test[k] for k in TEST_FIELDS})
                state = build_state(collection, path)
            except (BundleError, ValueError, OSError) as exc:
                raise InvalidInput(f"cannot compare with {bundle}: {exc}") from None
            if state.bundle.content_hash == served:
                # well formed, but moot in the server's state (what it serves): 409, as a second start is
                raise Conflict(f"{bundle} is the served model itself (content hash {served[:12]}): nothing to compare")
            spec = ComparisonSpec(
                id=secrets.token_hex(6), bundle=str(path), content_hash=state.bundle.content_hash,
                served_hash=served, started=time.time(), **test,
            )  # fmt: skip
            self._live[collection.name] = Live(spec, Challenger(collection, spec, state))
            write_record(folder, spec)
        log.info("[%s] interleaving %s with the served model (comparison %s)", collection.name, path, spec.id)
        return self.status(collection)

    def stop(self, collection: Collection) -> dict[str, Any]:
        """End the comparison (DELETE /admin/interleave): its last count, then no more interleaving anywhere."""
        answer = self.status(collection)
        with self._lock:
            remove_record(_folder(collection))
            self._drop(collection)
        return {**answer, "running": False}

    def status(self, collection: Collection) -> dict[str, Any]:
        """How the collection's comparison stands, counted from the log now (GET /admin/interleave)."""
        spec = read_record(_folder(collection))
        if spec is None:
            return {"collection": collection.name, "running": False}
        self.traffic.flush()
        live = self._live.get(collection.name)
        counted = self._count(collection, spec)
        state = collection.state
        return {
            "collection": collection.name,
            "running": True,
            "comparison": asdict(spec),
            "loaded": live is not None and live.challenger is not None and live.spec.id == spec.id,
            "error": live.error if live is not None else None,
            "serving_compared_model": state is not None and state.bundle.content_hash == spec.served_hash,
            **({"tally": counted.to_dict(), "decision": counted.decision} if counted is not None else {}),
        }

    # -- the watcher ------------------------------------------------------------------------------------------

    def _watch(self) -> None:
        last_tally: dict[str, float] = {}
        while not self._stop.wait(CHECK_EVERY):
            for collection in list(self.catalog.collections.values()):
                if collection.status != "ready" or collection.type != "documents":
                    continue
                try:
                    self._follow(collection)
                    live = self._live.get(collection.name)
                    now = time.monotonic()
                    if live is not None and now - last_tally.get(collection.name, 0.0) >= TALLY_EVERY:
                        last_tally[collection.name] = now
                        live.tally = self._count(collection, live.spec)
                        self._export(collection.name, live)
                except Exception:  # a bad bundle, a locked log: logged, tried again on the next look
                    log.exception("[%s] the comparison could not be followed", collection.name)

    def _follow(self, collection: Collection) -> None:
        """Load the comparison the record names, or drop the one it no longer names."""
        spec = read_record(_folder(collection))
        live = self._live.get(collection.name)
        if spec is None:
            if live is not None:
                with self._lock:
                    self._drop(collection)
            return
        if live is not None and live.spec.id == spec.id:
            return
        with self._lock:
            live = Live(spec)
            try:
                live.challenger = Challenger(
                    collection, spec, build_state(collection, Path(spec.bundle), spec.content_hash)
                )
            except (BundleError, ValueError, OSError, RuntimeError) as exc:
                live.error = f"cannot load the candidate {spec.bundle}: {exc}"
                log.error("[%s] %s", collection.name, live.error)
            self._live[collection.name] = live

    def _drop(self, collection: Collection) -> None:
        if self._live.pop(collection.name, None) is not None:
            release_free_memory()  # the candidate's index, as a reload gives back the old one
            log.info("[%s] comparison ended: the candidate is unloaded", collection.name)
            self.metrics.interleave_running.labels(collection.name).set(0)

    def _count(self, collection: Collection, spec: ComparisonSpec) -> Tally | None:
        return count(self.traffic, collection.name, spec)

    def _export(self, name: str, live: Live) -> None:
        export_tally(self.metrics, name, live.tally)

    def close(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        self._live.clear()


def export_tally(metrics: Metrics, name: str, counted: Tally | None) -> None:
    """A running comparison's gauges on /metrics, from its last count (running until the test decides)."""
    metrics.interleave_running.labels(name).set(1 if counted is None or counted.decision == "running" else 0)
    if counted is None:
        return
    for outcome, value in (
        ("impressions", counted.impressions),
        ("won", counted.wins),
        ("lost", counted.losses),
        ("tied", counted.ties),
    ):
        metrics.interleave_impressions.labels(name, outcome).set(value)
    metrics.interleave_llr.labels(name).set(counted.llr)


def count(traffic: Traffic, name: str, spec: ComparisonSpec) -> Tally | None:
    """The comparison counted from the traffic log of collection `name` (None when the server records none)."""
    store = traffic.store(name)
    if store is None:
        return None
    conn = open_read_only(store.path)
    try:
        return tally(read_interleaved(conn, spec.served_hash, spec.content_hash, spec.started), spec.test)
    finally:
        conn.close()


def _folder(collection: Collection) -> Path:
    return collection.settings.index_dir / collection.name


def require_events(traffic: Traffic, collection: Collection | str) -> None:
    """A comparison counts clicks: refuse one where this server records no traffic."""
    name = collection if isinstance(collection, str) else collection.name
    if not traffic.records(name):
        raise Forbidden(
            f"collection '{name}' records no traffic (SSI_EVENTS=false, or its own events=false): "
            "interleaving has no clicks to count"
        )
