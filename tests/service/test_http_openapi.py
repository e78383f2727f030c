"""The OpenAPI schema is the contract the server keeps (issue 14, defect 13), and what a client chooses
freely never becomes a metric label (defect 2)."""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest
from service_testing import API_KEY, ThreadServer

from service.server import HTTP_PROTOCOL

SETTINGS = dict(
    api_key=API_KEY, index_type="hnsw", max_k=50, max_offset=70, max_batch=8, max_query_chars=300, max_ef_search=200
)


@pytest.fixture(scope="module")
def server(small_world: dict, tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("cache")
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=cache, **SETTINGS) as s:
        yield s


@pytest.fixture(scope="module")
def spec(server: ThreadServer) -> dict:
    return server.client.get("/openapi.json").json()


def _operations(spec: dict) -> list[tuple[str, str, dict]]:
    return [(path, method, op) for path, item in spec["paths"].items() for method, op in item.items()]


def test_the_collection_routes_declare_their_path_parameter(spec: dict) -> None:
    prefixed = [(p, m, op) for p, m, op in _operations(spec) if p.startswith("/collections/{collection}/")]
    # search, batch, clicks, similar, document get/put/delete, documents post, model, words; match, advert
    # get/put/patch/delete
    assert len(prefixed) == 15
    for path, _, op in prefixed:
        params = {p["name"]: p for p in op.get("parameters", []) if p["in"] == "path"}
        assert params["collection"]["required"] and params["collection"]["schema"]["enum"] == ["documents"], path


def test_every_error_response_is_declared_with_its_body(spec: dict) -> None:
    expected = {
        ("/search", "post"): {400, 401, 404, 409, 413, 422, 429, 503},
        ("/search/batch", "post"): {400, 401, 404, 409, 413, 422, 429, 503},
        ("/clicks", "post"): {400, 401, 403, 404, 413, 422, 429, 503, 507},
        ("/documents", "post"): {400, 401, 403, 404, 409, 413, 422, 429, 503, 507},
        ("/documents/{doc_id}", "put"): {400, 401, 403, 404, 409, 413, 422, 429, 503, 507},
        ("/documents/{doc_id}", "delete"): {401, 403, 404, 422, 429, 503, 507},
        ("/documents/{doc_id}", "get"): {401, 404, 422, 503},
        ("/documents/{doc_id}/similar", "get"): {400, 401, 404, 409, 422, 429, 503},
        ("/admin/reload", "post"): {400, 401, 403, 404, 409, 413, 422, 503},
        ("/collections/{collection}/model", "get"): {401, 404, 422, 503},
    }
    for (path, method), statuses in expected.items():
        responses = spec["paths"][path][method]["responses"]
        assert {int(s) for s in responses if s != "200"} == statuses, (path, method)
        for status in statuses:
            body = responses[str(status)]["content"]["application/json"]["schema"]["$ref"]
            assert body.endswith("ValidationErrorBody" if status == 422 else "ErrorBody"), (path, status)
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_the_declared_422_is_what_comes_back(server: ThreadServer, spec: dict) -> None:
    declared = spec["components"]["schemas"]["ValidationErrorBody"]
    for response in (
        server.client.post("/search", json={"query": 5}),  # pydantic's check
        server.client.post("/search", json={"query": "baba", "k": 51}),  # a configured bound
        server.client.post("/search", content=b"{", headers={"content-type": "application/json"}),  # not JSON
    ):
        assert response.status_code == 422
        body = response.json()
        assert set(body) == set(declared["required"]) == {"detail", "errors", "error_count"}
        assert isinstance(body["detail"], str) and isinstance(body["errors"], list) and body["error_count"] >= 1


def test_the_schema_states_the_configured_bounds(spec: dict) -> None:
    schemas = spec["components"]["schemas"]
    batch = schemas["BatchSearchRequest"]["properties"]
    assert batch["k"]["maximum"] == 50 and batch["offset"]["maximum"] == 70
    assert batch["queries"]["maxItems"] == 8 and batch["queries"]["minItems"] == 1
    assert batch["queries"]["items"]["maxLength"] == 300 and batch["queries"]["items"]["minLength"] == 1
    assert schemas["SearchRequest"]["properties"]["query"]["maxLength"] == 300
    assert schemas["SearchRequest"]["properties"]["ef_search"]["anyOf"][0]["maximum"] == 200
    assert "nprobe" not in schemas["SearchRequest"]["properties"]  # an hnsw server: nprobe is refused
    documents = schemas["DocumentsIn"]["properties"]["documents"]
    assert documents["minItems"] == 1 and documents["maxItems"] == 1000
    assert schemas["DocumentIn"]["properties"]["id"]["maxLength"] == 512
    assert {"anyOf"} <= set(schemas["DocumentBody"])  # a title or a text
    similar = {p["name"]: p["schema"] for p in spec["paths"]["/documents/{doc_id}/similar"]["get"]["parameters"]}
    assert similar["k"]["maximum"] == 50 and similar["offset"]["maximum"] == 70
    assert "x-bounds" not in str(spec)


def test_a_flat_server_offers_neither_index_knob(small_world: dict, tmp_path: Path) -> None:
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path) as s:
        properties = s.client.get("/openapi.json").json()["components"]["schemas"]["SearchRequest"]["properties"]
        assert "ef_search" not in properties and "nprobe" not in properties


@pytest.mark.parametrize("method", ["PATCH", "OPTIONS", "POST"])
def test_a_405_lists_every_method_of_the_path(server: ThreadServer, method: str) -> None:
    response = server.client.request(method, "/documents/C%2B%2B")
    assert response.status_code == 405
    assert response.headers["allow"] == "DELETE, GET, PUT"
    assert "DELETE, GET, PUT" in response.json()["detail"]


def test_a_write_to_a_similar_path_is_a_405_not_a_write(server: ThreadServer) -> None:
    key = {"X-API-Key": API_KEY}
    response = server.client.put("/documents/C%2B%2B/similar", json={"text": "baba"}, headers=key)
    assert response.status_code == 405 and response.headers["allow"] == "GET"
    response = server.client.post("/documents", json={"documents": [{"id": "x/similar", "text": "baba"}]}, headers=key)
    assert response.status_code == 422 and "must not end in '/similar'" in response.json()["detail"]


def _raw(server: ThreadServer, method: str, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path)
        return connection.getresponse().status
    finally:
        connection.close()


def test_made_up_methods_add_no_metric_labels(server: ThreadServer) -> None:
    # httptools refuses a method it does not know while parsing (400, before the app); h11 hands it to the app,
    # which answers 405 and counts it under method="other". Neither may add a label per made-up method.
    refused = 400 if HTTP_PROTOCOL == "httptools" else 405
    assert _raw(server, "FOOBAR", "/search") == refused
    server.client.get("/metrics")  # so that GET /metrics has its own lines before counting
    before = server.client.get("/metrics").text
    for i in range(50):
        assert _raw(server, f"FOOBAR{i}", "/search") == refused
    assert _raw(server, "X" * 60_000, "/search") in (400, 405)
    after = server.client.get("/metrics").text
    assert "FOOBAR" not in after and "XXXX" not in after
    assert len(after.splitlines()) == len(before.splitlines())
    if refused == 405:
        assert 'method="other",route="/search",status="405"' in after
