"""Documents with fields over HTTP (service.fields): filtered search is the brute force among the matching
documents (flat and HNSW, exact scan and selector plans), pages are never short, facets count every matching
document, bad values and bad filters are 422s that write nothing, and fields survive a restart."""

from __future__ import annotations

import dataclasses
import json
import operator
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st
from service_testing import (
    API_KEY,
    TLS,
    Oracle,
    ThreadServer,
    assert_same_ranking,
    make_bundle,
    make_corpus,
    probe_queries,
    write_corpus,
)

from service.fields.checks import parse_filter
from service.fields.plan import filtered_ef
from service.settings import Settings
from service.store import DocumentStore
from ssi.corpus import DataFileError
from ssi.fields.filters import FilterBounds, matching_rows
from ssi.fields.index import FieldIndex, OrderedColumn
from ssi.fields.schema import parse_date
from ssi.fields.schema_file import read_schema
from ssi.records import Document

KEY = {"X-API-Key": API_KEY}
CATEGORIES = ["alpha", "beta", "gamma", "delta"]


def fields_of(i: int) -> dict[str, Any] | None:
    """Generated fields of document i: a 1 % category ("rare"), a keyword list, numbers, a date, a boolean; every
    tenth document has no price, every fiftieth no fields at all."""
    if i % 50 == 49:
        return None
    fields: dict[str, Any] = {
        "category": "rare" if i % 100 == 7 else CATEGORIES[i % 4],
        "tags": [f"t{i % 3}"] + (["odd"] if i % 2 else []),
        "year": 2000 + i % 20,
        "published": f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}",
        "on_sale": i % 5 == 0,
    }
    if i % 10 != 9:
        fields["price"] = round((i * 0.37) % 50, 2) + 0.5
    return fields


