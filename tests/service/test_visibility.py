"""Per-key visibility (service.fields.visibility): a read key with a filter sees only the documents inside it, on
every read route, and the tests try to get past it: guessed ids, `similar` on a foreign id, facets, the batch
route, a request filter that ORs its way out, a key whose field no document has yet, clicks on foreign impressions.

One server for the module: two tenants' documents (acme: even, globex: odd), an unfiltered read key to compare with,
a filtered key per tenant (globex's from SSI_READ_KEYS_FILE) and one whose field does not exist."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from pydantic import ValidationError
from service_testing import API_KEY, ThreadServer, make_bundle, make_corpus, needle_of, probe_queries, write_corpus

from service.fields.checks import parse_filter
from service.fields.visibility import KEY_FILTER_BOUNDS, admits, read_key_id
from service.settings import Settings
from ssi.records import Document
from ssi.traffic import EVENTS_FILE, canonical_filter, read_events

READ_KEY = "read-key-unfiltered-0001"
ACME_KEY = "acme-read-key-0001"
GLOBEX_KEY = "globex-read-key-0001"
GHOST_KEY = "ghost-read-key-0001"  # its field ("region") no document has, until one is written
ACME = {"term": {"tenant": "acme"}}
GLOBEX = {"term": {"tenant": "globex"}}
MISSING = "no-such-document"


def headers(key: str) -> dict[str, str]:
    return {"X-API-Key": key}


def tenant_of(i: int) -> str:
    return "acme" if i % 2 == 0 else "globex"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("visibility")
    docs = [
        dataclasses.replace(d, fields={"tenant": tenant_of(i), "category": f"{tenant_of(i)}-{i % 3}"})
        for i, d in enumerate(make_corpus(120, seed=5))
    ]
    keys_file = root / "keys.json"
    keys_file.write_text(json.dumps({GLOBEX_KEY: GLOBEX}), encoding="utf-8")
    with ThreadServer(
        bundle=make_bundle(root / "bundle", docs),
        corpus=write_corpus(root / "corpus.jsonl", docs),
        cache_dir=root / "cache",
        api_key=API_KEY,
        read_key=READ_KEY,
        read_keys={ACME_KEY: ACME, GHOST_KEY: {"term": {"region": "eu"}}},
        read_keys_file=keys_file,
    ) as server:
        yield {
            "server": server,
            "docs": docs,
            "tenant": {d.id: tenant_of(i) for i, d in enumerate(docs)},
            "queries": probe_queries(docs, 8, seed=1),
        }


def search(world: dict, key: str, query: str, **body: Any) -> dict:
    response = world["server"].client.post("/search", json={"query": query, "k": 50, **body}, headers=headers(key))
    assert response.status_code == 200, response.text
    return response.json()


def ids(answer: dict) -> list[str]:
    return [hit["id"] for hit in answer["hits"]]


def foreign(world: dict, tenant: str = "globex") -> list[Document]:
    return [d for d in world["docs"] if world["tenant"][d.id] == tenant]


def test_a_filtered_key_ranks_exactly_its_own_documents(world: dict) -> None:
    """The key's search is the unfiltered key's with the tenant's filter: same hits, same order, none foreign; the
    same queries by the unfiltered key rank foreign documents among the first (so something was taken out)."""
    foreign_above = 0
    for query in world["queries"]:
        own = search(world, ACME_KEY, query)
        assert {world["tenant"][i] for i in ids(own)} <= {"acme"}
        assert ids(own) == ids(search(world, READ_KEY, query, filter=ACME))
        foreign_above += sum(world["tenant"][i] == "globex" for i in ids(search(world, READ_KEY, query))[:10])
    assert foreign_above >= len(world["queries"])


def test_the_batch_route_is_restricted_too(world: dict) -> None:
    queries = [*world["queries"][:4], *(needle_of(d) for d in foreign(world)[:3])]  # foreign documents' words
    response = world["server"].client.post(
        "/search/batch", json={"queries": queries, "k": 20}, headers=headers(ACME_KEY)
    )
    assert response.status_code == 200, response.text
    for result in response.json()["results"]:
        assert result["hits"] and {world["tenant"][h["id"]] for h in result["hits"]} == {"acme"}


def test_a_guessed_id_is_absent_not_forbidden(world: dict) -> None:
    """A foreign id answers exactly as an id that does not exist (the same status and body but for the id)."""
    client = world["server"].client
    target = foreign(world)[0].id
    guessed = client.get(f"/documents/{quote(target, safe='')}", headers=headers(ACME_KEY))
    missing = client.get(f"/documents/{MISSING}", headers=headers(ACME_KEY))
    assert guessed.status_code == missing.status_code == 404
    assert guessed.json() == json.loads(missing.text.replace(MISSING, target))
    assert client.get(f"/documents/{quote(target, safe='')}", headers=headers(GLOBEX_KEY)).status_code == 200
    assert client.get(f"/documents/{quote(target, safe='')}", headers=headers(READ_KEY)).status_code == 200


def test_similar_on_a_foreign_id_is_not_found_and_own_similar_stays_inside(world: dict) -> None:
    client = world["server"].client
    target = quote(foreign(world)[0].id, safe="")
    refused = client.get(f"/documents/{target}/similar", headers=headers(ACME_KEY))
    missing = client.get(f"/documents/{MISSING}/similar", headers=headers(ACME_KEY))
    assert refused.status_code == missing.status_code == 404
    own = quote(foreign(world, "acme")[0].id, safe="")
    answer = client.get(f"/documents/{own}/similar", params={"k": 30}, headers=headers(ACME_KEY))
    assert answer.status_code == 200, answer.text
    assert answer.json()["hits"] and {world["tenant"][h["id"]] for h in answer.json()["hits"]} == {"acme"}


def test_facets_count_only_the_keys_documents(world: dict) -> None:
    query = world["queries"][0]
    own = search(world, ACME_KEY, query, facets=["category", "tenant"])
    expected = search(world, READ_KEY, query, facets=["category", "tenant"], filter=ACME)
    assert own["facets"] == expected["facets"]
    assert own["matched"] == expected["matched"] == len(foreign(world, "acme"))
    assert [v["value"] for v in own["facets"]["tenant"]["values"]] == ["acme"]
    assert all(v["value"].startswith("acme-") for v in own["facets"]["category"]["values"])


@pytest.mark.parametrize(
    "escape",
    [
        {"or": [{"term": {"tenant": "acme"}}, {"term": {"tenant": "globex"}}]},
        {"or": [GLOBEX, {"not": ACME}]},
        {"not": ACME},
    ],
)
def test_a_request_filter_cannot_widen_the_keys(world: dict, escape: dict) -> None:
    for query in world["queries"][:3]:
        answer = search(world, ACME_KEY, query, filter=escape, facets=["tenant"])
        assert {world["tenant"][i] for i in ids(answer)} <= {"acme"}
        assert all(v["value"] == "acme" for v in answer["facets"]["tenant"]["values"])


def test_clicks_on_a_foreign_impression_are_unknown(world: dict) -> None:
    client = world["server"].client
    theirs = search(world, GLOBEX_KEY, world["queries"][0])
    click = {"impression": theirs["impression"], "id": theirs["hits"][0]["id"]}
    refused = client.post("/clicks", json=click, headers=headers(ACME_KEY))
    never_issued = client.post("/clicks", json={**click, "impression": "x" * 32}, headers=headers(ACME_KEY))
    assert refused.status_code == 404
    assert refused.json() == never_issued.json()
    assert client.post("/clicks", json=click, headers=headers(GLOBEX_KEY)).status_code == 200
    mine = search(world, ACME_KEY, world["queries"][0])
    own_click = {"impression": mine["impression"], "id": mine["hits"][0]["id"]}
    assert client.post("/clicks", json=own_click, headers=headers(ACME_KEY)).status_code == 200


def test_the_traffic_log_keeps_each_lists_filter_and_names_the_key_by_a_hash(world: dict) -> None:
    """What `ssi learn` replays (training.feedback): each impression's request filter and its filtered read key's
    filter and hash (service.events), never the key; an unfiltered key's unfiltered search records none."""
    query, server = world["queries"][1], world["server"]
    asked = {"terms": {"category": ["acme-0", "globex-1"]}}
    keyed = search(world, ACME_KEY, query, filter=asked)["impression"]
    plain = search(world, READ_KEY, query)["impression"]
    batch = server.client.post(
        "/search/batch", json={"queries": [query], "k": 5, "filter": asked}, headers=headers(READ_KEY)
    ).json()["results"][0]["impression"]
    server.app.state.traffic.flush()
    events = server.settings.store_dir / "documents" / EVENTS_FILE
    logged = {r.impression: (r.filter, r.read_key, r.key_filter) for r in read_events(events)}
    assert logged[keyed] == (canonical_filter(asked), read_key_id(ACME_KEY), canonical_filter(ACME))
    assert logged[batch] == (canonical_filter(asked), None, None) and logged[plain] == (None, None, None)
    assert ACME_KEY.encode() not in events.read_bytes() + events.with_name(EVENTS_FILE + "-wal").read_bytes()


