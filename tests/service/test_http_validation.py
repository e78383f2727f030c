"""Bodies that fail validation: a huge one gets a small 422 quickly without stalling other requests
(issue 14, defect 1); a lone surrogate is a 422 with a message, not a 500 (defect 10)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import httpx
import pytest
from service_testing import API_KEY, TLS, ThreadServer

KEY = {"X-API-Key": API_KEY}
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server(small_world: dict, tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("cache")
    with ThreadServer(
        bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=cache, api_key=API_KEY
    ) as s:
        yield s


def _seq(server: ThreadServer) -> int:
    return server.client.get("/model").json()["index"]["seq"]


def _post_while_polling(server: ThreadServer, path: str, body: bytes) -> tuple[httpx.Response, float, float]:
    """POST `body` while another client polls /healthz: the response, its time, the slowest /healthz."""
    stop = threading.Event()
    worst = [0.0]

    def poll() -> None:
        with httpx.Client(base_url=server.url, timeout=60, verify=TLS) as client:
            while not stop.is_set():
                started = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                worst[0] = max(worst[0], time.perf_counter() - started)
                time.sleep(0.01)

    thread = threading.Thread(target=poll)
    thread.start()
    try:
        started = time.perf_counter()
        response = httpx.post(f"{server.url}{path}", content=body, headers={**KEY, **JSON}, timeout=120, verify=TLS)
        took = time.perf_counter() - started
    finally:
        stop.set()
        thread.join()
    return response, took, worst[0]


HUGE_BODIES = {
    # 10⁶ wrong-typed items: before, a 94 MB answer after 12-16 s with the event loop blocked throughout.
    "million_bad_queries": ("/search/batch", b'{"queries":[' + b",".join([b"1"] * 1_000_000) + b"]}"),
    # 5·10⁵ strings, each valid: stopped by the list's length bound, not validated one by one.
    "many_queries": ("/search/batch", b'{"queries":[' + b",".join([b'"a"'] * 500_000) + b"]}"),
    # 10⁶ wrong-typed documents.
    "million_bad_documents": ("/documents", b'{"documents":[' + b",".join([b"1"] * 1_000_000) + b"]}"),
    # 10⁵ unknown fields (1.4 MB, under the batch route's body bound): pydantic would report each.
    "many_unknown_fields": (
        "/search/batch",
        b'{"queries":["a"],' + b",".join(b'"f%d":1' % i for i in range(100_000)) + b"}",
    ),
}


@pytest.mark.parametrize("name", list(HUGE_BODIES))
def test_a_huge_invalid_body_gets_a_small_422_fast_and_the_loop_stays_free(server: ThreadServer, name: str) -> None:
    path, body = HUGE_BODIES[name]
    before = _seq(server)
    response, took, worst_healthz = _post_while_polling(server, path, body)
    assert response.status_code == 422, response.text[:500]
    assert len(response.content) < 4096, len(response.content)
    payload = response.json()
    assert isinstance(payload["detail"], str) and payload["detail"]
    assert len(payload["errors"]) <= 10
    assert payload["error_count"] >= 1
    assert took < 2.0, took
    assert worst_healthz < 1.0, worst_healthz
    assert _seq(server) == before


def test_422_lists_the_first_problems_and_counts_all(server: ThreadServer) -> None:
    bad = {"queries": ["a"], "k": "x", "offset": "y", "ef_search": "z", "nprobe": "w"}
    payload = server.client.post("/search/batch", json={**bad, **{f"extra{i}": 1 for i in range(9)}}).json()
    assert payload["error_count"] == 13 and len(payload["errors"]) == 10
    assert "(and 8 more)" in payload["detail"]
    for issue in payload["errors"]:
        assert set(issue) == {"loc", "msg", "type"}


def test_many_unknown_fields_are_one_error(server: ThreadServer) -> None:
    payload = server.client.post("/search", json={"query": "a", **{f"extra{i}": 1 for i in range(50)}}).json()
    assert payload["error_count"] == 1
    assert "50 unknown fields, such as 'extra0'" in payload["detail"]


def test_a_long_field_name_is_not_echoed_whole(server: ThreadServer) -> None:
    response = server.client.post("/search", json={"query": "a", "x" * 40_000: 1})
    assert response.status_code == 422 and len(response.content) < 2048


SURROGATE_BODIES = [
    ("post", "/documents", '{"documents": [{"id": "s\\ud800", "text": "baba"}]}', "documents.0.id"),
    ("post", "/documents", '{"documents": [{"id": "s1", "title": "\\udfff", "text": "baba"}]}', "documents.0.title"),
    ("post", "/documents", '{"documents": [{"id": "s1", "text": "ba \\ud800 ba"}]}', "documents.0.text"),
    ("put", "/documents/s2", '{"title": "x", "text": "\\ud83d"}', "text"),
    ("put", "/documents/s2", '{"title": "\\ud800\\ud800"}', "title"),
    ("post", "/search", '{"query": "baba \\ud800"}', "query"),
    ("post", "/search/batch", '{"queries": ["baba", "\\udc00"]}', "queries.1"),
]


@pytest.mark.parametrize(("method", "path", "raw", "field"), SURROGATE_BODIES, ids=lambda v: str(v)[:30])
def test_a_lone_surrogate_is_a_422_naming_the_field(
    server: ThreadServer, method: str, path: str, raw: str, field: str
) -> None:
    before = _seq(server)
    response = server.client.request(method, path, content=raw.encode(), headers={**KEY, **JSON})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert f"{field}: " in detail and "lone surrogate" in detail, detail
    assert _seq(server) == before
    assert server.client.get("/documents/s1").status_code == 404


def test_a_surrogate_pair_is_an_ordinary_character(server: ThreadServer) -> None:
    raw = '{"title": "emoji", "text": "baba \\ud83d\\ude00"}'
    response = server.client.put("/documents/pair", content=raw.encode(), headers={**KEY, **JSON})
    assert response.status_code == 200, response.text
    assert server.client.get("/documents/pair").json()["text"] == "baba \U0001f600"


@pytest.mark.parametrize("path", ["/search", "/collections/documents/search", "/search/batch"])
def test_search_bodies_have_a_bound_of_their_own(server: ThreadServer, path: str) -> None:
    """A search body cannot need more than its longest queries and a filter at its bounds: beyond that it is
    refused before it is parsed (far below SSI_MAX_BODY_BYTES)."""
    from service.bounds import body_limits

    bound = next(limit for pattern, limit in body_limits(server.settings) if pattern.fullmatch(f"POST {path}"))
    size = bound + 10_000
    assert size < server.settings.max_body_bytes / 2
    response = server.client.post(path, content=b"[" + b"1," * (size // 2) + b"1]", headers=JSON)
    assert response.status_code == 413 and "larger than" in response.json()["detail"]


def test_a_write_without_the_key_is_refused_before_its_body_is_parsed(server: ThreadServer) -> None:
    body = b'{"documents":[' + b",".join(b'{"id":"x%d"}' % i for i in range(400_000)) + b"]}"
    started = time.perf_counter()
    response = server.client.post("/documents", content=body, headers=JSON)
    assert response.status_code == 401 and time.perf_counter() - started < 1.0


@pytest.mark.parametrize("path", ["/search", "/documents"])
def test_a_client_that_writes_its_whole_body_first_reads_the_413(server: ThreadServer, path: str) -> None:
    """urllib (like requests and httpx) sends the whole body before it reads: the refusal must still reach it,
    not a connection reset (the server reads and drops the body it refuses)."""
    request = urllib.request.Request(
        server.url + path, data=b"x" * (10 * 1024 * 1024), headers={**KEY, **JSON}, method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 413 and "larger than" in json.loads(refused.value.read())["detail"]


def test_a_chunked_body_over_the_bound_is_refused_and_the_connection_goes_on(server: ThreadServer) -> None:
    """No declared length: the bound is met while reading; the rest is read and dropped, so the client reads
    the 413 and its connection stays usable for the next request."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        chunks = (b"y" * 65536 for _ in range(200))  # 12.5 MiB, over the default 8 MiB bound
        connection.request("POST", "/documents", body=chunks, headers={**KEY, **JSON}, encode_chunked=True)
        response = connection.getresponse()
        assert response.status == 413 and "larger than" in json.loads(response.read())["detail"]
        connection.request("GET", "/healthz")
        assert connection.getresponse().status == 200
    finally:
        connection.close()


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/words/baba/nearest?k=abc&k=3", "k"),
        ("/documents/any/similar?k=2&k=3", "k"),
        ("/collections/documents/documents/any/similar?offset=0&offset=x", "offset"),
    ],
)
def test_a_repeated_query_parameter_is_refused(server: ThreadServer, path: str, name: str) -> None:
    """FastAPI would keep one of the values (k=abc&k=3 served as k=3): the request is refused instead."""
    response = server.client.get(path)
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == f"query parameter '{name}' is given 2 times: give it once"


