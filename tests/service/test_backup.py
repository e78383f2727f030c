"""`ssi backup` and `ssi restore` (service.backup): a consistent copy of a collection taken while a real server
serves and writes, restored into new folders where a new server gives the same answers; refusals change nothing."""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from service_testing import API_KEY, TLS, Oracle, ProcessServer, assert_same_ranking, probe_queries, process_world
from typer.testing import CliRunner

from service.backup import MANIFEST, BackupError, backup, restore
from service.settings import Settings
from service.store import STORE_FILE
from ssi.records import Document
from ssi.traffic import EVENTS_FILE, read_events
from ssi_cli.main import build_app

KEY = {"X-API-Key": API_KEY}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return process_world(tmp_path_factory.mktemp("backup-world"), 300, seed=11)


def stored_documents(store: Path) -> list[Document]:
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, title, text FROM documents ORDER BY seq").fetchall()
    finally:
        conn.close()
    return [Document(id=i, title=title, text=text) for i, title, text in rows]


class Writer(threading.Thread):
    """Adds documents one request at a time until stopped, remembering which were acknowledged."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.acknowledged = url, threading.Event(), []

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30, verify=TLS) as client:
            n = 0
            while not self.stop.is_set():
                doc = {"id": f"during-{n:04d}", "title": "Written during the backup", "text": f"zebu quokka {n}"}
                if client.post("/documents", json={"documents": [doc]}, headers=KEY).status_code == 200:
                    self.acknowledged.append(doc["id"])
                n += 1


def test_a_backup_taken_during_writes_restores_to_the_same_answers(world: dict, tmp_path: Path) -> None:
    """Writes, deletes and a click acknowledged before the backup are in it, writes go on while it is taken, and a
    server started on the restored folders serves exactly the backed-up documents, ranked as the brute force."""
    live, restored = tmp_path / "live", tmp_path / "restored"
    args = ["--bundle", str(world["bundle"]), "--corpus", str(world["corpus"])]
    env = {"SSI_CACHE_DIR": str(live), "SSI_API_KEY": API_KEY, "SSI_SNAPSHOT_EVERY_WRITES": "10"}
    docs: list[Document] = world["docs"]
    server = ProcessServer(tmp_path, env, args).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as client:
            before = [{"id": f"before-{i}", "title": f"Before {i}", "text": f"ocelot tapir {i}"} for i in range(25)]
            assert client.post("/documents", json={"documents": before}, headers=KEY).status_code == 200
            deleted = [d.id for d in docs[10:15]]
            for doc_id in deleted:
                assert client.delete("/documents/" + quote(doc_id, safe=""), headers=KEY).status_code == 200
            answer = client.post("/search", json={"query": docs[20].title, "k": 5}).json()
            clicked = answer["hits"][0]["id"]
            assert client.post("/clicks", json={"impression": answer["impression"], "id": clicked}).status_code == 200
            writer = Writer(server.url)
            writer.start()
            while len(writer.acknowledged) < 5:  # the backup starts while writes are being acknowledged
                writer.stop.wait(0.05)
            started_with = len(writer.acknowledged)
            manifest = backup(Settings(cache_dir=live), tmp_path / "copy")
            writer.stop.set()
            writer.join(timeout=30)
    finally:
        server.stop()
    held = manifest.collections["documents"]
    assert held.events and held.snapshots, held  # the click log and at least one index snapshot came along

    restore(tmp_path / "copy", Settings(cache_dir=restored))
    backed_up = stored_documents(restored / "stores" / "documents" / STORE_FILE)
    ids = {d.id for d in backed_up}
    assert {d["id"] for d in before} <= ids and not ids & set(deleted)
    assert set(writer.acknowledged[:started_with]) <= ids  # acknowledged before the backup began: in it
    assert len(ids) == held.documents
    logged = {(r.impression, r.doc) for r in read_events(restored / "stores" / "documents" / EVENTS_FILE) if r.clicked}
    assert (answer["impression"], clicked) in logged

    again = ProcessServer(tmp_path, {**env, "SSI_CACHE_DIR": str(restored)}, args).start()
    try:
        with httpx.Client(base_url=again.url, timeout=30, verify=TLS) as client:
            for doc_id in sorted(ids):  # every backed-up document, and no other one written meanwhile
                assert client.get("/documents/" + quote(doc_id, safe="")).status_code == 200, doc_id
            for doc_id in set(writer.acknowledged) - ids:
                assert client.get("/documents/" + quote(doc_id, safe="")).status_code == 404, doc_id
            for doc_id in deleted:
                assert client.get("/documents/" + quote(doc_id, safe="")).status_code == 404, doc_id
            oracle = Oracle(world["bundle"], backed_up)
            corpus_docs = [d for d in backed_up if d.id in {c.id for c in docs}]
            for query in probe_queries(corpus_docs, 6, seed=2):
                hits = client.post("/search", json={"query": query, "k": 10}).json()["hits"]
                assert_same_ranking(hits, oracle, query, 10)
    finally:
        again.stop()
    assert "Traceback" not in again.log()
    assert f"from {restored / 'index' / 'documents'}" in again.log()  # it loaded the backed-up snapshot


def test_refusals_name_the_problem_and_change_nothing(world: dict, tmp_path: Path) -> None:
    """No store to copy, an existing target, a damaged backup and an occupied data folder: each refused by the
    command with its reason (exit 2), the folders as they were."""
    runner = CliRunner()
    app = build_app("backup")
    empty = runner.invoke(app, ["backup", "--cache-dir", str(tmp_path / "nothing"), "--out", str(tmp_path / "b")])
    assert empty.exit_code == 2 and "no document store" in empty.output

    live = tmp_path / "live"
    args = ["--bundle", str(world["bundle"]), "--corpus", str(world["corpus"])]
    ProcessServer(tmp_path, {"SSI_CACHE_DIR": str(live)}, args).start().stop()
    copy = tmp_path / "copy"
    made = runner.invoke(app, ["backup", "--cache-dir", str(live), "--out", str(copy)])
    assert made.exit_code == 0, made.output
    twice = runner.invoke(app, ["backup", "--cache-dir", str(live), "--out", str(copy)])
    assert twice.exit_code == 2 and "exists" in twice.output

    occupied = runner.invoke(build_app("restore"), ["restore", "--from", str(copy), "--cache-dir", str(live)])
    assert occupied.exit_code == 2 and "not empty" in occupied.output
    with pytest.raises(BackupError, match="holds no collection ads"):
        restore(copy, Settings(cache_dir=tmp_path / "elsewhere"), ["ads"])
    assert not (tmp_path / "elsewhere").exists()

    # Two restores of one backup beside each other: stores apart (--data-dir), one index folder holding both.
    shared = tmp_path / "shared-cache"
    for data in ("a", "b"):
        restore(copy, Settings(cache_dir=shared, data_dir=tmp_path / data))
        assert (tmp_path / data / "stores" / "documents" / "documents.sqlite").is_file()
    assert [p.name for p in (shared / "index" / "documents").iterdir()] == [
        p.name for p in (copy / "index" / "documents").iterdir()
    ]

    manifest = (copy / MANIFEST).read_text(encoding="utf-8")
    for damage, reason in [
        (manifest.replace('"format": 1', '"format": 99'), "backup format 99"),
        ("{", "cannot be read"),
    ]:
        (copy / MANIFEST).write_text(damage, encoding="utf-8")
        with pytest.raises(BackupError, match=reason):
            restore(copy, Settings(cache_dir=tmp_path / "target"))
    (copy / MANIFEST).write_text(manifest, encoding="utf-8")
    victim = min(json.loads(manifest)["files"])  # any file the manifest lists
    (copy / victim).rename(tmp_path / "aside")
    with pytest.raises(BackupError, match=f"incomplete: {victim} is missing"):
        restore(copy, Settings(cache_dir=tmp_path / "target"))
    (tmp_path / "aside").rename(copy / victim)

    store = copy / "stores" / "documents" / "documents.sqlite"
    data = bytearray(store.read_bytes())
    data[len(data) // 2] ^= 0xFF
    store.write_bytes(bytes(data))
    target = tmp_path / "target"
    damaged = runner.invoke(build_app("restore"), ["restore", "--from", str(copy), "--cache-dir", str(target)])
    assert damaged.exit_code == 2 and "damaged" in damaged.output and "documents.sqlite" in damaged.output
    assert not target.exists()
    (copy / MANIFEST).unlink()
    with pytest.raises(BackupError, match="not a backup"):
        restore(copy, Settings(cache_dir=target))


def test_an_adverts_book_travels_with_its_collection(tmp_path: Path) -> None:
    """An adverts collection's metadata is four fields of its documents (service.adverts), in the store; a store not
    yet opened since an earlier version still has its metadata book beside it (adverts.sqlite), adopted when the
    collection opens: a backup of it must carry the book, or every advert would be restored active and
    uncategorised."""
    from service.adverts import BOOK_FILE, adopt_book
    from service.store import DocumentStore

    source = Settings(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache")
    store = DocumentStore(DocumentStore.path_for(source.store_dir, "ads"))
    store.put([Document("ad-1", "Shoes", "running shoes"), Document("ad-2", "Tea", "green tea")])
    store.close()
    with closing(sqlite3.connect(source.store_dir / "ads" / BOOK_FILE)) as book, book:
        book.execute("CREATE TABLE adverts (id TEXT PRIMARY KEY, meta TEXT NOT NULL)")
        meta = '{"active": false, "category": "sport", "advertiser": "acme", "budget": true}'
        book.execute("INSERT INTO adverts VALUES ('ad-1', ?)", (meta,))
    manifest = backup(source, tmp_path / "backup", ["ads"])
    assert manifest.collections["ads"].adverts
    target = Settings(data_dir=tmp_path / "restored", cache_dir=tmp_path / "restored-cache")
    restore(tmp_path / "backup", target, ["ads"])
    restored = DocumentStore(DocumentStore.path_for(target.store_dir, "ads"))
    try:
        assert adopt_book(restored) == 1
        assert restored.get("ad-1").fields == {
            "active": False,
            "category": "sport",
            "advertiser": "acme",
            "budget": True,
        }
        assert restored.get("ad-2").fields is None
    finally:
        restored.close()
