"""Copies of a shard reached in this process (tests, and the in-process twin of the Ray transport): a call to a
copy marked `down` raises Unreachable, as a dead or frozen one does on a cluster after the failure timeout."""

from __future__ import annotations

from typing import Any

from cluster.replication.replica import Replica, Unreachable


class LocalPeers:
    def __init__(self) -> None:
        self.replicas: dict[str, Replica] = {}
        self.down: set[str] = set()

    def add(self, replica: Replica) -> Replica:
        self.replicas[replica.name] = replica
        self.down.discard(replica.name)
        return replica

    def call(self, name: str, method: str, *args: Any) -> Any:
        replica = self.replicas.get(name)
        if replica is None or name in self.down:
            raise Unreachable(f"{name} did not answer")
        return getattr(replica, method)(*args)
