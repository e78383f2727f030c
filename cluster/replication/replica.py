"""One copy of a replicated shard: a ShardServer over a folder on its own node's disk, primary or backup.

The protocol (docs/operate/replication.md; Elasticsearch's data replication model, after PacificA):

- **Writes go to the primary**, one at a time. It commits the write to its own store under its term (the term is
  recorded with the write, service.store's `terms`), then sends it to every backup of its in-sync set with the
  sequence number it followed (`prev_seq`) and that write's term. A backup applies it only if the term is not older
  than any it has seen and its own last write is exactly that one (same sequence, same term): otherwise it refuses.
  The primary then asks the coordinator to drop the backups that failed and to confirm its term (`ShardMap.commit`);
  only if the term is still current and at least `min_copies` in-sync copies hold the write does it acknowledge.
  So an acknowledged write is on every in-sync copy, and a primary that was replaced acknowledges nothing.
- **Catch-up** (`recover`, run by the primary for a copy outside the in-sync set): if the copy's last write is one
  the primary also has (same sequence and term, and the primary's log reaches back to it), the primary sends the
  writes after it (service.store.Changes: each changed document as it is now, with its sequence number); otherwise
  a whole copy (cluster.replication.copy) first. The last part is sent under the primary's write lock, and the copy
  joins the in-sync set before the lock is let go: no write can fall between.
- **Reads** are served by in-sync copies only (the router reads the coordinator's map); a copy that is recovering
  or holds no data answers 503, and the router asks another.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cluster.manifest import read_manifest
from cluster.replication.copy import pack, unpack
from cluster.replication.map_store import StaleEpoch
from cluster.replication.shard_map import ShardView, StaleTerm
from cluster.shard_server import Reply, ShardServer, answer
from cluster.shard_settings import shard_settings
from service.errors import Conflict, ServiceError, Unavailable
from service.store import Changes, StoreError
from ssi.records import Document

log = logging.getLogger(__name__)

CURRENT = "current"  # names the data folder in use inside a replica's folder
STATE = "replica.json"  # the highest term this copy has seen, kept across restarts
TERM_HEADER = "X-SSI-Term"  # on a refusal by a copy at a newer term than the sender's


class OutOfStep(Conflict):
    """A backup whose last write is not the one the primary's write follows: it must catch up first."""


class Unreachable(Exception):
    """A peer that did not answer (dead, frozen, cut off) within the failure timeout."""


class Peers(Protocol):
    """How one copy reaches another (in this process for tests, Ray actor calls on a cluster)."""

    def call(self, name: str, method: str, *args: Any) -> Any: ...


class Coordinator(Protocol):
    """The coordinator's calls a primary makes (cluster.replication.shard_map.ShardMap, local or remote)."""

    def commit(self, shard: int, term: int, primary: str, took: Sequence[str]) -> ShardView: ...

    def add(self, shard: int, term: int, primary: str, replica: str) -> ShardView: ...


@dataclass(frozen=True, slots=True)
class Position:
    """Where a copy's history ends: its store's identity, last write and that write's term."""

    store_uuid: str
    last_seq: int
    last_term: int
    log_floor: int
    term: int  # the highest term this copy has seen
    bundle_hash: str = ""  # the bundle it serves: a copy that missed a reload takes the primary's before it joins


@dataclass(frozen=True, slots=True)
class ServerArgs:
    """What a copy passes to its ShardServer besides its folder (cluster.shard_server.ShardServer's arguments)."""

    root: str
    shard: int
    threads: int = 1
    open_vocab: bool = False
    open_vocab_words: int = 0
    statistics: str = "bundle"

    def open(self, folder: Path) -> ShardServer:
        extra: dict[str, Any] = {"open_vocab": self.open_vocab, "statistics": self.statistics}
        if self.open_vocab_words:
            extra["open_vocab_words"] = self.open_vocab_words
        return ShardServer(self.root, self.shard, self.threads, folder=str(folder), **extra)  # type: ignore[arg-type]


LOCK_WAIT = 30.0  # seconds a write, an apply or a catch-up waits for the one before it, then a 503


