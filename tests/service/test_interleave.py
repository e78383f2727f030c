"""Online comparison: a candidate interleaved with the served model (team-draft), its clicks counted, the
sequential test's verdict, and the admin routes' contract (service.interleave, ssi.interleaving)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from service_testing import Oracle, ProcessServer, ThreadServer, make_bundle, needle_of, polling_client

from ssi.interleaving import CANDIDATE, SERVED
from ssi.records import Document
from ssi.traffic import EVENTS_FILE, read_events

ADMIN = {"X-API-Key": "admin-key-for-tests"}
WRITE = {"X-API-Key": "write-key-for-tests"}
# A test that decides in a few clicks: a win moves the ratio by log(1.5), a loss by log(0.5) (the learner's tests,
# tests/training/test_learn_online.py, run the default guard).
FAST = {"mode": "better", "delta": 0.25, "alpha": 0.05, "beta": 0.1}


@pytest.fixture(scope="module")
def candidate(small_world: dict) -> Path:
    return make_bundle(small_world["root"] / "bundles" / "candidate", small_world["docs"], seed=7)


@pytest.fixture(scope="module")
def server(small_world: dict, candidate: Path, tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("cache")
    with ThreadServer(
        bundle=small_world["bundle"],
        corpus=small_world["corpus"],
        cache_dir=cache,
        admin_key=ADMIN["X-API-Key"],
        api_key=WRITE["X-API-Key"],
        bundle_root=small_world["root"] / "bundles",
    ) as s:
        yield s


@pytest.fixture
def comparison(server: ThreadServer, candidate: Path):
    """A comparison of `candidate` on every first page, ended after the test."""
    started = server.client.post(
        "/admin/interleave", json={"bundle": str(candidate), "share": 1.0, **FAST}, headers=ADMIN
    )
    assert started.status_code == 200, started.text
    yield started.json()
    server.client.delete("/admin/interleave", headers=ADMIN)


def logged(server: ThreadServer, impression: str) -> list:
    server.app.state.traffic.flush()
    return [r for r in read_events(server.settings.store_dir / "documents" / EVENTS_FILE) if r.impression == impression]


def status(server: ThreadServer) -> dict:
    answer = server.client.get("/admin/interleave", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_first_pages_merge_both_rankings_by_team_draft(
    server: ThreadServer, small_world: dict, candidate: Path, comparison: dict
) -> None:
    assert comparison["running"] and comparison["loaded"] and comparison["tally"]["impressions"] == 0
    served_oracle, candidate_oracle = small_world["oracle"], Oracle(candidate, small_world["docs"])
    for doc in small_world["docs"][40:50]:
        query = doc.text[:50]
        answer = server.client.post("/search", json={"query": query, "k": 8}).json()
        ids = [h["id"] for h in answer["hits"]]
        lines = logged(server, answer["impression"])
        assert [r.doc for r in lines] == ids and len(ids) == 8
        teams = [SERVED if r.placed_by == r.model else CANDIDATE for r in lines]
        assert {r.placed_by for r in lines if r.placed_by != r.model} <= {comparison["comparison"]["content_hash"]}
        assert abs(teams.count(SERVED) - teams.count(CANDIDATE)) <= 1  # the team with fewer picks picks next
        rankings = {SERVED: served_oracle.top(query, 16)[0], CANDIDATE: candidate_oracle.top(query, 16)[0]}
        for i, (doc_id, team) in enumerate(zip(ids, teams, strict=True)):
            # each team adds its own highest-ranked result not shown yet
            assert doc_id == next(d for d in rankings[team] if d not in ids[:i]), (query, i, team)
        # hits keep the scores of the model that placed them
        hits = {h["id"]: h for h in answer["hits"]}
        for doc_id, team in zip(ids, teams, strict=True):
            oracle = served_oracle if team == SERVED else candidate_oracle
            assert hits[doc_id]["score"] == pytest.approx(
                float(oracle.scores(query)[oracle.ids.index(doc_id)]), abs=1e-4
            )
    assert status(server)["tally"]["impressions"] == 10


def test_later_pages_and_batches_are_the_served_models_alone(
    server: ThreadServer, small_world: dict, comparison: dict
) -> None:
    query = small_world["docs"][60].title
    page = server.client.post("/search", json={"query": query, "k": 4, "offset": 4}).json()
    batch = server.client.post("/search/batch", json={"queries": [query], "k": 4}).json()
    for impression in (page["impression"], batch["results"][0]["impression"]):
        assert all(r.placed_by is None for r in logged(server, impression))
    exact, _ = small_world["oracle"].top(query, 8)
    assert [h["id"] for h in page["hits"]] == exact[4:8]


def click_team(server: ThreadServer, query: str, team: str) -> None:
    answer = server.client.post("/search", json={"query": query, "k": 6}).json()
    lines = logged(server, answer["impression"])
    placed = [r.doc for r in lines if (r.placed_by != r.model) == (team == CANDIDATE)]
    assert placed, "team-draft gives each team a pick on a page of six"
    clicked = server.client.post("/clicks", json={"impression": answer["impression"], "id": placed[0]})
    assert clicked.status_code == 200


def wait_decided(server: ThreadServer, timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = server.app.state.comparisons._live.get("documents")
        if live is not None and live.decided:
            return status(server)
        time.sleep(0.2)
    raise AssertionError("the watcher did not count the comparison as decided")


def test_clicks_on_the_candidates_picks_promote_it_and_interleaving_stops(
    server: ThreadServer, small_world: dict, comparison: dict
) -> None:
    queries = [d.text[:40] for d in small_world["docs"][100:130]]
    clicks = 0
    while status(server)["decision"] == "running":
        click_team(server, queries[clicks], CANDIDATE)
        clicks += 1
    answer = wait_decided(server)
    assert answer["decision"] == "promote" and answer["tally"]["wins"] == clicks == 8 and answer["tally"]["losses"] == 0
    assert answer["tally"]["win_rate"] == 1.0
    # decided: answers are the served model's alone until the learner acts
    after = server.client.post("/search", json={"query": queries[-1], "k": 6}).json()
    assert all(r.placed_by is None for r in logged(server, after["impression"]))
    metrics = server.client.get("/metrics").text
    assert 'ssi_interleave_impressions{collection="documents",outcome="won"} 8.0' in metrics
    assert 'ssi_interleave_running{collection="documents"} 0.0' in metrics


def test_clicks_on_the_served_models_picks_drop_the_candidate(
    server: ThreadServer, small_world: dict, comparison: dict
) -> None:
    for n, doc in enumerate(small_world["docs"][150:160]):  # noqa: B007 (n: the losses counted below)
        if status(server)["decision"] != "running":
            break
        click_team(server, doc.text[:40], SERVED)
    answer = wait_decided(server)
    assert answer["decision"] == "drop" and answer["tally"]["losses"] == n == 4 and answer["tally"]["wins"] == 0
    ended = server.client.delete("/admin/interleave", headers=ADMIN).json()
    assert ended["running"] is False and ended["decision"] == "drop"
    assert status(server) == {"collection": "documents", "running": False, **{k: None for k in NONE_FIELDS}}


NONE_FIELDS = ("comparison", "loaded", "error", "serving_compared_model", "tally", "decision")


def test_the_candidate_sees_documents_written_during_the_comparison(
    server: ThreadServer, small_world: dict, candidate: Path, comparison: dict
) -> None:
    twin = small_world["docs"][5]  # a copy of a stored document under a new id
    fresh = Document("fresh-1", twin.title, twin.text)
    assert server.client.put("/documents/fresh-1", json={"title": fresh.title, "text": fresh.text}, headers=WRITE)
    challenger = server.app.state.comparisons._live["documents"].challenger
    query = needle_of(twin)  # a word of this document alone
    everything = len(small_world["docs"]) + 1
    (found,) = challenger.search([query], everything)
    assert "fresh-1" in found.doc_ids
    assert found.doc_ids[:20] == Oracle(candidate, [*small_world["docs"], fresh]).top(query, 20)[0]
    assert server.client.delete("/documents/fresh-1", headers=WRITE).status_code == 200
    (gone,) = challenger.search([query], everything)
    assert "fresh-1" not in gone.doc_ids
    assert gone.doc_ids[:20] == Oracle(candidate, small_world["docs"]).top(query, 20)[0]


def test_bad_requests_are_refused_and_change_nothing(server: ThreadServer, small_world: dict, candidate: Path) -> None:
    post = server.client.post
    assert post("/admin/interleave", json={"bundle": str(candidate)}).status_code == 401
    outside = post("/admin/interleave", json={"bundle": "/etc"}, headers=ADMIN)
    assert outside.status_code == 403 and "SSI_BUNDLE_ROOT" in outside.json()["detail"]
    missing = post("/admin/interleave", json={"bundle": str(candidate.parent / "nothing")}, headers=ADMIN)
    assert missing.status_code == 422 and "cannot compare" in missing.json()["detail"]
    itself = post("/admin/interleave", json={"bundle": str(small_world["bundle"])}, headers=ADMIN)
    assert itself.status_code == 409 and "served model itself" in itself.json()["detail"]
    for bad in (
        {"share": 0},
        {"share": 1.5},
        {"delta": 0.5},
        {"alpha": 0},
        {"budget": 0},
        {"mode": "maybe"},
        {"other": 1},
    ):
        assert post("/admin/interleave", json={"bundle": str(candidate), **bad}, headers=ADMIN).status_code == 422
    assert status(server)["running"] is False
    first = post("/admin/interleave", json={"bundle": str(candidate)}, headers=ADMIN)
    assert first.status_code == 200
    second = post("/admin/interleave", json={"bundle": str(candidate)}, headers=ADMIN)
    assert second.status_code == 409 and "DELETE /admin/interleave" in second.json()["detail"]
    assert server.client.delete("/admin/interleave", headers=ADMIN).json()["running"] is False
    assert server.client.get("/admin/interleave?collection=nope", headers=ADMIN).status_code == 404


def test_a_server_that_records_no_traffic_refuses_a_comparison(
    small_world: dict, candidate: Path, tmp_path: Path
) -> None:
    with ThreadServer(
        bundle=small_world["bundle"],
        corpus=small_world["corpus"],
        cache_dir=tmp_path,
        admin_key=ADMIN["X-API-Key"],
        bundle_root=small_world["root"] / "bundles",
        events=False,
    ) as s:
        refused = s.client.post("/admin/interleave", json={"bundle": str(candidate)}, headers=ADMIN)
        assert refused.status_code == 403 and "records no traffic" in refused.json()["detail"]


def test_the_comparison_reaches_every_worker_of_a_group(small_world: dict, candidate: Path, tmp_path: Path) -> None:
    env = {
        "SSI_CACHE_DIR": str(tmp_path),
        "SSI_WORKERS": "2",
        "SSI_THREADS": "1",
        "SSI_ADMIN_KEY": ADMIN["X-API-Key"],
        "SSI_BUNDLE_ROOT": str(small_world["root"] / "bundles"),
    }
    args = ["--bundle", str(small_world["bundle"]), "--corpus", str(small_world["corpus"])]
    server = ProcessServer(tmp_path, env, args).start()
    try:
        client = polling_client()  # every request on a new connection, so that either worker may take it
        started = client.post(
            f"{server.url}/admin/interleave", json={"bundle": str(candidate), "share": 1.0}, headers=ADMIN, timeout=60
        )
        assert started.status_code == 200, started.text
        # the other worker loads the candidate at its next look at the record (once a second): wait until twenty
        # answers in a row come from a worker that holds it
        deadline, in_a_row = time.monotonic() + 60, 0
        while in_a_row < 20 and time.monotonic() < deadline:
            seen = client.get(f"{server.url}/admin/interleave", headers=ADMIN).json()
            in_a_row = in_a_row + 1 if seen["loaded"] else 0
        assert in_a_row == 20
        answered = set()
        for doc in small_world["docs"][200:240]:
            answer = client.post(f"{server.url}/search", json={"query": doc.title, "k": 6})
            assert answer.status_code == 200
            answered.add(client.get(f"{server.url}/readyz").json()["pid"])
        # counted from the shared log, where each worker's writer commits its impressions every 0.1 s
        deadline, counted = time.monotonic() + 20, 0
        while counted < 40 and time.monotonic() < deadline:
            counted = client.get(f"{server.url}/admin/interleave", headers=ADMIN).json()["tally"]["impressions"]
            time.sleep(0.2)
        assert len(answered) == 2 and counted == 40
    finally:
        client.close()
        server.stop()
