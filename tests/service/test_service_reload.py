"""POST /admin/reload swaps the model atomically while other clients keep searching and writing."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from service_testing import (
    API_KEY,
    TLS,
    Oracle,
    ThreadServer,
    assert_same_ranking,
    make_bundle,
    make_corpus,
    needle_of,
    write_corpus,
)

from ssi.bundle import load_bundle
from ssi.records import Document

KEY = {"X-API-Key": API_KEY}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("reload")
    docs = make_corpus(1500, seed=5, vocab_words=2500)
    corpus = write_corpus(root / "corpus.jsonl", docs)
    bundles = root / "bundles"
    first = make_bundle(bundles / "current", docs, n_dims=16, seed=1)
    second = make_bundle(bundles / "next", docs, n_dims=24, seed=2, form="symmetric")
    return {"root": root, "docs": docs, "corpus": corpus, "first": first, "second": second}


class Traffic(threading.Thread):
    """Searches (and, when given a key, writes) in a loop, keeping every status and acknowledged write."""

    def __init__(self, url: str, docs: list[Document], write: bool) -> None:
        super().__init__(daemon=True)
        self.url, self.docs, self.write = url, docs, write
        self.statuses: list[int] = []
        self.answered_at: list[float] = []  # when each successful search or write was answered
        self.written: dict[str, Document] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60, verify=TLS) as client:
            i = 0
            while not self.stop.is_set():
                i += 1
                doc = self.docs[i % len(self.docs)]
                response = client.post("/search", json={"query": doc.title, "k": 10})
                self.statuses.append(response.status_code)
                self.answered_at.append(time.monotonic())
                if self.write and i % 3 == 0:
                    new = Document(f"during-{i}", "During", f"{needle_of(doc)} {doc.title}")
                    response = client.put(
                        f"/documents/{new.id}", json={"title": new.title, "text": new.text}, headers=KEY
                    )
                    self.statuses.append(response.status_code)
                    if response.status_code == 200:
                        self.written[new.id] = new
                        self.answered_at.append(time.monotonic())


def test_reload_swaps_the_model_while_requests_keep_succeeding(world: dict, tmp_path: Path) -> None:
    docs: list[Document] = world["docs"]
    with ThreadServer(bundle=world["first"], corpus=world["corpus"], cache_dir=tmp_path, api_key=API_KEY) as server:
        client = server.client
        first_hash = client.get("/model").json()["content_hash"]
        traffic = [Traffic(server.url, docs, write=(n == 0)) for n in range(3)]
        for t in traffic:
            t.start()
        time.sleep(0.3)
        started = time.monotonic()
        response = client.post("/admin/reload", json={"bundle": str(world["second"])}, headers=KEY)
        ended = time.monotonic()
        time.sleep(0.3)
        for t in traffic:
            t.stop.set()
            t.join(timeout=60)
        assert response.status_code == 200, response.text
        body = response.json()
        second_hash = load_bundle(world["second"]).content_hash
        assert body["previous_content_hash"] == first_hash and body["content_hash"] == second_hash
        assert body["loaded_from"] == "computed" and body["form"] == "symmetric"
        statuses = [s for t in traffic for s in t.statuses]
        assert len(statuses) > 30 and set(statuses) == {200}, sorted(set(statuses))
        during = [t for traffic_thread in traffic for t in traffic_thread.answered_at if started < t < ended]
        assert len(during) >= 5, f"only {len(during)} requests answered during the {ended - started:.2f}s reload"

        # The new model serves, over every document including those written during the reload.
        model = client.get("/model").json()
        assert model["content_hash"] == second_hash and model["n_dims"] == 24
        current = docs + list(traffic[0].written.values())
        assert model["index"]["documents"] == len(current)
        oracle = Oracle(world["second"], current)
        for query in [d.title for d in docs[:10]] + [d.text for d in list(traffic[0].written.values())[:10]]:
            hits = client.post("/search", json={"query": query, "k": 10}).json()["hits"]
            assert_same_ranking(hits, oracle, query, 10)
        metrics = client.get("/metrics").text
        assert f'content_hash="{second_hash}"' in metrics and f'content_hash="{first_hash}"' not in metrics


def test_reload_of_a_bad_bundle_is_refused_and_the_old_model_keeps_serving(world: dict, tmp_path: Path) -> None:
    corrupt = world["root"] / "bundles" / "corrupt"
    shutil.copytree(world["second"], corrupt, dirs_exist_ok=True)
    np.save(corrupt / "U.npy", np.load(corrupt / "U.npy") * 2)
    with ThreadServer(bundle=world["first"], corpus=world["corpus"], cache_dir=tmp_path, api_key=API_KEY) as server:
        client = server.client
        before = client.post("/search", json={"query": world["docs"][3].title}).json()["hits"]
        for bundle, message in ((corrupt, "U.npy: contents do not match"), (world["root"] / "bundles", "not a bundle")):
            response = client.post("/admin/reload", json={"bundle": str(bundle)}, headers=KEY)
            assert response.status_code == 422, response.text
            assert "cannot reload" in response.json()["detail"] and message in response.json()["detail"]
        # a path with a NUL byte names no file: a 422 naming the problem, not a 500 from the OS call
        response = client.post("/admin/reload", json={"bundle": f"{world['second']}\x00/x"}, headers=KEY)
        assert response.status_code == 422, response.text
        assert "NUL byte" in response.text
        assert client.get("/model").json()["content_hash"] == load_bundle(world["first"]).content_hash
        assert client.post("/search", json={"query": world["docs"][3].title}).json()["hits"] == before


def test_reload_rereads_a_bundle_rewritten_in_place(world: dict, tmp_path: Path) -> None:
    """The trainer's pattern: a new bundle written over the served folder, then a reload with no body."""
    folder = tmp_path / "bundles" / "served"
    shutil.copytree(world["first"], folder)
    with ThreadServer(bundle=folder, corpus=world["corpus"], cache_dir=tmp_path / "cache", api_key=API_KEY) as server:
        make_bundle(folder, world["docs"], n_dims=8, seed=9)
        response = server.client.post("/admin/reload", headers=KEY)
        assert response.status_code == 200, response.text
        assert response.json()["content_hash"] == load_bundle(folder).content_hash
        assert server.client.get("/model").json()["n_dims"] == 8