def test_a_client_that_waits_for_100_continue_gets_the_413_before_it_sends(server: ThreadServer) -> None:
    """curl's way: headers with `Expect: 100-continue`, then wait. The 413 comes at once (no 100 Continue, so
    the body is never sent), saying the connection closes."""
    head = (
        "POST /documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"X-API-Key: {API_KEY}\r\nContent-Length: {10 * 1024 * 1024}\r\nExpect: 100-continue\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head.encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 413 Request Entity Too Large", answer
    assert b"connection: close" in rest.lower() and b"larger than" in rest


def test_every_integer_of_a_request_body_takes_a_whole_float() -> None:
    """One rule for integers on every route: 300.0 is the integer 300 (JSON Schema's "integer"; a client generated
    from the schema may send it), 1.5 and "300" stay refused (service.schemas.Integer)."""
    import importlib
    import pkgutil
    import typing

    import service
    from service.schemas import Strict, _integral

    for module in pkgutil.walk_packages(service.__path__, "service."):
        if module.name.startswith(("service.routes", "service.fields", "service.interleave", "service.events")) or (
            module.name in ("service.schemas", "service.advert_schemas")
        ):
            importlib.import_module(module.name)

    def subclasses(cls: type) -> list[type]:
        return [sub for direct in cls.__subclasses__() for sub in (direct, *subclasses(direct))]

    plain = []
    for model in subclasses(Strict):
        for name, field in model.model_fields.items():
            if int in (typing.get_args(field.annotation) or (field.annotation,)):
                if not any(getattr(meta, "func", None) is _integral for meta in field.metadata):
                    plain.append(f"{model.__module__}.{model.__name__}.{name}")
    assert plain == []