# Each filter with the same predicate in Python: the brute force keeps the documents for which it holds.
Predicate = Callable[[dict[str, Any]], bool]
FILTERS: dict[str, tuple[dict[str, Any], Predicate]] = {
    "rare (1 %)": ({"term": {"category": "rare"}}, lambda f: f.get("category") == "rare"),
    "broad (~74 %)": (
        {"terms": {"category": ["alpha", "beta", "gamma"]}},
        lambda f: f.get("category") in ("alpha", "beta", "gamma"),
    ),
    "and of two fields": (
        {"and": [{"term": {"category": "beta"}}, {"range": {"price": {"gte": 10, "lt": 30}}}]},
        lambda f: f.get("category") == "beta" and "price" in f and 10 <= f["price"] < 30,
    ),
    "date, not, or, exists": (
        {
            "and": [
                {"range": {"published": {"gte": "2024-03-01", "lt": "2024-09-01T00:00:00Z"}}},
                {"not": {"term": {"tags": "odd"}}},
                {"or": [{"exists": {"field": "price"}}, {"term": {"on_sale": True}}]},
            ]
        },
        lambda f: (
            "published" in f
            and date(2024, 3, 1) <= date.fromisoformat(f["published"]) < date(2024, 9, 1)
            and "odd" not in f.get("tags", [])
            and ("price" in f or f.get("on_sale") is True)
        ),
    ),
    "integer range, selector plan": (
        {"range": {"year": {"gt": 2003}}},
        lambda f: "year" in f and f["year"] > 2003,
    ),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("fields")
    docs = [dataclasses.replace(d, fields=fields_of(i)) for i, d in enumerate(make_corpus(400, seed=3))]
    corpus = write_corpus(root / "corpus.jsonl", docs)
    bundle = make_bundle(root / "bundle", docs)
    return {"root": root, "docs": docs, "corpus": corpus, "bundle": bundle, "oracle": Oracle(bundle, docs)}


@pytest.fixture(scope="module", params=["flat", "hnsw", "ivf"])
def server(world: dict, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The world served by a flat, an HNSW or an IVF index; a filter matching at most 5 % of the documents is
    scanned exactly, a broader one goes through the index with a selector (filter_exact_docs=0)."""
    settings: dict[str, Any] = dict(
        api_key=API_KEY,
        filter_exact_docs=0,
        filter_exact_fraction=0.05,
        facet_size=3,
        max_filter_depth=4,
        max_filter_terms=16,
        max_filter_clauses=16,
        index_type=request.param,
    )
    # A graph walk that sees every node, every list probed: the index's own misses out of the comparison.
    if request.param == "hnsw":
        settings.update(hnsw_m=8, hnsw_ef_construction=64, hnsw_ef_search=400)
    if request.param == "ivf":
        settings.update(ivf_nlist=8, ivf_nprobe=8)
    cache = tmp_path_factory.mktemp(f"served-{request.param}")
    with ThreadServer(bundle=world["bundle"], corpus=world["corpus"], cache_dir=cache, **settings) as s:
        yield {"server": s, **world}


def among(docs: list[Document], keep: Predicate) -> set[str]:
    """The documents a filter matches, by its predicate."""
    return {doc.id for doc in docs if doc.fields is not None and keep(doc.fields)}


@pytest.mark.parametrize("name", list(FILTERS))
def test_filtered_search_is_the_brute_force_among_matching_documents(server: dict, name: str) -> None:
    s, docs, oracle = server["server"], server["docs"], server["oracle"]
    node, keep = FILTERS[name]
    queries = probe_queries(docs, 2, seed=5)
    for query in queries:
        response = s.client.post("/search", json={"query": query, "k": 10, "filter": node, "fields": ["category"]})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["matched"] == sum(1 for d in docs if d.fields is not None and keep(d.fields))
        assert_same_ranking(body["hits"], oracle, query, 10, among=among(docs, keep))
        held = {d.id: d.fields for d in docs}
        assert all(hit["fields"] == {"category": held[hit["id"]]["category"]} for hit in body["hits"])
    batch = s.client.post("/search/batch", json={"queries": queries, "k": 5, "filter": node})
    assert batch.status_code == 200, batch.text
    for query, result in zip(queries, batch.json()["results"], strict=True):
        assert_same_ranking(result["hits"], oracle, query, 5, among=among(docs, keep))


def test_concurrent_filtered_searches_are_each_the_brute_force(server: dict) -> None:
    """Single filtered searches sent at once share the batcher (service.routes.search.FieldKey: one batch per
    filter): each answer is still the brute force among its own filter's documents, with its own count."""
    s, docs, oracle = server["server"], server["docs"], server["oracle"]
    names = list(FILTERS)
    asked = [(query, names[i % len(names)]) for i, query in enumerate(probe_queries(docs, 20, seed=11))]

    def ask(pair: tuple[str, str]) -> dict:
        with httpx.Client(base_url=s.url, timeout=60, verify=TLS) as client:
            response = client.post("/search", json={"query": pair[0], "k": 10, "filter": FILTERS[pair[1]][0]})
            assert response.status_code == 200, response.text
            return response.json()

    with ThreadPoolExecutor(len(asked)) as pool:
        answers = list(pool.map(ask, asked))
    for (query, name), body in zip(asked, answers, strict=True):
        keep = FILTERS[name][1]
        assert body["matched"] == sum(1 for d in docs if d.fields is not None and keep(d.fields))
        assert_same_ranking(body["hits"], oracle, query, 10, among=among(docs, keep))


def test_similar_documents_obey_a_filter(server: dict) -> None:
    """`GET /documents/{id}/similar?filter=...`: the stored document as the query, ranked among the matching
    documents only (itself left out), the same as without the filter where the filter keeps everything it found."""
    s, docs = server["server"], server["docs"]
    node, keep = FILTERS["and of two fields"]
    matching = {d.id for d in docs if d.fields is not None and keep(d.fields)}
    source = next(d for d in docs if d.id in matching)
    path = f"/documents/{quote(source.id, safe='')}/similar"
    filtered = s.client.get(path, params={"k": 50, "filter": json.dumps(node)})
    assert filtered.status_code == 200, filtered.text
    ids = [hit["id"] for hit in filtered.json()["hits"]]
    assert len(ids) == len(matching) - 1 and set(ids) == matching - {source.id}
    everything = [hit["id"] for hit in s.client.get(path, params={"k": 100}).json()["hits"]]
    among = [i for i in everything if i in matching]  # the unfiltered top 100's matching documents lead, in order
    assert among and among == ids[: len(among)]
    bad = s.client.get(path, params={"filter": "{not json"})
    assert bad.status_code == 422 and "filter: not JSON" in bad.json()["detail"]


def test_a_page_is_never_short_while_matching_documents_remain(server: dict) -> None:
    s, docs = server["server"], server["docs"]
    rare = [d.id for d in docs if d.fields and d.fields["category"] == "rare"]
    assert len(rare) == 4
    query = probe_queries(docs, 1, seed=9)[0]
    node = {"term": {"category": "rare"}}
    pages = []
    for offset in (0, 3):
        response = s.client.post("/search", json={"query": query, "k": 3, "offset": offset, "filter": node})
        assert response.status_code == 200, response.text
        pages.append([hit["id"] for hit in response.json()["hits"]])
    assert [len(page) for page in pages] == [3, 1]
    assert sorted(pages[0] + pages[1]) == sorted(rare)
    # A broad filter through the index (the selector plan): a full page deep into the matching documents.
    node = {"range": {"year": {"gte": 2001}}}
    response = s.client.post("/search", json={"query": query, "k": 50, "offset": 300, "filter": node})
    matched = response.json()["matched"]
    assert len(response.json()["hits"]) == min(50, matched - 300) > 0


def test_facets_count_every_matching_document(server: dict) -> None:
    s, docs = server["server"], server["docs"]
    node = {"range": {"price": {"lt": 25}}}
    keep = [d.fields for d in docs if d.fields and "price" in d.fields and d.fields["price"] < 25]
    response = s.client.post(
        "/search",
        json={"query": probe_queries(docs, 1, seed=2)[0], "k": 2, "filter": node, "facets": ["tags", "on_sale"]},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["matched"] == len(keep) and len(body["hits"]) == 2
    for name in ("tags", "on_sale"):
        counts: dict[Any, int] = {}
        for fields in keep:
            for value in fields[name] if isinstance(fields[name], list) else [fields[name]]:
                counts[value] = counts.get(value, 0) + 1
        expected = sorted(counts.items(), key=lambda pair: (-pair[1], str(pair[0])))
        facet = body["facets"][name]
        assert [(v["value"], v["count"]) for v in facet["values"]] == expected[:3]  # facet_size=3
        assert facet["other"] == sum(n for _, n in expected[3:])
    # Facets alone (no filter) count every document.
    response = s.client.post("/search", json={"query": "baba", "facets": ["category"]})
    values = {v["value"]: v["count"] for v in response.json()["facets"]["category"]["values"]}
    assert values == {c: sum(1 for d in docs if d.fields and d.fields["category"] == c) for c in values}

    # Without a filter the counts come from each value's rows less the dead ones: a replaced or deleted document's
    # old row counts no more.
    def counts() -> dict[str, int]:
        answer = s.client.post("/search", json={"query": "baba", "facets": ["category"]}).json()
        return {v["value"]: v["count"] for v in answer["facets"]["category"]["values"]}

    for category in ("alpha", "beta"):  # written, then replaced under another category
        written = s.client.put(
            "/documents/facet-1", json={"text": "baba", "fields": {"category": category}}, headers=KEY
        )
        assert written.status_code == 200, written.text
    assert counts() == {**values, "beta": values["beta"] + 1}
    assert s.client.delete("/documents/facet-1", headers=KEY).status_code == 200
    assert counts() == values


def test_a_value_of_another_type_is_a_409_and_nothing_is_written(server: dict) -> None:
    """A value of another type than its field's: 409 (well formed, but in conflict with the collection's types);
    a malformed value: 422. Either way nothing of the write is applied."""
    s = server["server"]
    batch = [
        {"id": "new-1", "text": "fine document", "fields": {"category": "alpha", "size": 3}},
        {"id": "new-2", "text": "bad document", "fields": {"price": "cheap"}},
    ]
    response = s.client.post("/documents", json={"documents": batch}, headers=KEY)
    assert response.status_code == 409, response.text
    assert "'price' has type float, was given keyword" in response.json()["detail"]
    assert s.client.get("/documents/new-1").status_code == 404
    # The new field "size" was not fixed either: a later first use decides its type.
    response = s.client.put("/documents/new-3", json={"text": "x", "fields": {"size": "large"}}, headers=KEY)
    assert response.status_code == 200, response.text
    got = s.client.get("/documents/new-3").json()
    assert got["fields"] == {"size": "large"}
    for fields, status, message in (
        ({"year": 2.5}, 409, "'year' has type integer, was given float"),
        ({"on_sale": "yes"}, 409, "'on_sale' has type boolean, was given keyword"),
        ({"published": "soon"}, 409, "'published' has type date, was given keyword"),
        ({"tags": "one"}, 409, "'tags' has type keyword_list, was given keyword"),
        ({"nested": {"a": 1}}, 422, "got dict"),
        ({"1st": "x"}, 422, "must start with a letter"),
        ({"none": None}, 422, "got null"),
    ):
        response = s.client.put("/documents/new-4", json={"text": "x", "fields": fields}, headers=KEY)
        assert response.status_code == status and message in response.json()["detail"], (fields, response.text)
    assert s.client.get("/documents/new-4").status_code == 404
    # A whole float is an integer (one rule for integers, as the routes take them).
    response = s.client.put("/documents/new-4", json={"text": "x", "fields": {"year": 2021.0}}, headers=KEY)
    assert response.status_code == 200 and s.client.get("/documents/new-4").json()["fields"] == {"year": 2021}
    for doc_id in ("new-3", "new-4"):
        assert s.client.delete(f"/documents/{doc_id}", headers=KEY).status_code == 200


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"match": {"category": "x"}}, "unknown filter operator 'match'"),
        ({"term": {"colour": "red"}}, "unknown field 'colour'"),
        ({"term": {"year": "old"}}, "'year' has type integer, was given keyword"),
        ({"range": {"category": {"gt": 1}}}, "range applies to integer, float and date fields"),
        ({"range": {"published": {"gte": "yesterday"}}}, "'published' has type date, was given keyword"),
        ({"range": {"price": {"gt": 1, "gte": 2}}}, "at most one lower bound"),
        ({"not": {"not": {"not": {"not": {"term": {"category": "x"}}}}}}, "at most 4 levels deep"),
        ({"terms": {"category": [f"c{i}" for i in range(17)]}}, "at most 16 values in all"),
        ({"or": [{"exists": {"field": "price"}}] * 16}, "at most 16 clauses"),
        ({"term": {"category": "a"}, "exists": {"field": "price"}}, "one operator"),
        ({"and": []}, "a non-empty list"),
    ],
)
def test_a_bad_filter_is_a_422_naming_the_problem(server: dict, node: dict, message: str) -> None:
    response = server["server"].client.post("/search", json={"query": "baba", "filter": node})
    assert response.status_code == 422 and message in response.json()["detail"], response.text


