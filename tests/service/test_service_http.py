"""The HTTP service against brute force: exact ranking, documents, writes, auth, bad input, metrics, overload."""

from __future__ import annotations

import threading
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from service_testing import API_KEY, ODD_IDS, TLS, Oracle, ThreadServer, assert_same_ranking, needle_of, probe_queries

from ssi.records import Document

KEY = {"X-API-Key": API_KEY}
POOL = 16


@pytest.fixture(scope="module")
def server(small_world: dict, tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("cache")
    # A FAISS pool far smaller than the collection, so that the lexical candidates have work to do.
    settings = dict(api_key=API_KEY, scan_pool=POOL)
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=cache, **settings) as s:
        yield s


def doc_url(doc_id: str, suffix: str = "") -> str:
    return "/documents/" + quote(doc_id, safe="") + suffix


def test_top10_equals_brute_force_for_every_query_of_a_sample(server: ThreadServer, small_world: dict) -> None:
    oracle: Oracle = small_world["oracle"]
    docs: list[Document] = small_world["docs"]
    queries = probe_queries(docs, 40, seed=42)
    lexical_decided = 0
    for query in queries:
        response = server.client.post("/search", json={"query": query, "k": 10})
        assert response.status_code == 200, response.text
        hits = response.json()["hits"]
        assert_same_ranking(hits, oracle, query, 10)
        # Count queries whose exact top-10 holds a document the embedding index alone ranks far below
        # the FAISS pool: only the lexical candidates can have found it.
        from_lexical = sum(oracle.semantic_rank(query, hit["id"]) > 5 * POOL for hit in hits)
        if from_lexical:
            lexical_decided += 1
            assert response.json()["candidates"] >= from_lexical  # each was scored exactly from outside the pool
    assert lexical_decided >= 20


def test_paging_and_batch_agree_with_single_searches(server: ThreadServer, small_world: dict) -> None:
    oracle: Oracle = small_world["oracle"]
    queries = [d.title for d in small_world["docs"][10:20]]
    batch = server.client.post("/search/batch", json={"queries": queries, "k": 5, "offset": 5})
    assert batch.status_code == 200, batch.text
    for query, result in zip(queries, batch.json()["results"], strict=True):
        ids, _ = oracle.top(query, 10)
        assert [h["id"] for h in result["hits"]] == ids[5:10]
        single = server.client.post("/search", json={"query": query, "k": 5, "offset": 5}).json()
        assert single["hits"] == result["hits"]


def test_hits_carry_title_snippet_and_score_parts(server: ThreadServer, small_world: dict) -> None:
    oracle: Oracle = small_world["oracle"]
    doc = next(d for d in small_world["docs"][20:] if oracle.top(needle_of(d), 1)[0] == [d.id])
    needle = needle_of(doc)
    body = server.client.post("/search", json={"query": needle, "k": 3}).json()
    top = body["hits"][0]
    assert top["id"] == doc.id and top["title"] == doc.title
    assert needle in top["snippet"] and top["lexical"] > 0
    assert body["query_words"] == 1 and body["candidates"] >= 3


def test_unknown_words_only_give_no_hits(server: ThreadServer) -> None:
    body = server.client.post("/search", json={"query": "qqqxxyz wwwvvv", "k": 10}).json()
    assert body["hits"] == [] and body["query_words"] == 0


@pytest.mark.parametrize("doc_id", ODD_IDS)
def test_documents_with_odd_ids(server: ThreadServer, small_world: dict, doc_id: str) -> None:
    doc = next(d for d in small_world["docs"] if d.id == doc_id)
    got = server.client.get(doc_url(doc_id))
    assert got.status_code == 200, got.text
    assert got.json()["id"] == doc_id and got.json()["text"] == doc.text
    similar = server.client.get(doc_url(doc_id, "/similar"), params={"k": 10})
    assert similar.status_code == 200, similar.text
    oracle: Oracle = small_world["oracle"]
    ids, _ = oracle.top(doc.full_text, 11)
    expected = [i for i in ids if i != doc_id][:10]
    assert [h["id"] for h in similar.json()["hits"]] == expected