class Replica:
    """Copy `name` of shard `args.shard`, kept under `home` (its node's disk)."""

    def __init__(
        self,
        name: str,
        args: ServerArgs,
        home: Path,
        peers: Peers,
        coordinator: Coordinator,
        view: ShardView,
        min_copies: int = 2,
        seed: bool = True,
    ) -> None:
        self.name = name
        self.args = args
        self.shard = args.shard
        self.home = home
        self.peers = peers
        self.coordinator = coordinator
        self.min_copies = min_copies
        self.lock = threading.RLock()  # one write, apply or catch-up at a time
        self._fanout = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"{name}-replicate")
        home.mkdir(parents=True, exist_ok=True)
        self.term = self._saved_term()
        self.view = view
        self._adopt(view)
        self.server: ShardServer | None = None
        folder = self._current_folder()
        if folder is None and seed:
            folder = self._seeded()
        if folder is not None:
            self.server = args.open(folder)

    # -- its folder and term ---------------------------------------------------------------------

    def _saved_term(self) -> int:
        try:
            return int(json.loads((self.home / STATE).read_text(encoding="utf-8"))["term"])
        except (OSError, ValueError, KeyError):
            return 0

    def _save_term(self, term: int) -> None:
        partial = self.home / f".{STATE}.partial"
        with partial.open("w", encoding="utf-8") as handle:
            json.dump({"term": term}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.home / STATE)
        self.term = term

    def _current_folder(self) -> Path | None:
        try:
            folder = self.home / (self.home / CURRENT).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return folder if folder.is_dir() else None

    def _make_current(self, folder: Path) -> None:
        partial = self.home / f".{CURRENT}.partial"
        partial.write_text(folder.name, encoding="utf-8")
        os.replace(partial, self.home / CURRENT)

    def _new_folder(self) -> Path:
        return self.home / f"data-{uuid.uuid4().hex[:12]}"

    def _seeded(self) -> Path | None:
        """A first copy from the built index's shard folder, where this node can read it: a history every copy of
        the shard starts from (term 0), which the primary then brings up to date. None where it cannot."""
        root = Path(self.args.root)
        try:
            built = read_manifest(root).shard_dir(root, self.shard)
        except Exception:  # noqa: BLE001 — no index folder on this node: a whole copy from the primary instead
            return None
        folder = self._new_folder()
        shutil.copytree(built, folder)
        self._make_current(folder)
        return folder

    @contextmanager
    def _turn(self) -> Iterator[None]:
        """This copy's lock, waited for at most LOCK_WAIT: a copy whose last step is stuck answers 503 instead of
        holding its callers (the primary's write, the coordinator's round) for ever."""
        if not self.lock.acquire(timeout=LOCK_WAIT):
            raise Unavailable(f"{self.name} is busy with an earlier write or catch-up", headers={"Retry-After": "2"})
        try:
            yield
        finally:
            self.lock.release()

    def _adopt(self, view: ShardView) -> None:
        if view.term > self.term:
            self._save_term(view.term)

    # -- what the coordinator and the router ask -------------------------------------------------

    def position(self) -> Position:
        """Where this copy's history ends; a copy with nothing it can serve now (none yet, or rebuilding its index)
        is at -1, so it is neither promoted nor counted as caught up."""
        server = self.server
        store = None if server is None else server.collection.store
        if server is None or store is None or server.collection.status != "ready":
            return Position("", -1, -1, 0, self.term)
        bundle = server.collection.ready_state().bundle.content_hash
        with store.view() as view:
            return Position(store.uuid, view.last_seq, view.term_at(view.last_seq), view.log_floor, self.term, bundle)

    def fingerprint(self) -> tuple[int, int, str]:
        """(last write, documents, sha256 of every document with its sequence number and fields): equal on copies
        that hold the same documents (the fault benchmark and tests compare them)."""
        store = self.serving().collection.store
        assert store is not None
        digest = hashlib.sha256()
        with store.view() as view:
            for batch in view.iter_batches(1000):
                for doc in batch:
                    fields = json.dumps(doc.fields, sort_keys=True)
                    line = f"{doc.seq}\0{doc.id}\0{doc.title}\0{doc.text}\0{fields}\0"
                    digest.update(line.encode("utf-8", "surrogatepass"))
            return view.last_seq, view.count, digest.hexdigest()

    def assign(self, view: ShardView) -> None:
        """The coordinator's newer view of the shard (a new primary, a changed in-sync set); one from a coordinator
        older than the one this copy last heard from is refused (StaleEpoch)."""
        if view.epoch < self.view.epoch:
            raise StaleEpoch(f"{self.name} has heard from coordinator epoch {self.view.epoch}, not {view.epoch}")
        with self._turn():
            if view.newer_than(self.view):
                self._adopt(view)
                self.view = view

    def serving(self) -> ShardServer:
        server = self.server
        if server is None:
            raise Unavailable(f"{self.name} holds no copy of shard {self.shard} yet: it is catching up")
        return server

    # -- writes: the primary ---------------------------------------------------------------------

    def put(self, docs: Sequence[dict[str, Any]], types: dict[str, str] | None = None) -> Reply:
        """Add or replace documents (`types`: the cluster's types of the fields they use, fixed with them on every
        copy: ShardServer.put)."""
        return answer(lambda: self.write("put", {"docs": list(docs), "types": types}))

    def delete(self, doc_id: str) -> Reply:
        return answer(lambda: self.write("delete", doc_id))

    def write(self, op: str, payload: Any) -> Any:
        """A write acknowledged only once every in-sync copy holds it and the coordinator confirmed the term."""
        with self._turn():
            view = self.view
            if view.primary != self.name or view.term < self.term:
                raise Unavailable(
                    f"{self.name} is not the primary of shard {self.shard} (term {self.term}): ask the coordinator",
                    headers={"Retry-After": "1"},
                )
            server = self.serving()
            store = server.collection.store
            assert store is not None
            prev = store.last_seq
            with store.view() as at:
                prev_term = at.term_at(prev)
            result = self._apply(server, op, payload, view.term)
            took = self._replicate(view, prev, prev_term, op, payload, result)
            try:
                view = self.coordinator.commit(self.shard, view.term, self.name, took)
            except StaleTerm:
                raise Unavailable(
                    f"{self.name} was replaced as primary of shard {self.shard}: the write is not acknowledged",
                    headers={"Retry-After": "1"},
                ) from None
            self.view = view
            if len(view.in_sync) < self.min_copies:
                raise Unavailable(
                    f"shard {self.shard}: only {len(view.in_sync)} of the {self.min_copies} copies a write needs are "
                    "in sync; the write is not acknowledged (retry once a copy has caught up)",
                    headers={"Retry-After": "2"},
                )
            return result

    @staticmethod
    def _apply(server: ShardServer, op: str, payload: Any, term: int) -> Any:
        collection = server.collection
        if op == "put":
            return collection.put([Document(**d) for d in payload["docs"]], term, payload["types"])
        return collection.delete(payload, term)

    def _replicate(self, view: ShardView, prev: int, prev_term: int, op: str, payload: Any, result: Any) -> list[str]:
        """Send the write to every backup at once; the ones that took it (a copy at a newer term: not acknowledged)."""
        backups = view.backups()
        calls = [
            self._fanout.submit(self.peers.call, b, "replicate", view.term, prev, prev_term, op, payload, result)
            for b in backups
        ]
        took: list[str] = []
        for backup, call in zip(backups, calls, strict=True):
            try:
                reply = call.result()
            except Unreachable:
                continue
            if reply.headers and TERM_HEADER in reply.headers:
                raise Unavailable(
                    f"{self.name} was replaced as primary of shard {self.shard} ({backup}: {reply.message}): "
                    "the write is not acknowledged",
                    headers={"Retry-After": "1"},
                )
            if reply.status == 200:
                took.append(backup)
        return took

    # -- writes: a backup ------------------------------------------------------------------------

    def replicate(self, term: int, prev: int, prev_term: int, op: str, payload: Any, result: Any) -> Reply:
        return answer(lambda: self._take(term, prev, prev_term, op, payload, result))

    def _take(self, term: int, prev: int, prev_term: int, op: str, payload: Any, result: Any) -> None:
        with self._turn():
            self._newer(term)
            server = self.serving()
            store = server.collection.store
            assert store is not None
            with store.view() as at:
                here, here_term = at.last_seq, at.term_at(at.last_seq)
            if (here, here_term) != (prev, prev_term):
                raise OutOfStep(f"{self.name} is at write {here} (term {here_term}), the write follows {prev}")
            got = self._apply(server, op, payload, term)
            if got != result:
                raise OutOfStep(f"{self.name} numbered the write {got}, the primary {result}")

    # -- catch-up: run on the primary for a copy outside the in-sync set -------------------------

    def recover(self, joiner: str) -> None:
        """Bring `joiner` up to date and into the in-sync set (module docstring)."""
        server = self.serving()
        position: Position = self.peers.call(joiner, "position")
        if not self._follows(server, position):
            log.info("[%s] sending a whole copy to %s (at write %d)", self.name, joiner, position.last_seq)
            blob = pack(server.settings)
            self._check(self.peers.call(joiner, "install", self.term, blob))
            position = self.peers.call(joiner, "position")
        served = server.collection.ready_state().bundle.content_hash
        if position.bundle_hash != served:  # it missed a reload (or started from an older manifest): this one first
            bundle = str(server.collection.bundle_path)
            self._check(self.peers.call(joiner, "call", "prepare_reload", bundle))
            self._check(self.peers.call(joiner, "call", "commit_reload", served))
        with self._turn():
            view = self.view
            if view.primary != self.name:
                raise Unavailable(f"{self.name} is no longer the primary of shard {self.shard}")
            position = self.peers.call(joiner, "position")
            if not self._follows(server, position):
                raise OutOfStep(f"{joiner} is at write {position.last_seq}, which is not in {self.name}'s history")
            store = server.collection.store
            assert store is not None
            with store.view() as at:
                changes = at.changes_since(position.last_seq)
            self._check(self.peers.call(joiner, "catch_up", view.term, changes))
            self.view = self.coordinator.add(self.shard, view.term, self.name, joiner)

    @staticmethod
    def _check(reply: Reply) -> None:
        if reply.status != 200:
            raise ServiceError(reply.message)

    @staticmethod
    def _follows(server: ShardServer, position: Position) -> bool:
        """Whether the copy at `position` holds a prefix of this copy's history that the write log still covers."""
        store = server.collection.store
        assert store is not None
        with store.view() as at:
            return (
                position.store_uuid == store.uuid
                and at.log_floor <= position.last_seq <= at.last_seq
                and at.term_at(position.last_seq) == position.last_term
            )

    # -- catch-up: on the joining copy -----------------------------------------------------------

    def install(self, term: int, blob: bytes) -> Reply:
        """Serve the whole copy `blob` from now on, in a new folder; the old one is removed after the swap."""

        def work() -> None:
            with self._turn():
                self._newer(term)
                folder = self._new_folder()
                unpack(blob, shard_settings(folder, Path(read_manifest(Path(self.args.root)).bundle)))
                fresh = self.args.open(folder)
                old, self.server = self.server, fresh
                self._make_current(folder)
            if old is not None:
                old.close()
                shutil.rmtree(old.folder, ignore_errors=True)

        return answer(work)

    def catch_up(self, term: int, changes: Changes) -> Reply:
        def work() -> None:
            with self._turn():
                self._newer(term)
                try:
                    self.serving().collection.follow(lambda store: store.apply_changes(changes))
                except StoreError as exc:
                    raise OutOfStep(f"{self.name}: {exc}") from None

        return answer(work)

    def _newer(self, term: int) -> None:
        """Refuse what a replaced primary sends (an older term), saying which term this copy is at; adopt a newer."""
        if term < self.term:
            raise StaleTerm(
                f"{self.name} is at term {self.term}; this was sent under term {term}",
                headers={TERM_HEADER: str(self.term)},
            )
        if term > self.term:
            self._save_term(term)

    # -- reads and the rest, as the shard's ShardServer answers them ---------------------------

    def call(self, method: str, *args: Any) -> Reply:
        """A read (or reload step) on this copy's ShardServer; a copy holding nothing answers 503."""
        try:
            server = self.serving()
        except ServiceError as exc:
            return Reply(status=exc.status_code, message=exc.message, headers=exc.headers)
        return getattr(server, method)(*args)

    def close(self) -> None:
        self._fanout.shutdown(wait=False)
        if self.server is not None:
            self.server.close()
