"""The document store outlives its seed corpus: a changed corpus is merged (or refused), never a silent new store;
one process per data folder."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from service_testing import API_KEY, TLS, Oracle, ProcessServer, ThreadServer, assert_same_ranking, write_corpus

from service.collection import Collection
from service.metrics import Metrics
from service.settings import CollectionSpec, Settings
from service.store import DocumentStore, StoreError
from ssi.records import Document

KEY = {"X-API-Key": API_KEY}


def url_of(doc_id: str) -> str:
    return "/documents/" + quote(doc_id, safe="")


def test_a_changed_corpus_is_merged_into_the_store_and_api_writes_survive(
    small_world: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    docs: list[Document] = list(small_world["docs"])
    corpus = write_corpus(tmp_path / "corpus.jsonl", docs)
    settings = dict(bundle=small_world["bundle"], corpus=corpus, cache_dir=tmp_path / "cache", api_key=API_KEY)
    api_doc = Document("api-only", "Written", docs[3].text)
    replaced, deleted, untouched = docs[10], docs[11], docs[12]
    with ThreadServer(**settings) as server:
        client = server.client
        assert client.put(
            url_of(api_doc.id), json={"title": api_doc.title, "text": api_doc.text}, headers=KEY
        ).is_success
        assert client.put(url_of(replaced.id), json={"title": "By API", "text": docs[4].text}, headers=KEY).is_success
        assert client.delete(url_of(deleted.id), headers=KEY).is_success

    # The operator edits the corpus: one line appended, and the three documents above edited in the file.
    appended = Document("appended", "New line", docs[5].text)
    edited = {
        replaced.id: Document(replaced.id, "Edited in file", docs[6].text),
        deleted.id: Document(deleted.id, "Edited in file", docs[7].text),
        untouched.id: Document(untouched.id, "Edited in file", docs[8].text),
    }
    write_corpus(corpus, [edited.get(d.id, d) for d in docs] + [appended])

    with caplog.at_level(logging.WARNING), ThreadServer(**settings) as server:
        client = server.client
        # What the API wrote is still the truth: its own document, its replacement, its delete.
        got = client.get(url_of(api_doc.id))
        assert got.status_code == 200, "a document written through the API vanished after the corpus changed"
        assert client.get(url_of(replaced.id)).json()["title"] == "By API"
        assert client.get(url_of(deleted.id)).status_code == 404
        # What only the corpus owned follows the corpus: the new line and the edited document.
        assert client.get(url_of(appended.id)).json()["text"] == appended.text
        assert client.get(url_of(untouched.id)).json()["title"] == "Edited in file"
        current = {d.id: d for d in docs if d.id != deleted.id}
        current.update({api_doc.id: api_doc, appended.id: appended, untouched.id: edited[untouched.id]})
        current[replaced.id] = Document(replaced.id, "By API", docs[4].text)
        assert client.get("/model").json()["index"]["documents"] == len(current)
        oracle = Oracle(small_world["bundle"], list(current.values()))
        for query in (appended.text[:60], edited[untouched.id].text[:60], docs[4].text[:60]):
            assert_same_ranking(
                client.post("/search", json={"query": query, "k": 10}).json()["hits"], oracle, query, 10
            )
    merged = [r.getMessage() for r in caplog.records if "changed since it seeded" in r.getMessage()]
    assert merged, "a changed corpus must be reported, not switched silently"
    for count in ("1 added", "1 updated", "1 kept as written through the API", "1 left deleted"):
        assert count in merged[0], merged[0]
    # One store per collection, whatever the corpus: no store was seeded beside it (the traffic log lives there too).
    found = sorted(p.name for p in (tmp_path / "cache" / "stores" / "documents").glob("*.sqlite"))
    assert found in (["documents.sqlite"], ["documents.sqlite", "events.sqlite"])


def test_a_changed_corpus_is_refused_with_a_message_when_asked(small_world: dict, tmp_path: Path) -> None:
    docs: list[Document] = list(small_world["docs"])
    corpus = write_corpus(tmp_path / "corpus.jsonl", docs[:100])
    spec = CollectionSpec(bundle=small_world["bundle"], corpus=corpus)
    settings = Settings(bundle=spec.bundle, corpus=corpus, cache_dir=tmp_path / "cache", corpus_change="refuse")
    first = Collection("documents", spec, settings, Metrics())
    first.load()
    first.close()
    write_corpus(corpus, docs[:101])
    second = Collection("documents", spec, settings, Metrics())
    with pytest.raises(StoreError, match="changed since it seeded") as refused:
        second.load()
    assert "SSI_CORPUS_CHANGE" in str(refused.value)
    second.close()
    # Unchanged, it loads; and the refusal changed nothing.
    write_corpus(corpus, docs[:100])
    third = Collection("documents", spec, settings, Metrics())
    third.load()
    assert third.ready_state().table.n_live == 100
    third.close()


def test_a_legacy_store_keyed_by_the_corpus_hash_is_adopted(small_world: dict, tmp_path: Path) -> None:
    """A store written by the earlier layout (stores/<collection>/<corpus sha256[:16]>.sqlite) keeps serving."""
    docs: list[Document] = list(small_world["docs"])[:50]
    corpus = write_corpus(tmp_path / "corpus.jsonl", docs)
    store_dir = tmp_path / "cache" / "stores"
    from service.store import corpus_fingerprint

    legacy = DocumentStore(store_dir / "documents" / f"{corpus_fingerprint(corpus)[:16]}.sqlite")
    legacy.import_corpus(corpus, corpus_fingerprint(corpus))
    legacy.put([Document("api", "Via API", "text written through the api")])
    legacy.close()
    store = DocumentStore.open_for_corpus(store_dir, "documents", corpus)
    try:
        assert store.get("api") is not None and store.count() == 51
        assert store.path.name == "documents.sqlite"
    finally:
        store.close()


def test_a_second_process_on_the_same_data_folder_is_refused(small_world: dict, tmp_path: Path) -> None:
    env = {"SSI_CACHE_DIR": str(tmp_path / "cache"), "SSI_API_KEY": API_KEY}
    args = ["--bundle", str(small_world["bundle"]), "--corpus", str(small_world["corpus"])]
    first = ProcessServer(tmp_path, env, args).start()
    second = ProcessServer(tmp_path, env, args)
    try:
        second.start(wait=False)
        assert second.process is not None
        assert second.process.wait(timeout=30) == 1
        assert "is already served by another process" in second.log(), second.log()
        # The first one is undisturbed.
        put = httpx.put(first.url + url_of("after"), json={"text": "still writable"}, headers=KEY, verify=TLS)
        assert put.status_code == 200
        assert httpx.get(f"{first.url}/readyz", verify=TLS).json()["status"] == "ready"
    finally:
        second.stop()
        first.stop()