def test_model_health_page_and_metrics(server: ThreadServer, small_world: dict) -> None:
    client = server.client
    before = client.get("/metrics").text
    assert client.post("/search", json={"query": "baba"}).status_code == 200
    assert client.post("/search/batch", json={"queries": ["baba", "abab", "baba"]}).status_code == 200
    model = client.get("/model").json()
    assert model["form"] == "lowrank" and model["index"]["index_type"] == "flat"
    assert model["index"]["documents"] == len(small_world["docs"])
    assert client.get("/collections/documents/model").json()["content_hash"] == model["content_hash"]
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert client.get("/static/index.html").status_code == 200
    assert client.get("/openapi.json").json()["paths"]["/search"]["post"]
    text = client.get("/metrics").text
    assert 'ssi_http_requests_total{method="POST",route="/search",status="200"}' in text
    assert f'ssi_collection_documents{{collection="documents"}} {float(len(small_world["docs"]))}' in text
    assert f'content_hash="{model["content_hash"]}"' in text
    assert "ssi_http_request_duration_seconds_bucket" in text

    def batch_sizes(metrics: str) -> tuple[float, float]:  # (searches, queries) of ssi_search_batch_queries
        values = {}
        for line in metrics.splitlines():
            if line.startswith(("ssi_search_batch_queries_count", "ssi_search_batch_queries_sum")):
                values[line.split("{")[0].rsplit("_", 1)[1]] = float(line.split()[-1])
        return values.get("count", 0.0), values.get("sum", 0.0)

    (searches_after, queries_after), (searches_before, queries_before) = batch_sizes(text), batch_sizes(before)
    searches, queries = searches_after - searches_before, queries_after - queries_before
    assert searches == 2 and queries == 4  # the lone /search and the batch of three: one call each


def _state(client: httpx.Client) -> tuple[int, int]:
    index = client.get("/model").json()["index"]
    return index["seq"], index["documents"]