def test_match_refuses_a_filtered_key_rather_than_answer_unfiltered(world: dict) -> None:
    response = world["server"].client.post("/match", json={"page": "a page"}, headers=headers(ACME_KEY))
    assert response.status_code == 403
    assert "SSI_READ_KEYS" in response.json()["detail"]


def test_keys_are_still_needed_and_unfiltered_keys_see_everything(world: dict) -> None:
    client = world["server"].client
    assert client.post("/search", json={"query": "x"}).status_code == 401
    assert client.post("/search", json={"query": "x"}, headers=headers("not-a-key-of-this-server")).status_code == 401
    tenants = {world["tenant"][i] for q in world["queries"] for i in ids(search(world, READ_KEY, q))}
    assert tenants == {"acme", "globex"}


def test_a_key_whose_field_does_not_exist_sees_nothing_until_it_does(world: dict) -> None:
    """Decided: a key's filter over a field the collection lacks (or of another type) hides everything."""
    client = world["server"].client
    any_id = quote(world["docs"][0].id, safe="")
    assert ids(search(world, GHOST_KEY, world["queries"][0])) == []
    assert search(world, GHOST_KEY, world["queries"][0], facets=["tenant"])["matched"] == 0
    assert client.get(f"/documents/{any_id}", headers=headers(GHOST_KEY)).status_code == 404
    # Written with the field, a document becomes the ghost key's, and only that one.
    text = "zebulon quartzite " + world["docs"][0].text
    written = client.put(
        "/documents/eu-1", json={"title": "eu", "text": text, "fields": {"region": "eu"}}, headers=headers(API_KEY)
    )
    assert written.status_code == 200, written.text
    assert ids(search(world, GHOST_KEY, needle_of(world["docs"][0]))) == ["eu-1"]
    assert client.get("/documents/eu-1", headers=headers(GHOST_KEY)).status_code == 200
    assert client.get("/documents/eu-1", headers=headers(ACME_KEY)).status_code == 404


