"""Collection types (documents vs adverts) and the bounds of a long text used as a query."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from pydantic import ValidationError
from service_testing import API_KEY, Oracle, ThreadServer, assert_same_ranking

from service.bounds import cut_long_text
from service.settings import CollectionSpec, Settings
from ssi.records import Document
from ssi.tokenize import tokenize

KEY = {"X-API-Key": API_KEY}


def test_an_adverts_collection_is_not_searched_like_documents(small_world: dict, tmp_path: Path) -> None:
    ads = CollectionSpec(bundle=small_world["bundle"], corpus=small_world["corpus"], type="adverts")
    doc_id = quote(small_world["docs"][20].id, safe="")
    with ThreadServer(
        bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path, collections={"ads": ads}
    ) as server:
        client = server.client
        refused = [
            client.post("/collections/ads/search", json={"query": "baba"}),
            client.post("/collections/ads/search/batch", json={"queries": ["baba"]}),
            client.get(f"/collections/ads/documents/{doc_id}/similar"),
        ]
        for response in refused:
            assert response.status_code == 409, response.text
            assert "collection 'ads' holds adverts" in response.json()["detail"]
            assert "serves documents collections only" in response.json()["detail"]
        # The same requests on the documents collection, and the adverts' records themselves, are served.
        assert client.post("/search", json={"query": "baba"}).status_code == 200
        assert client.get(f"/documents/{doc_id}/similar").status_code == 200
        assert client.get(f"/collections/ads/documents/{doc_id}").status_code == 200
        assert client.get("/collections/ads/model").json()["type"] == "adverts"
        assert client.get("/model").json()["type"] == "documents"
        collections = client.get("/readyz").json()["collections"]
        assert collections["ads"]["type"] == "adverts" and collections["documents"]["type"] == "documents"


def test_collection_types_come_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSI_COLLECTIONS", '{"ads": {"bundle": "/models/ads", "type": "adverts"}}')
    specs = Settings(bundle=Path("/models/b")).collection_specs()
    assert specs["documents"].type == "documents" and specs["ads"].type == "adverts"
    monkeypatch.setenv("SSI_COLLECTIONS", '{"ads": {"bundle": "/models/ads", "type": "pages"}}')
    with pytest.raises(ValidationError, match="'documents' or 'adverts'"):
        Settings()


def test_cut_long_text_keeps_whole_words() -> None:
    assert cut_long_text("short text", 100) == "short text"
    assert cut_long_text("alpha beta gamma", 13) == "alpha beta"  # not "alpha beta ga"
    assert cut_long_text("x" * 50, 10) == "x" * 10  # no whitespace to cut at
    assert len(cut_long_text("word " * 1000, 65_536)) <= 65_536


def heaviest_words_text(text: str, max_words: int, oracle: Oracle) -> str:
    """The text made of `text`'s `max_words` known words of highest tf-idf weight, each as often as in `text`."""
    vocab = oracle.bundle.vocab
    counts = Counter(token for token in tokenize(text) if vocab.id_of(token) is not None)
    weight = {word: (1 + np.log(count)) * float(vocab.idf[vocab.id_of(word)]) for word, count in counts.items()}
    kept = sorted(counts, key=lambda word: (-weight[word], vocab.id_of(word)))[:max_words]
    return " ".join(word for word in kept for _ in range(counts[word]))


def test_similar_cuts_a_long_document_and_search_refuses_a_long_query(small_world: dict, tmp_path: Path) -> None:
    """/similar takes a stored document of any length, cut to the page bounds; /search refuses a long query."""
    docs: list[Document] = list(small_world["docs"])
    long_doc = Document("long", "A long one", " ".join(d.text for d in docs[100:200]))  # ~25 kB
    assert len(long_doc.full_text) > 4096
    bounds = dict(max_page_chars=600, max_page_words=12)
    with ThreadServer(
        bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path, api_key=API_KEY, **bounds
    ) as server:
        client = server.client
        put = client.put("/documents/long", json={"title": long_doc.title, "text": long_doc.text}, headers=KEY)
        assert put.status_code == 200, put.text
        oracle = Oracle(small_world["bundle"], [*docs, long_doc])
        prefix = long_doc.full_text[:600].rsplit(None, 1)[0]
        query = heaviest_words_text(prefix, 12, oracle)
        assert oracle.top(query, 10, "long")[0] != oracle.top(long_doc.full_text, 10, "long")[0]  # the cut matters

        similar = client.get("/documents/long/similar", params={"k": 10})
        assert similar.status_code == 200, similar.text
        assert similar.json()["query_words"] == 12
        assert_same_ranking(similar.json()["hits"], oracle, query, 10, exclude="long")

        refused = client.post("/search", json={"query": long_doc.full_text})
        assert refused.status_code == 422 and "longer than 4096 characters" in refused.json()["detail"]


def test_a_document_within_the_page_bounds_is_the_whole_query(small_world: dict, tmp_path: Path) -> None:
    """With the default bounds a document of several kB is not cut: /similar ranks by the whole text."""
    docs: list[Document] = list(small_world["docs"])
    doc = Document("longer", "Longer", " ".join(d.text for d in docs[:30]))
    assert 4096 < len(doc.full_text) < 65_536
    with ThreadServer(
        bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path, api_key=API_KEY
    ) as server:
        client = server.client
        assert client.put("/documents/longer", json={"title": doc.title, "text": doc.text}, headers=KEY).is_success
        similar = client.get("/documents/longer/similar", params={"k": 10})
        assert similar.status_code == 200, similar.text
        oracle = Oracle(small_world["bundle"], [*docs, doc])
        assert_same_ranking(similar.json()["hits"], oracle, doc.full_text, 10, exclude="longer")
