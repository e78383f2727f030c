"""Disk stays bounded under updates (online compaction, write-log trim, old snapshots removed), compacted and
damaged snapshots are handled once, and a failing snapshot backs off without holding up writes."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from service_testing import API_KEY, Oracle, ThreadServer, assert_same_ranking

from service.collection import Collection
from service.metrics import Metrics
from service.settings import CollectionSpec, Settings
from service.snapshot import disk_bytes, snapshots
from ssi.records import Document

KEY = {"X-API-Key": API_KEY}


def log_entries(store: Path) -> int:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM log").fetchone()[0])


def gauge(metrics_text: str, name: str) -> float:
    for line in metrics_text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_disk_stays_bounded_under_replacements(small_world: dict, tmp_path: Path) -> None:
    docs: list[Document] = list(small_world["docs"])
    n = len(docs)
    cache = tmp_path / "cache"
    settings = dict(
        bundle=small_world["bundle"],
        corpus=small_world["corpus"],
        cache_dir=cache,
        api_key=API_KEY,
        snapshot_every_writes=50,
        snapshot_interval=0.2,
        compact_dead_fraction=0.3,
    )
    store = cache / "stores" / "documents" / "documents.sqlite"
    sizes: list[int] = []
    on_disk: list[int] = []
    with ThreadServer(**settings) as server:
        client = server.client
        for round_number in range(12):
            batch = [
                {"id": d.id, "title": f"v{round_number}", "text": docs[(i + round_number) % n].text}
                for i, d in enumerate(docs[:100])
            ]
            assert client.post("/documents", json={"documents": batch}, headers=KEY).status_code == 200
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # wait for the snapshot of this round (and its upkeep)
                metrics = client.get("/metrics").text
                if gauge(metrics, "ssi_collection_write_seq") == gauge(metrics, "ssi_snapshot_seq"):
                    break
                time.sleep(0.05)
            # Disk use as the server reports it after each snapshot, and as found on disk.
            sizes.append(int(gauge(metrics, "ssi_store_bytes") + gauge(metrics, "ssi_snapshot_bytes")))
            on_disk.append(disk_bytes(cache))
        index = client.get("/model").json()["index"]
        assert index["documents"] == n
        assert index["rows"] <= n * 1.3 + 100, f"dead rows pile up: {index}"
        # The write log is trimmed up to the snapshots, and only the newest snapshots are kept.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and log_entries(store) > 300:
            time.sleep(0.1)
        assert log_entries(store) <= 300, f"write log holds {log_entries(store)} entries after 1,200 writes"
        # The served ranking is still exact after the online compactions.
        current = [Document(d.id, "v11", docs[(i + 11) % n].text) for i, d in enumerate(docs[:100])] + docs[100:]
        oracle = Oracle(small_world["bundle"], current)
        for doc in current[95:105]:
            query = doc.text[:60]
            assert_same_ranking(
                client.post("/search", json={"query": query, "k": 10}).json()["hits"], oracle, query, 10
            )
    assert sizes[-1] < 1.3 * sizes[3], f"disk grows with updates: {sizes}"
    assert max(on_disk[3:]) < 2 * min(on_disk[3:]), f"disk grows with updates: {on_disk}"
    folders = [f for f in (cache / "index" / "documents").iterdir() if f.is_dir()]
    assert len(folders) == 1 and len(list(snapshots(folders[0]))) <= 2, "superseded snapshots stay on disk"


def collection_for(settings: Settings) -> Collection:
    assert settings.bundle is not None
    spec = CollectionSpec(bundle=settings.bundle, corpus=settings.corpus)
    collection = Collection("documents", spec, settings, Metrics())
    collection.load()
    return collection


def test_a_compacted_snapshot_is_kept_and_a_damaged_one_removed(
    small_world: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    docs: list[Document] = list(small_world["docs"])
    settings = Settings(
        bundle=small_world["bundle"],
        corpus=small_world["corpus"],
        cache_dir=tmp_path / "cache",
        insecure_writes=True,
        compact_dead_fraction=0.3,
    )
    first = collection_for(settings)
    first.put([Document(d.id, "again", d.text) for d in docs[:200]])  # half of the rows dead
    first.close()
    for _ in range(2):  # each start after the first finds the compacted snapshot and keeps it
        again = collection_for(settings)
        state = again.ready_state()
        assert state.table.n_dead <= 0.3 * state.table.rows
        report = state.report
        again.close()
    assert report.source == "cache" and not report.compacted, "the compacted snapshot was not kept"

    # Two snapshots at two write sequences; the newer one damaged.
    second = collection_for(settings)
    second.put([Document("late", "Late", docs[1].text)])
    second.close()
    folder = next(f for f in (tmp_path / "cache" / "index" / "documents").iterdir() if f.is_dir())
    newest, older = list(snapshots(folder))[:2]
    (newest / "embeddings.npy").write_bytes(b"\0" * 64)
    with caplog.at_level(logging.WARNING):
        third = collection_for(settings)
    assert third.ready_state().report.snapshot == str(older)
    assert third.ready_state().table.n_live == len(docs) + 1
    third.close()
    assert any("removed" in r.getMessage() and newest.name in r.getMessage() for r in caplog.records)
    # What is on disk now is readable: the damaged files went, a good snapshot of that write took their place.
    for path in snapshots(folder):
        assert np.load(path / "embeddings.npy").shape[0] > 0, "a damaged snapshot must not stay on disk"


def test_a_failing_snapshot_backs_off_and_recovers(
    small_world: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        bundle=small_world["bundle"],
        corpus=small_world["corpus"],
        cache_dir=tmp_path / "cache",
        insecure_writes=True,
        snapshot_every_writes=1,
        snapshot_interval=0.05,
    )
    collection = collection_for(settings)
    try:
        folder = collection.ready_state().folder
        shutil.rmtree(folder)
        folder.write_text("in the way")  # a real failure: the snapshot folder cannot be created
        with caplog.at_level(logging.ERROR):
            collection.put([Document("a", "A", "some text")])
            time.sleep(2.0)
        failures = [r for r in caplog.records if "snapshot failed" in r.getMessage()]
        assert 2 <= len(failures) <= 8, f"{len(failures)} attempts in 2 s"
        folder.unlink()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and collection.ready_state().saved_seq != collection.ready_state().seq:
            time.sleep(0.05)
        assert collection.ready_state().saved_seq == collection.ready_state().seq
    finally:
        collection.close()


def test_a_snapshot_does_not_wait_for_the_writer(small_world: dict, tmp_path: Path) -> None:
    """The capture reads the state under its read lock; a write being prepared or committed does not block it."""
    settings = Settings(
        bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path / "cache", insecure_writes=True
    )
    collection = collection_for(settings)
    try:
        collection.put([Document("a", "A", "some text")])
        done = threading.Event()
        with collection._writer:  # a write in progress (featurizing, committing)
            thread = threading.Thread(target=lambda: (collection.snapshot(), done.set()), daemon=True)
            thread.start()
            assert done.wait(10), "the snapshot waited for the write to finish"
        assert collection.ready_state().saved_seq == collection.ready_state().seq
    finally:
        collection.close()