def test_a_document_moved_to_another_tenant_leaves_the_old_one(world: dict) -> None:
    client = world["server"].client
    text = world["docs"][2].text
    for tenant in ("acme", "globex"):
        written = client.put(
            "/documents/moving",
            json={"title": "m", "text": text, "fields": {"tenant": tenant}},
            headers=headers(API_KEY),
        )
        assert written.status_code == 200, written.text
    assert client.get("/documents/moving", headers=headers(ACME_KEY)).status_code == 404
    assert client.get("/documents/moving", headers=headers(GLOBEX_KEY)).status_code == 200
    assert "moving" not in ids(search(world, ACME_KEY, needle_of(world["docs"][2])))
    assert "moving" in ids(search(world, GLOBEX_KEY, needle_of(world["docs"][2])))


@pytest.mark.parametrize(
    ("node", "fields", "inside"),
    [
        (ACME, {"tenant": "acme"}, True),
        (ACME, {"tenant": "globex"}, False),
        (ACME, None, False),
        ({"term": {"tags": "a"}}, {"tags": ["b", "a"]}, True),
        ({"range": {"day": {"gte": "2024-03-01"}}}, {"day": "2024-02-29"}, False),
        ({"not": {"exists": {"field": "tenant"}}}, {"other": "x"}, True),
    ],
)
def test_a_stored_documents_fields_are_checked_as_the_index_checks_them(node: dict, fields: Any, inside: bool) -> None:
    """What a read by id (and each hit as read) is checked with: the key's clause over that one document."""
    types = {"tenant": "keyword", "tags": "keyword_list", "day": "date"}
    assert admits(parse_filter(node, types, KEY_FILTER_BOUNDS), types, fields) is inside


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"short": ACME}, "at least 16 characters"),
        ({ACME_KEY: {"match": {"tenant": "acme"}}}, "unknown filter operator"),
        ({ACME_KEY: {"and": []}}, "non-empty list"),
        ({API_KEY: ACME}, "given twice"),
    ],
)
def test_settings_refuse_a_bad_filtered_key(keys: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(api_key=API_KEY, read_keys=keys)


def test_settings_read_keys_from_the_environment_and_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "keys.json").write_text(json.dumps({GLOBEX_KEY: GLOBEX}), encoding="utf-8")
    monkeypatch.setenv("SSI_READ_KEYS", json.dumps({ACME_KEY: ACME}))
    monkeypatch.setenv("SSI_READ_KEYS_FILE", str(tmp_path / "keys.json"))
    settings = Settings()
    assert [(k.key.get_secret_value(), k.filter) for k in settings.read_keys] == [
        (ACME_KEY, ACME),
        (GLOBEX_KEY, GLOBEX),
    ]
    assert settings.reads_need_key and ACME_KEY not in repr(settings)