BAD_REQUESTS = [
    ("post", "/search", {"json": {"query": ""}}, 422, "query is empty"),
    ("post", "/search", {"json": {"query": "   "}}, 422, "query is empty"),
    ("post", "/search", {"json": {"query": "ba " * 3000}}, 422, "longer than 4096"),
    ("post", "/search", {"json": {"query": "baba", "k": 0}}, 422, "k"),
    ("post", "/search", {"json": {"query": "baba", "k": 101}}, 422, "k must be between 1 and 100"),
    ("post", "/search", {"json": {"query": "baba", "k": "10"}}, 422, "k: Input should be a valid integer"),
    ("post", "/search", {"json": {"query": "baba", "k": 1.5}}, 422, "k: Input should be a valid integer"),
    ("post", "/search", {"json": {"query": "baba", "offset": -1}}, 422, "offset"),
    ("post", "/search", {"json": {"query": "baba", "offset": 5000}}, 422, "offset must be between"),
    ("post", "/search", {"json": {"query": 123}}, 422, "query: Input should be a valid string"),
    ("post", "/search", {"json": {"k": 3}}, 422, "query: Field required"),
    ("post", "/search", {"json": {"query": "baba", "top_k": 3}}, 422, "top_k: Extra inputs are not permitted"),
    ("post", "/search", {"json": ["baba"]}, 422, "Input should be a valid dictionary"),
    ("post", "/search", {"json": {"query": "baba", "ef_search": 10}}, 422, "ef_search applies to an hnsw index"),
    ("post", "/search", {"content": b'{"query": "ba', "headers": {"content-type": "application/json"}}, 422, "JSON"),
    (
        "post",
        "/search",
        {"content": b'{"query": "\xff\xfe"}', "headers": {"content-type": "application/json"}},
        400,
        "not valid UTF-8",
    ),
    ("post", "/search", {"content": b"x" * (8 * 1024 * 1024 + 1)}, 413, "larger than"),
    (
        "post",
        "/search",
        {"content": b'{"query": "baba"}', "headers": {"content-type": "application/x-www-form-urlencoded"}},
        422,
        "Content-Type: application/json",
    ),
    ("post", "/search/batch", {"json": {"queries": []}}, 422, "queries is empty"),
    ("post", "/search/batch", {"json": {"queries": ["baba"] * 65}}, 422, "at most 64 queries"),
    ("post", "/search/batch", {"json": {"queries": ["baba", ""]}}, 422, "queries[1] is empty"),
    ("post", "/collections/nope/search", {"json": {"query": "baba"}}, 404, "unknown collection 'nope'"),
    ("get", "/documents/no-such-doc", {}, 404, "no document with id 'no-such-doc'"),
    ("get", "/documents/no-such-doc/similar", {}, 404, "no document with id 'no-such-doc'"),
    ("get", "/documents/C%2B%2B/similar?k=0", {}, 422, "k"),
    ("get", "/documents/C%2B%2B/similar?k=abc", {}, 422, "k: Input should be a valid integer"),
    ("delete", "/documents/no-such-doc", {"headers": KEY}, 404, "no document with id 'no-such-doc'"),
    ("put", "/documents/new", {"json": {"title": "", "text": " "}, "headers": KEY}, 422, "needs a title or a text"),
    ("put", "/documents/new", {"json": {"text": 5}, "headers": KEY}, 422, "text: Input should be a valid string"),
    ("put", "/documents/%20", {"json": {"text": "baba"}, "headers": KEY}, 422, "ids must not be empty"),
    ("put", "/documents/a%0Ab", {"json": {"text": "baba"}, "headers": KEY}, 422, "control characters"),
    (
        "post",
        "/documents",
        {"json": {"documents": [{"id": "n1", "text": "baba"}, {"id": "n1", "text": "bada"}]}, "headers": KEY},
        409,
        "appears more than once",
    ),
    ("post", "/documents", {"json": {"documents": []}, "headers": KEY}, 422, "documents is empty"),
    ("post", "/documents", {"json": {"documents": [{"text": "baba"}]}, "headers": KEY}, 422, "id: Field required"),
    ("post", "/admin/reload", {"json": {"bundle": "/etc"}, "headers": KEY}, 403, "outside the allowed bundle folders"),
    ("post", "/admin/reload", {"json": {"collection": "ads"}, "headers": KEY}, 404, "unknown collection 'ads'"),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "message"), BAD_REQUESTS, ids=lambda v: str(v)[:40])
def test_bad_input_gets_a_4xx_with_a_message_and_changes_nothing(
    server: ThreadServer, method: str, path: str, kwargs: dict, status: int, message: str
) -> None:
    before = _state(server.client)
    response = server.client.request(method, path, **kwargs)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and message in detail
    assert "Traceback" not in response.text
    assert _state(server.client) == before
    assert server.client.get("/healthz").status_code == 200


def test_writes_without_the_key_are_refused(server: ThreadServer) -> None:
    before = _state(server.client)
    attempts = [
        ("put", "/documents/intruder", {"json": {"text": "baba"}}),
        ("post", "/documents", {"json": {"documents": [{"id": "intruder", "text": "baba"}]}}),
        ("delete", "/documents/C%2B%2B", {}),
        ("post", "/admin/reload", {"json": {}}),
    ]
    for method, path, kwargs in attempts:
        for headers in ({}, {"X-API-Key": "wrong-key-0123456789abcdef"}, {"X-API-Key": API_KEY[:-1]}):
            response = server.client.request(method, path, headers=headers, **kwargs)
            assert response.status_code == 401, (path, headers, response.text)
            assert "X-API-Key" in response.json()["detail"]
    assert _state(server.client) == before
    assert server.client.get("/documents/intruder").status_code == 404
    assert server.client.get("/documents/C%2B%2B").status_code == 200


def test_server_without_a_key_refuses_all_writes(small_world: dict, tmp_path: Path) -> None:
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path) as s:
        response = s.client.put("/documents/x", json={"text": "baba"}, headers=KEY)
        assert response.status_code == 403 and "SSI_API_KEY" in response.json()["detail"]
        assert s.client.post("/search", json={"query": "baba"}).status_code == 200


