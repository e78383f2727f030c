"""The coordinator's round: find the copies that stopped answering, replace a lost primary, bring copies back.

Elasticsearch's master does this for its shards; here one `tick` does it for every shard, every second on a
cluster (cluster.replication.ray_replicas runs it in an actor) and step by step in the tests:

1. ask every copy where its history ends (`Replica.position`, within the failure timeout on a cluster);
2. a primary that did not answer is replaced by the in-sync copy furthest along, under a new term
   (`ShardMap.fail`); a backup that did not answer leaves the in-sync set;
3. every copy that answered is told the shard's view (`Replica.assign`), so a new primary starts taking writes
   and the others refuse the old primary's;
4. the primary brings every answering copy outside the in-sync set up to date and back in (`Replica.recover`).
"""

from __future__ import annotations

import logging
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
    """The replication authority over `shard_map`, reaching the copies through `peers`."""

    def __init__(self, shard_map: ShardMap, peers: Peers) -> None:
        self.map = shard_map
        self.peers = peers

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
            except Unreachable:
                report.unreachable.setdefault(shard, []).append(name)
        ranks = {name: (p.last_term, p.last_seq) for name, p in positions.items() if p.last_seq >= 0}
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
            try:
                self.peers.call(view.primary, "recover", name)
            except Exception as exc:  # noqa: BLE001 — tried again next round; the reason goes to the report
                report.failed_recoveries.setdefault(shard, {})[name] = f"{type(exc).__name__}: {exc}"
                continue
            report.recovered.setdefault(shard, []).append(name)
        self._tell(self.map.view(shard), positions)

    def _tell(self, view: ShardView, positions: dict[str, Any]) -> None:
        for name in positions:
            try:
                self.peers.call(name, "assign", view)
            except Unreachable:
                pass
