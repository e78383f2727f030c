"""`ssi.Client` against a real server started here: typed results, the same ranking as in process, writes,
adverts, and the server's errors as `ssi.ServiceError`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

import ssi
from service.settings import CollectionSpec
from ssi.corpus import read_corpus
from ssi.records import Document
from tests.api.conftest import ApiWorld
from tests.service.service_testing import API_KEY, ThreadServer

QUERIES = ["left0w1 common3", "right1w2 left1w4", "common7 common9 right5w0", "nothing known here"]


@pytest.fixture(scope="module")
def served(api_world: ApiWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    """The trained model over the corpus as documents, and over the same texts as an adverts collection "ads"."""
    ads = CollectionSpec(bundle=api_world.trained.bundle, corpus=api_world.data.corpus, type="adverts")
    with ThreadServer(
        bundle=api_world.trained.bundle,
        corpus=api_world.data.corpus,
        cache_dir=tmp_path_factory.mktemp("cache"),
        api_key=API_KEY,
        collections={"ads": ads},
    ) as running:
        yield running


@pytest.fixture
def client(served: ThreadServer) -> Iterator[ssi.Client]:
    with ssi.Client(served.url, api_key=API_KEY) as opened:
        yield opened


def test_search_is_the_in_process_ranking(client: ssi.Client, api_world: ApiWorld) -> None:
    """The service (FAISS + lexical candidates + exact rerank) and ssi.load (brute force) rank alike."""
    model = ssi.load(api_world.trained, corpus=api_world.data.corpus)
    for query, local in zip(QUERIES, model.search(QUERIES, k=10), strict=True):
        result = client.search(query, k=10)
        assert isinstance(result, ssi.SearchResult) and all(isinstance(h, ssi.SearchHit) for h in result.hits)
        assert result.collection == "documents"
        assert [h.id for h in result.hits] == [h.id for h in local], query
        assert [h.score for h in result.hits] == pytest.approx([h.score for h in local], abs=1e-4)
        assert all(h.semantic + h.lexical == pytest.approx(h.score, abs=1e-5) for h in result.hits)
    batch = client.search_batch(QUERIES, k=5, offset=5)
    assert [[h.id for h in r.hits] for r in batch] == [[h.id for h in client.search(q, k=10).hits[5:]] for q in QUERIES]


def test_a_click_on_an_answer_is_reported_once(client: ssi.Client) -> None:
    result = client.search(QUERIES[0], k=5)
    assert result.impression and len(result.hits) == 5
    first = client.click(result.impression, result.hits[1].id)
    assert isinstance(first, ssi.ClickResult) and first == ssi.ClickResult(recorded=True, position=2)
    assert client.click(result.impression, result.hits[1].id, dwell_ms=800.0).recorded is False
    with pytest.raises(ssi.ServiceError) as unknown:
        client.click(result.impression, "not-shown")
    assert unknown.value.status == 404 and "not shown" in str(unknown.value)


def test_similar_leaves_the_document_out(client: ssi.Client, api_world: ApiWorld) -> None:
    result = client.similar("left-0-0", k=5)
    assert len(result.hits) == 5 and "left-0-0" not in [h.id for h in result.hits]
    assert all(a.score >= b.score for a, b in zip(result.hits, result.hits[1:], strict=False))


def test_document_writes_then_reads(client: ssi.Client, api_world: ApiWorld) -> None:
    odd = "a/b C++ 100%"  # a slash, a plus and a percent sign survive the path
    text = "left3w1 left3w2 left3w1 right3w4"
    written = client.put_document(odd, title="Zebra", text=text)
    assert isinstance(written, ssi.WriteResult) and written.ids == [odd]
    stored = client.get_document(odd)
    assert (stored.id, stored.title, stored.text, stored.seq) == (odd, "Zebra", text, written.seq)
    batch = client.put_documents([Document("api-1", "", "left3w2 right3w4 right3w4"), Document("api-2", "Two", "x")])
    assert batch.ids == ["api-1", "api-2"] and batch.seq > written.seq
    # The written documents are searched like the others: as the in-process ranking of the grown corpus.
    grown = [
        *read_corpus(api_world.data.corpus),
        Document(odd, "Zebra", text),
        Document("api-1", "", "left3w2 right3w4 right3w4"),
    ]
    expected = [h.id for h in ssi.load(api_world.trained, corpus=grown).search(text, k=100)]
    assert odd in expected and [h.id for h in client.search(text, k=100).hits] == expected
    deleted = client.delete_document(odd)
    assert deleted.deleted and deleted.id == odd
    with pytest.raises(ssi.ServiceError) as missing:
        client.get_document(odd)
    assert missing.value.status == 404 and missing.value.message.startswith("no document")
    assert odd not in [h.id for h in client.search(text, k=100).hits]


def test_fields_go_in_and_filters_facets_and_fields_come_out_typed(client: ssi.Client, api_world: ApiWorld) -> None:
    """Documents written with `fields` through the client (the corpus's own texts, so every other test's ranking
    stands); a filtered search is `ssi.load`'s filtered ranking, with `matched`, the facets and each hit's fields."""
    docs = read_corpus(api_world.data.corpus)
    tagged = [replace(d, fields={"side": ["left", "right"][i % 2], "n": i}) for i, d in enumerate(docs[:60])]
    client.put_documents(tagged[1:])
    one = client.put_document(tagged[0].id, title=tagged[0].title, text=tagged[0].text, fields=tagged[0].fields)
    assert one.ids == [tagged[0].id] and client.get_document(tagged[0].id).fields == {"side": "left", "n": 0}
    assert client.get_document(docs[70].id).fields == {}
    model = ssi.load(api_world.trained, corpus=[*tagged, *docs[60:]])
    node = {"and": [{"term": {"side": "left"}}, {"range": {"n": {"gte": 10}}}]}
    for query, local in zip(QUERIES[:3], model.search(QUERIES[:3], k=10, filter=node), strict=True):
        result = client.search(query, k=10, filter=node, facets=["side"], fields=["n", "colour"])
        assert [h.id for h in result.hits] == [h.id for h in local], query
        assert [h.score for h in result.hits] == pytest.approx([h.score for h in local], abs=1e-4)
        assert result.matched == 25 and result.facets == {"side": ssi.Facet([("left", 25)], 0)}
        assert [h.fields for h in result.hits] == [{"n": h.position} for h in local]  # n is the row; no colour
    batch = client.search_batch(QUERIES[:2], k=3, filter={"term": {"side": "right"}}, facets=["side"])
    assert [r.matched for r in batch] == [30, 30] and all(h.fields is None for r in batch for h in r.hits)
    assert [[h.id for h in r.hits] for r in batch] == [
        [h.id for h in hits] for hits in model.search(QUERIES[:2], k=3, filter={"term": {"side": "right"}})
    ]
    plain = client.search(QUERIES[0], 5, 0)  # the positional call of before: no filter, no facets
    assert plain.matched is None and plain.facets is None and len(plain.hits) == 5
    with pytest.raises(ssi.ServiceError) as clash:
        client.put_document(docs[0].id, title=docs[0].title, text=docs[0].text, fields={"n": "many"})
    assert clash.value.status == 409 and "field 'n' has type integer, was given keyword" in clash.value.message
    with pytest.raises(ssi.ServiceError) as unknown:
        client.search(QUERIES[0], filter={"term": {"colour": "red"}})
    assert unknown.value.status == 422 and "unknown field 'colour'" in unknown.value.message


def test_errors_carry_the_servers_status_and_message(served: ThreadServer, client: ssi.Client) -> None:
    with pytest.raises(ssi.ServiceError) as bad_k:
        client.search("left0w1", k=0)
    assert bad_k.value.status == 422 and "k" in bad_k.value.message
    assert bad_k.value.errors and bad_k.value.errors[0]["loc"][-1] == "k"
    with ssi.Client(served.url, api_key="wrong-key") as wrong:
        assert wrong.search("left0w1", k=1).hits  # reads need no key here
        with pytest.raises(ssi.ServiceError) as refused:
            wrong.put_document("x", text="y")
    assert refused.value.status == 401 and refused.value.message == "wrong X-API-Key"
    with ssi.Client(served.url) as anonymous, pytest.raises(ssi.ServiceError, match="needs the X-API-Key header"):
        anonymous.delete_document("left-0-0")
    with pytest.raises(ssi.ServiceError) as unknown:
        client.in_collection("nope").search("left0w1")
    assert unknown.value.status == 404 and "nope" in unknown.value.message
    with pytest.raises(ssi.ServiceError) as wrong_type:
        client.in_collection("ads").search("left0w1")
    assert wrong_type.value.status == 409
    # Network failures stay httpx's.
    with ssi.Client("http://127.0.0.1:9", timeout=2) as nowhere, pytest.raises(httpx.TransportError):
        nowhere.search("x")


def test_adverts_match_writes_and_pauses(client: ssi.Client, api_world: ApiWorld) -> None:
    page = "left2w1 left2w5 common4 left2w7 right2w3"
    model = ssi.load(api_world.trained, corpus=api_world.data.corpus)
    matched = client.match(page, k=5)
    assert isinstance(matched, ssi.PageMatch) and matched.collection == "ads"
    assert [a.id for a in matched.ads] == [h.id for h in model.search(page, k=5)]
    ads = client.in_collection("ads")
    ad_text = "left2w1 left2w5 left2w7 right2w3"
    written = ads.put_advert("ad-new", title="New", text=ad_text, category="cars")
    assert written.ids == ["ad-new"]
    grown = [*read_corpus(api_world.data.corpus), Document("ad-new", "New", ad_text)]
    expected = [h.id for h in ssi.load(api_world.trained, corpus=grown).search(page, k=20)]
    assert "ad-new" in expected and [a.id for a in client.match(page, k=20).ads] == expected
    assert client.match(page, k=1, filters=ssi.AdFilter(category=["boats"])).ads == []
    assert [a.id for a in client.match(page, k=5, filters=ssi.AdFilter(category=["cars"])).ads] == ["ad-new"]
    paused = client.update_advert("ad-new", active=False)
    assert isinstance(paused, ssi.Advert) and paused.active is False and paused.category == "cars"
    assert "ad-new" not in [a.id for a in client.match(page, k=20).ads]
    assert [m.ads[0].id for m in client.match_pages([page, page], k=1)] == [matched.ads[0].id] * 2
    assert client.match_document("left-2-0", k=3).ads  # a stored document of the default collection as the page
    assert client.get_advert("ad-new").active is False
    assert client.delete_advert("ad-new").deleted
    with pytest.raises(ssi.ServiceError) as gone:
        client.get_advert("ad-new")
    assert gone.value.status == 404


def test_the_service_description(client: ssi.Client, api_world: ApiWorld, tmp_path: Path) -> None:
    assert client.ready()["status"] == "ready"
    assert client.model()["content_hash"] == api_world.trained.content_hash


def test_a_field_a_newer_server_adds_is_ignored_not_fatal() -> None:
    """The client reads the fields it knows: /match's adverts gained `sentence` (a hybrid bundle's third part), and
    a client without it raised TypeError on every answer."""
    from ssi.api.client import AdMatch, SearchHit, _record

    hit = {"id": "d1", "title": "t", "snippet": "s", "score": 1.5, "semantic": 0.5, "lexical": 1.0}
    assert _record(SearchHit, {**hit, "added_later": [1, 2]}) == SearchHit(**hit)
    ad = {"id": "a1", "title": "t", "text": "x", "score": 2.0, "semantic": 0.5, "lexical": 1.0, "category": None,
          "advertiser": None, "budget": True, "shared_words": [], "related_words": ["w"]}  # fmt: skip
    assert _record(AdMatch, {**ad, "sentence": 0.5}).sentence == 0.5
    assert _record(AdMatch, {**ad, "placed_by": "served"}) == AdMatch(**ad)
