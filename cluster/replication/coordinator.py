"""The coordinator's round: find the copies that stopped answering, replace a lost primary, bring copies back.

Elasticsearch's master does this for its shards; here one `tick` does it for every shard, every second on a
cluster (cluster.replication.ray_replicas runs it in an actor) and step by step in the tests:

1. ask every copy where its history ends (`Replica.position`, within the failure timeout on a cluster); a coordinator
   that has just started first reconciles the map with what the copies that answered have seen (`ShardMap.reconcile`);
2. a primary that did not answer is replaced by the in-sync copy furthest along, under a new term
   (`ShardMap.fail`); a backup that did not answer leaves the in-sync set;
3. every copy that answered is told the shard's view (`Replica.assign`), so a new primary starts taking writes
   and the others refuse the old primary's;
4. the primary brings every answering copy outside the in-sync set up to date and back in (`Replica.recover`).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cluster.replication.replica import Peers, Position, Unreachable
from cluster.replication.shard_map import ShardMap, ShardView

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    """What one round did, shard by shard (for logs, the fault benchmark and tests)."""

    unreachable: dict[int, list[str]] = field(default_factory=dict)
    promoted: dict[int, str] = field(default_factory=dict)
    recovered: dict[int, list[str]] = field(default_factory=dict)
    failed_recoveries: dict[int, dict[str, str]] = field(default_factory=dict)


class Coordinator:
    """The replication authority over `shard_map`, reaching the copies through `peers`. With `background`, a
    catch-up (which may send a whole copy) runs in a thread of its own and the rounds go on meanwhile, so one slow
    recovery delays no failure's detection; without, each round waits for its catch-ups (the tests' steps)."""

    def __init__(self, shard_map: ShardMap, peers: Peers, background: bool = False) -> None:
        self.map = shard_map
        self.peers = peers
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recover") if background else None
        self._recovering: dict[str, Future[None]] = {}
        self._reconciled: set[int] = set()  # shards whose copies this coordinator has heard from since it started

    def tick(self, recover: bool = True) -> TickReport:
        report = TickReport()
        for shard in range(len(self.map.views)):
            self._tick_shard(shard, report, recover)
        return report

    def _tick_shard(self, shard: int, report: TickReport, recover: bool) -> None:
        view = self.map.view(shard)
        positions: dict[str, Position] = {}
        for name in view.replicas:
            try:
                positions[name] = self.peers.call(name, "position")
            except Exception as exc:  # noqa: BLE001 — dead, frozen, or failing: not answering, for this round
                if not isinstance(exc, Unreachable):
                    log.warning("shard %d: %s answered its position with %r", shard, name, exc)
                report.unreachable.setdefault(shard, []).append(name)
        ranks = {name: (p.last_term, p.last_seq) for name, p in positions.items() if p.last_seq >= 0}
        if shard not in self._reconciled and positions:
            view = self.map.reconcile(shard, {name: p.term for name, p in positions.items()}, ranks)
            self._reconciled.add(shard)
        if view.primary not in positions:
            view = self.map.fail(shard, view.primary, ranks)
            if view.primary in positions:
                report.promoted[shard] = view.primary
                log.warning("shard %d: %s promoted to primary under term %d", shard, view.primary, view.term)
        for name in view.backups():
            if name not in positions:
                view = self.map.fail(shard, name)
        self._tell(view, positions)
        if not recover or view.primary not in positions:
            return
        for name in positions:
            if name in view.in_sync:
                continue
            if self._pool is not None:
                running = self._recovering.get(name)
                if running is None or running.done():
                    self._recovering[name] = self._pool.submit(self._recover, shard, view.primary, name, report)
                continue
            self._recover(shard, view.primary, name, report)
        self._tell(self.map.view(shard), positions)

    def _recover(self, shard: int, primary: str, joiner: str, report: TickReport) -> None:
        try:
            self.peers.call(primary, "recover", joiner)
        except Exception as exc:  # noqa: BLE001 — tried again next round; the reason goes to the report
            report.failed_recoveries.setdefault(shard, {})[joiner] = f"{type(exc).__name__}: {exc}"
            log.warning("shard %d: %s could not bring %s up to date: %r", shard, primary, joiner, exc)
            return
        report.recovered.setdefault(shard, []).append(joiner)
        self._tell(self.map.view(shard), {joiner: None, primary: None})

    def _tell(self, view: ShardView, positions: dict[str, Any]) -> None:
        for name in positions:
            try:
                self.peers.call(name, "assign", view)
            except Exception:  # noqa: BLE001 — not answering, or busy: told again next round
                pass
