"""Who may do what (issue 14, defect 11): an optional read key, an admin key for reloads, no server
paths in /model, and an optional Host check."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest
from service_testing import API_KEY, ThreadServer, random_form

from ssi.bundle import write_bundle
from ssi.vocab import Vocabulary
from training.encoder import build_encoder

READ_KEY = "read-key-0123456789abcdef"
ADMIN_KEY = "admin-key-0123456789abcdef"
WRONG = "wrong-key-0123456789abcdef"

READS = [
    ("post", "/search", {"json": {"query": "baba"}}),
    ("post", "/search/batch", {"json": {"queries": ["baba"]}}),
    ("post", "/collections/documents/search", {"json": {"query": "baba"}}),
    ("get", "/documents/" + quote("C++", safe=""), {}),
    ("get", "/documents/" + quote("C++", safe="") + "/similar", {}),
    ("get", "/collections/documents/documents/doc-00042", {}),
    ("get", "/model", {}),
    ("get", "/collections/documents/model", {}),
    ("get", "/metrics", {}),
]


@pytest.fixture(scope="module")
def bundle_with_paths(small_world: dict) -> Path:
    """The small world's model in a bundle whose manifest names server paths, as `ssi train` writes them."""
    docs = small_world["docs"]
    vocab = Vocabulary.build([d.full_text for d in docs], min_df=1)
    form = random_form("lowrank", 16, vocab.size)
    path = small_world["root"] / "bundles" / "with-paths"
    secret = "/srv/secret-data/wiki"
    write_bundle(
        path,
        form=form,
        vocab=vocab,
        encoder_onnx=build_encoder(form.query_map()),
        training={"config": {"corpus": f"{secret}/docs.jsonl.gz", "pairs": f"{secret}/links.tsv", "out": "bundles/x"}},
        data={"fingerprint": "abc", "source": f"{secret}/docs.jsonl.gz", "task": "document-document"},
    )
    return path


@pytest.fixture(scope="module")
def server(small_world: dict, bundle_with_paths: Path, tmp_path_factory: pytest.TempPathFactory):
    settings = dict(
        api_key=API_KEY, read_key=READ_KEY, admin_key=ADMIN_KEY, allowed_hosts=["search.example.com", "*.example.org"]
    )
    cache = tmp_path_factory.mktemp("cache")
    with ThreadServer(bundle=bundle_with_paths, corpus=small_world["corpus"], cache_dir=cache, **settings) as s:
        yield s


@pytest.mark.parametrize(("method", "path", "kwargs"), READS, ids=lambda v: str(v)[:40])
def test_with_a_read_key_every_read_needs_a_key(server: ThreadServer, method: str, path: str, kwargs: dict) -> None:
    for headers in ({}, {"X-API-Key": WRONG}, {"X-API-Key": READ_KEY[:-1]}):
        response = server.client.request(method, path, headers=headers, **kwargs)
        assert response.status_code == 401, (headers, response.text)
        assert "X-API-Key" in response.json()["detail"] and response.headers["www-authenticate"] == "X-API-Key"
    for key in (READ_KEY, API_KEY, ADMIN_KEY):  # a writer or an admin may read too
        response = server.client.request(method, path, headers={"X-API-Key": key}, **kwargs)
        assert response.status_code == 200, (key, response.text)


def test_health_and_readiness_need_no_key(server: ThreadServer) -> None:
    assert server.client.get("/healthz").status_code == 200
    assert server.client.get("/readyz").status_code == 200


def test_the_read_key_does_not_write_and_the_write_key_does_not_reload(server: ThreadServer) -> None:
    read = {"X-API-Key": READ_KEY}
    assert server.client.put("/documents/r1", json={"text": "baba"}, headers=read).status_code == 401
    assert server.client.post("/admin/reload", json={}, headers=read).status_code == 401
    assert server.client.post("/admin/reload", json={}, headers={"X-API-Key": API_KEY}).status_code == 401
    assert server.client.put("/documents/r1", json={"text": "baba"}, headers={"X-API-Key": API_KEY}).is_success
    reloaded = server.client.post("/admin/reload", json={}, headers={"X-API-Key": ADMIN_KEY})
    assert reloaded.status_code == 200, reloaded.text