def test_add_replace_delete_show_in_the_next_search(small_world: dict, tmp_path: Path) -> None:
    docs: list[Document] = list(small_world["docs"])
    bundle = small_world["bundle"]
    with ThreadServer(bundle=bundle, corpus=small_world["corpus"], cache_dir=tmp_path, api_key=API_KEY) as s:
        client = s.client
        a, b = docs[50], docs[51]
        # Add: a new document made of two other documents' rare words ranks first for them.
        new = Document("new/π", "Fresh arrival", f"{needle_of(a)} {needle_of(b)} {needle_of(a)}")
        response = client.put(doc_url(new.id), json={"title": new.title, "text": new.text}, headers=KEY)
        assert response.status_code == 200, response.text
        docs.append(new)
        query = f"{needle_of(a)} {needle_of(b)}"
        hits = client.post("/search", json={"query": query, "k": 10}).json()["hits"]
        assert hits[0]["id"] == new.id
        assert_same_ranking(hits, Oracle(bundle, docs), query, 10)
        assert client.get(doc_url(new.id)).json()["title"] == "Fresh arrival"

        # Replace: the same id with other words moves to where the new text puts it.
        c = docs[52]
        replaced = Document(new.id, "Changed", f"{needle_of(c)} {needle_of(c)}")
        assert client.put(
            doc_url(new.id), json={"title": replaced.title, "text": replaced.text}, headers=KEY
        ).is_success
        docs[-1] = replaced
        oracle = Oracle(bundle, docs)
        for q in (query, needle_of(c)):
            hits = client.post("/search", json={"query": q, "k": 10}).json()["hits"]
            assert_same_ranking(hits, oracle, q, 10)
        assert client.post("/search", json={"query": needle_of(c), "k": 2}).json()["hits"][0]["id"] == new.id

        # Many at once, then delete: gone from search and from GET.
        batch = [
            Document(f"batch-{i}", f"Batch {i}", f"{needle_of(docs[60 + i])} {docs[70 + i].text}") for i in range(5)
        ]
        body = {"documents": [{"id": d.id, "title": d.title, "text": d.text} for d in batch]}
        assert client.post("/documents", json=body, headers=KEY).json()["ids"] == [d.id for d in batch]
        docs.extend(batch)
        deleted = client.delete(doc_url(a.id), headers=KEY)
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True
        docs = [d for d in docs if d.id != a.id]
        oracle = Oracle(bundle, docs)
        for q in (needle_of(a), needle_of(docs[60]), batch[0].text[:60]):
            hits = client.post("/search", json={"query": q, "k": 10}).json()["hits"]
            assert a.id not in [h["id"] for h in hits]
            assert_same_ranking(hits, oracle, q, 10)
        assert client.get(doc_url(a.id)).status_code == 404
        model = client.get("/model").json()["index"]
        assert model["documents"] == len(docs) and model["dead_rows"] == 2


def test_overload_answers_429_or_503_and_the_server_keeps_serving(small_world: dict, tmp_path: Path) -> None:
    settings = dict(max_concurrency=1, max_queue=1, queue_timeout=0.01, max_batch=64)
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path, **settings) as s:
        slow = {"queries": [d.text for d in small_world["docs"][:64]], "k": 100}
        statuses: list[int] = []
        barrier = threading.Barrier(8)

        def call() -> None:
            with httpx.Client(base_url=s.url, timeout=60, verify=TLS) as client:
                barrier.wait()
                response = client.post("/search/batch", json=slow)
                statuses.append(response.status_code)
                if response.status_code != 200:
                    assert response.headers["retry-after"] and "retry" in response.json()["detail"]

        threads = [threading.Thread(target=call) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert set(statuses) <= {200, 429, 503} and 200 in statuses
        assert {429, 503} & set(statuses)
        assert s.client.post("/search", json={"query": "baba"}).status_code == 200
        assert "ssi_overload_rejections_total" in s.client.get("/metrics").text