def test_fields_are_written_indexed_and_survive_a_restart(world: dict, tmp_path: Path) -> None:
    """Writes with fields are filtered at once; after a restart (the store reopened, the field index built again
    from it, the rows renumbered by the compaction at load: 2 dead rows of 403) the fields, the types and the
    filters are what they were; and after an online compaction (the field index renumbered) as well."""
    settings = dict(
        bundle=world["bundle"], corpus=world["corpus"], cache_dir=tmp_path, api_key=API_KEY, compact_dead_fraction=0.004
    )
    node = {"and": [{"term": {"category": "written"}}, {"range": {"published": {"gte": "2030-01-01"}}}]}
    query = probe_queries(world["docs"], 1, seed=4)[0]
    written = [
        {"id": f"w{i}", "title": "written", "text": world["docs"][i].text, "fields": {"category": "written",
         "published": f"2030-01-0{1 + i}T10:00:00+02:00"}}
        for i in range(3)
    ]  # fmt: skip
    with ThreadServer(**settings) as s:
        assert s.client.post("/documents", json={"documents": written}, headers=KEY).status_code == 200
        assert s.client.delete("/documents/w1", headers=KEY).status_code == 200
        replaced = {"text": written[2]["text"], "fields": {"category": "other", "published": "2031-01-01"}}
        assert s.client.put("/documents/w2", json=replaced, headers=KEY).status_code == 200
        before = s.client.post("/search", json={"query": query, "filter": node, "fields": ["published"]}).json()
        assert [hit["id"] for hit in before["hits"]] == ["w0"] and before["matched"] == 1
    with ThreadServer(**settings, snapshot_interval=0.2) as s:  # upkeep (and so compaction) every 0.2 s
        assert s.client.get("/model").json()["index"]["compacted_on_load"] is True
        after = s.client.post("/search", json={"query": query, "filter": node, "fields": ["published"]}).json()
        assert after["hits"] == before["hits"]
        other = s.client.post("/search", json={"query": query, "filter": {"term": {"category": "other"}}}).json()
        assert [hit["id"] for hit in other["hits"]] == ["w2"]
        assert s.client.get("/documents/w2").json()["fields"] == replaced["fields"]
        response = s.client.put("/documents/w5", json={"text": "x", "fields": {"published": 5}}, headers=KEY)
        assert response.status_code == 409 and "'published' has type date" in response.json()["detail"]
        moved = {"text": written[0]["text"], "fields": {"category": "written", "published": "2032-01-01"}}
        assert s.client.put("/documents/w0", json=moved, headers=KEY).status_code == 200
        assert s.client.delete("/documents/doc-00010", headers=KEY).status_code == 200
        deadline = time.monotonic() + 20
        while s.client.get("/model").json()["index"]["dead_rows"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.client.get("/model").json()["index"]["dead_rows"] == 0  # compacted online
        found = s.client.post("/search", json={"query": query, "filter": node, "fields": ["published"]}).json()
        assert [(hit["id"], hit["fields"]) for hit in found["hits"]] == [("w0", {"published": "2032-01-01"})]
        other = s.client.post("/search", json={"query": query, "filter": {"term": {"category": "other"}}}).json()
        assert [hit["id"] for hit in other["hits"]] == ["w2"]


def test_a_graph_walk_cut_off_by_the_filter_is_made_up_for(world: dict, tmp_path: Path) -> None:
    """A weak HNSW graph (m=4, efSearch 4) searched with a 1 % filter as its selector comes back short; the query
    is then scanned exactly instead: a full, exact page, never a post-filtered short one."""
    settings = dict(index_type="hnsw", hnsw_m=4, hnsw_ef_search=4, candidate_pool=4, filter_exact_docs=0,
                    filter_exact_fraction=0.0)  # fmt: skip
    docs, oracle = world["docs"], world["oracle"]
    node, keep = FILTERS["rare (1 %)"]
    # Beside it, a collection whose spec declares a type: its dates are keywords (service.settings.CollectionSpec).
    shop = {"bundle": world["bundle"], "corpus": world["corpus"], "fields": {"published": "keyword"}}
    with ThreadServer(
        bundle=world["bundle"], corpus=world["corpus"], cache_dir=tmp_path, collections={"shop": shop}, **settings
    ) as s:
        for query in probe_queries(docs, 3, seed=5):
            response = s.client.post("/search", json={"query": query, "k": 10, "filter": node})
            assert response.status_code == 200, response.text
            assert_same_ranking(response.json()["hits"], oracle, query, 10, among=among(docs, keep))
        day = {"query": "baba", "filter": {"term": {"published": "2024-02-02"}}}
        on_that_day = sum(1 for d in docs if d.fields and d.fields["published"] == "2024-02-02")
        assert s.client.post("/collections/shop/search", json=day).json()["matched"] == on_that_day > 0
        later = {"query": "baba", "filter": {"range": {"published": {"gte": "2024-02-02"}}}}
        response = s.client.post("/collections/shop/search", json=later)
        assert response.status_code == 422 and "'published' is a keyword" in response.json()["detail"]
        assert s.client.post("/search", json=later).status_code == 200  # a date in the other collection


def test_a_schema_file_declares_the_default_collections_types(
    world: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ssi serve --schema FILE` and SSI_SCHEMA feed one setting: the default collection's declared types, which the
    store takes before the corpus (a date-like value stays a keyword); a corpus line contradicting them is an error
    naming the line, the field and both types, and nothing is imported."""
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"published": "keyword", "sku": "keyword"}), encoding="utf-8")
    by_flag = Settings(bundle=world["bundle"], corpus=world["corpus"], schema_file=schema)
    monkeypatch.setenv("SSI_SCHEMA", str(schema))
    by_env = Settings(bundle=world["bundle"], corpus=world["corpus"])
    for settings in (by_flag, by_env):
        assert settings.collection_specs()["documents"].fields == {"published": "keyword", "sku": "keyword"}
    spec = by_env.collection_specs()["documents"]
    store = DocumentStore.open_for_corpus(tmp_path / "stores", "documents", world["corpus"], fields=spec.fields)
    try:
        types = store.field_types()
        assert types["published"] == "keyword" and types["sku"] == "keyword" and types["year"] == "integer"
    finally:
        store.close()
    schema.write_text(json.dumps({"price": "keyword"}), encoding="utf-8")
    first = next(i for i, d in enumerate(world["docs"]) if d.fields and "price" in d.fields)
    with pytest.raises(DataFileError) as clash:
        DocumentStore.open_for_corpus(tmp_path / "clash", "documents", world["corpus"], fields=read_schema(schema))
    message = str(clash.value)
    assert (
        message.startswith(f"{world['corpus']}:{first + 1}: ")
        and "field 'price' has type keyword, was given float" in message
    )
    monkeypatch.delenv("SSI_SCHEMA")
    with pytest.raises(ValueError, match="declares the default collection's field types, and there is none"):
        Settings(schema_file=schema)


# The world's field names (fields_of), and "size" if the type test wrote it first.
WORLD_FIELDS = {"category", "tags", "year", "published", "on_sale", "price", "size"}


def test_a_filtered_hnsw_walk_widens_with_the_filter_within_a_bound() -> None:
    """HNSW's ef_search under a filter (service.fields.plan.filtered_ef): ef / √share, never below the default,
    at most four times it."""
    assert filtered_ef(128, 100_000, 100_000) == 128
    assert filtered_ef(128, 50_000, 100_000) == 182
    assert filtered_ef(128, 10_000, 100_000) == 405
    assert filtered_ef(128, 100, 100_000) == filtered_ef(128, 0, 100_000) == 512


def test_the_published_schema_names_the_fields(server: dict) -> None:
    """A search's facets list the keyword fields and its filter is offered (service.openapi): a client generated
    from the schema sends names the server knows. (A server whose collections have no fields publishes neither.)"""
    schemas = server["server"].client.get("/openapi.json").json()["components"]["schemas"]
    properties = schemas["SearchRequest"]["properties"]
    keyword = set(properties["facets"]["items"]["enum"])  # and "size", if the type test wrote it first
    assert {"category", "on_sale", "tags"} <= keyword and not {"price", "year", "published"} & keyword
    assert properties["filter"]["anyOf"][0]["type"] == "object"
    # Every field with its type (the search page offers facets and ranges from it: service/static/fields.js).
    types = properties["fields"]["x-field-types"]
    assert {"category": "keyword", "tags": "keyword_list", "on_sale": "boolean"}.items() <= types.items()
    assert {"price": "float", "year": "integer", "published": "date"}.items() <= types.items()
    fields = schemas["DocumentBody"]["properties"]["fields"]["anyOf"][0]
    assert fields["maxProperties"] == 64 and fields["propertyNames"]["pattern"].startswith("^[A-Za-z_]")
    # Examples made of the collection's own fields: sent as they are, each is answered 200 (a fuzzer sends them).
    filter_ex, facets_ex = properties["filter"]["examples"][0], properties["facets"]["examples"][0]
    fields_ex = properties["fields"]["examples"][0]
    assert filter_ex == {"and": [{"term": {"category": "example"}}, {"range": {"price": {"gte": 1.5}}}]}
    assert set(facets_ex) <= keyword and set(fields_ex) <= WORLD_FIELDS
    client = server["server"].client
    body = {"filter": filter_ex, "facets": facets_ex, "fields": fields_ex}
    assert client.post("/search", json={**body, "query": "baba"}).status_code == 200
    batch = schemas["BatchSearchRequest"]["properties"]
    assert batch["filter"]["examples"] == [filter_ex] and batch["facets"]["examples"] == [facets_ex]
    assert client.post("/search/batch", json={**body, "queries": ["baba", "bibi"]}).status_code == 200
    for name in ("DocumentBody", "DocumentIn"):
        written = schemas[name]["properties"]["fields"]["examples"][0]
        assert written and set(written) <= WORLD_FIELDS
    response = client.put("/documents/example-doc", json={"text": "baba", "fields": written}, headers=KEY)
    assert response.status_code == 200, response.text
    assert client.delete("/documents/example-doc", headers=KEY).status_code == 200
    # /similar's filter is a query parameter holding a search body's filter as JSON (OpenAPI's `content`), and the
    # facets a request may name are bounded by SSI_MAX_FACETS, as the server checks them (a fuzzer found both).
    spec = client.get("/openapi.json").json()
    similar = {p["name"]: p for p in spec["paths"]["/documents/{doc_id}/similar"]["get"]["parameters"]}
    assert similar["filter"]["content"]["application/json"]["schema"]["examples"] == [filter_ex]
    assert properties["facets"]["maxItems"] == 8


# Random fields and random filters: the field index's answer is the brute force's (ssi.fields.filters).
_DAYS = ["2024-01-01", "2024-01-02T12:00:00Z", "2024-01-03", "2024-02-01T00:00:00+01:00"]
_TYPES = {"kw": "keyword", "tags": "keyword_list", "n": "integer", "x": "float", "flag": "boolean", "day": "date"}
_row_fields = st.fixed_dictionaries(
    {},
    optional={
        "kw": st.sampled_from(["a", "b", "c"]),
        "tags": st.lists(st.sampled_from(["x", "y", "z"]), max_size=3, unique=True),
        "n": st.integers(-3, 3),
        "x": st.sampled_from([-1.5, 0.0, 0.25, 2.0]),
        "flag": st.booleans(),
        "day": st.sampled_from(_DAYS),
    },
)
_leaf = st.one_of(
    st.builds(lambda v: {"term": {"kw": v}}, st.sampled_from(["a", "b", "d"])),
    st.builds(lambda v: {"terms": {"tags": v}}, st.lists(st.sampled_from(["x", "y", "w"]), min_size=1, max_size=3)),
    st.builds(lambda v: {"term": {"flag": v}}, st.booleans()),
    st.builds(lambda v: {"term": {"n": v}}, st.integers(-3, 3)),
    st.builds(
        lambda name, bounds: {"range": {name: bounds}},
        st.sampled_from(["n", "x"]),
        st.dictionaries(st.sampled_from(["gt", "lt"]), st.sampled_from([-2, 0, 0.25, 1]), min_size=1)
        | st.dictionaries(st.sampled_from(["gte", "lte"]), st.sampled_from([-2, 0, 0.25, 1]), min_size=1),
    ),
    st.builds(lambda v: {"range": {"day": {"gte": v}}}, st.sampled_from(_DAYS)),
    st.builds(lambda name: {"exists": {"field": name}}, st.sampled_from(list(_TYPES))),
)
_filters = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.builds(lambda c: {"and": c}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda c: {"or": c}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda c: {"not": c}, inner),
    ),
    max_leaves=6,
)


def _holds(node: dict[str, Any], fields: dict[str, Any]) -> bool:
    """The filter's meaning, written out plainly."""
    ((op, body),) = node.items()
    if op in ("and", "or"):
        results = [_holds(clause, fields) for clause in body]
        return all(results) if op == "and" else any(results)
    if op == "not":
        return not _holds(body, fields)
    if op == "exists":
        value = fields.get(body["field"])
        return value is not None and value != []
    ((name, wanted),) = body.items()
    value = fields.get(name)
    if value is None:
        return False
    if op in ("term", "terms"):
        values = wanted if op == "terms" else [wanted]
        have = value if isinstance(value, list) else [value]
        return any(v in have and type(v) is type(h) for v in values for h in have if v == h)
    number = parse_date(value) if name == "day" else value
    limits = {key: parse_date(bound) if name == "day" else bound for key, bound in wanted.items()}
    checks = {"gt": operator.gt, "gte": operator.ge, "lt": operator.lt, "lte": operator.le}
    return all(checks[key](number, bound) for key, bound in limits.items())


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(rows=st.lists(_row_fields, max_size=30), dead=st.sets(st.integers(0, 29)), node=_filters)
def test_random_filters_over_random_fields_match_the_brute_force(
    rows: list[dict[str, Any]], dead: set[int], node: dict[str, Any]
) -> None:
    half = len(rows) // 2  # half built and sorted, half appended to the unsorted tails afterwards (as writes are)
    index = FieldIndex.build(_TYPES, enumerate(rows[:half]))
    for row, fields in enumerate(rows[half:], half):
        index.add(row, fields)
    live = np.ones(len(rows), dtype=bool)
    for row in dead & set(range(len(rows))):
        index.kill(row)
        live[row] = False
    clause = parse_filter(node, dict(_TYPES), FilterBounds(64, 64, 8))
    expected = [row for row, fields in enumerate(rows) if live[row] and _holds(node, fields)]
    assert matching_rows(clause, index, live).tolist() == expected
    # Compacted: the live rows renumbered 0 … n − 1 (as service.state_builder.compacted does), the same documents.
    kept = np.flatnonzero(live)
    compacted = index.remapped(kept)
    renumbered = np.searchsorted(kept, expected).tolist()
    assert matching_rows(clause, compacted, np.ones(kept.shape[0], dtype=bool)).tolist() == renumbered


def test_a_range_over_many_rows_is_the_brute_force() -> None:
    """Ranges over 20,000 rows (runs of BUCKET_ROWS whole and cut, ties, appended values not yet sorted in)."""
    rng = np.random.default_rng(0)
    values = rng.integers(0, 500, 20_000)
    column = OrderedColumn(np.int64)
    for row, value in enumerate(values[:19_000].tolist()):
        column.add(row, value)
    column.merge()
    for row, value in enumerate(values[19_000:].tolist(), 19_000):
        column.add(row, value)  # the tail
    for _ in range(100):
        low, high = sorted(rng.integers(-10, 510, 2).tolist())
        low_open, high_open = rng.integers(0, 2, 2).astype(bool).tolist()
        above = values > low if low_open else values >= low
        below = values < high if high_open else values <= high
        found = np.frombuffer(column.between(low, low_open, high, high_open).to_array(), dtype=np.uint32)
        assert found.tolist() == np.flatnonzero(above & below).tolist(), (low, low_open, high, high_open)