def test_without_an_admin_key_the_write_key_reloads(small_world: dict, tmp_path: Path) -> None:
    with ThreadServer(
        bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path, api_key=API_KEY
    ) as s:
        assert s.client.post("/search", json={"query": "baba"}).status_code == 200  # no read key: reads are open
        assert s.client.post("/admin/reload", json={}, headers={"X-API-Key": API_KEY}).status_code == 200


def test_model_shows_no_server_paths(server: ThreadServer, bundle_with_paths: Path) -> None:
    response = server.client.get("/model", headers={"X-API-Key": READ_KEY})
    body = response.json()
    assert body["bundle"] == "with-paths"
    assert str(bundle_with_paths.parent) not in response.text and "/srv/secret-data" not in response.text
    assert body["training"]["config"]["corpus"] == "docs.jsonl.gz"
    assert body["data"] == {"fingerprint": "abc", "source": "docs.jsonl.gz", "task": "document-document"}


@pytest.mark.parametrize("host", ["evil.example", "search.example.com.evil.example", "example.org"])
def test_a_foreign_host_header_is_refused_with_json(server: ThreadServer, host: str) -> None:
    for path in ("/healthz", "/search"):
        response = (
            server.client.post(path, headers={"host": host})
            if path == "/search"
            else server.client.get(path, headers={"host": host})
        )
        assert response.status_code == 400, response.text
        assert "Host" in response.json()["detail"]


@pytest.mark.parametrize("host", ["search.example.com", "api.example.org", "localhost", "127.0.0.1"])
def test_allowed_and_loopback_hosts_are_served(server: ThreadServer, host: str) -> None:
    assert server.client.get("/healthz", headers={"host": host}).status_code == 200


def test_the_schema_declares_the_keys_it_enforces(server: ThreadServer, small_world: dict, tmp_path: Path) -> None:
    spec = server.client.get("/openapi.json").json()
    assert spec["paths"]["/search"]["post"]["security"] == [{"ReadKey": []}]
    assert spec["paths"]["/documents/{doc_id}"]["put"]["security"] == [{"WriteKey": []}]
    assert spec["paths"]["/admin/reload"]["post"]["security"] == [{"AdminKey": []}]
    assert "security" not in spec["paths"]["/healthz"]["get"]
    assert "400" in spec["paths"]["/healthz"]["get"]["responses"]  # the Host check
    with ThreadServer(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path) as open_server:
        spec = open_server.client.get("/openapi.json").json()
        assert "security" not in spec["paths"]["/search"]["post"]
        assert "400" not in spec["paths"]["/healthz"]["get"]["responses"]


def test_an_admin_key_alone_reloads_but_does_not_write(small_world: dict, tmp_path: Path) -> None:
    settings = dict(bundle=small_world["bundle"], corpus=small_world["corpus"], cache_dir=tmp_path, admin_key=ADMIN_KEY)
    with ThreadServer(**settings) as s:
        admin = {"X-API-Key": ADMIN_KEY}
        assert s.client.post("/admin/reload", json={}, headers=admin).status_code == 200
        assert s.client.post("/admin/reload", json={}).status_code == 401
        response = s.client.put("/documents/a1", json={"text": "baba"}, headers=admin)
        assert response.status_code == 403 and "SSI_API_KEY" in response.json()["detail"]


@pytest.mark.parametrize("size", [10 * 1024 * 1024, 100])
def test_a_client_that_writes_its_whole_body_first_reads_the_host_refusal(server: ThreadServer, size: int) -> None:
    """urllib sends the whole body before it reads: the 400 for an unknown Host must reach it, not a connection
    reset (the refused body is read and dropped first, as for a 413)."""
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        server.url + "/documents",
        data=b"x" * size,
        headers={"Host": "evil.example.net", "Content-Type": "application/json", "X-API-Key": API_KEY},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 400 and "Host header not allowed" in json.loads(refused.value.read())["detail"]
