"""The router's online comparison (cluster.interleave) over three in-process shards: its first pages merge the
served model's and the candidate's exact rankings over the whole corpus by team-draft, its log says who placed
each result, clicks decide the single node's test, and bad requests change nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.index_job import build_index
from ssi.bundle import load_bundle
from ssi.interleaving import CANDIDATE, SERVED
from ssi.traffic import EVENTS_FILE, ShownResult, read_events
from tests.cluster.router_testing import Router, call
from tests.service.service_testing import Oracle, make_bundle

ADMIN = {"X-API-Key": "admin-key-for-tests"}
FAST = {"mode": "better", "delta": 0.25, "alpha": 0.05, "beta": 0.1}  # a test decided in a few clicks


@pytest.fixture(scope="module")
def cluster(world: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("interleave")
    index = root / "index"
    build_index(world["corpus"], world["bundle"], index, 3, batch_size=64)
    candidate = make_bundle(world["root"] / "candidate", world["docs"], seed=7)  # beside the served bundle
    router = Router(index, data_dir=root / "router", admin_key=ADMIN["X-API-Key"], insecure_writes=True)
    yield {
        "router": router, "candidate": candidate, "oracle": Oracle(candidate, world["docs"]),
        "log": root / "router" / "stores" / "documents" / EVENTS_FILE,
    }  # fmt: skip
    router.app.state.traffic.close()
    router.close()


@pytest.fixture
def comparison(cluster: dict) -> Iterator[dict]:
    body = {"bundle": str(cluster["candidate"]), "share": 1.0, **FAST}
    started = call(cluster["router"], "POST", "/admin/interleave", json=body, headers=ADMIN)
    assert started.status_code == 200, started.text
    yield started.json()
    call(cluster["router"], "DELETE", "/admin/interleave", headers=ADMIN)


def logged(cluster: dict, impression: str, timeout: float = 5.0) -> list[ShownResult]:
    """The impression's rows once the router's writer committed them (every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = [r for r in read_events(cluster["log"]) if r.impression == impression] if cluster["log"].exists() else []
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def status(cluster: dict) -> dict:
    answer = call(cluster["router"], "GET", "/admin/interleave", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_first_pages_merge_both_exact_rankings_over_every_shard(world: dict, cluster: dict, comparison: dict) -> None:
    assert comparison["running"] and comparison["tally"]["impressions"] == 0
    assert comparison["comparison"]["content_hash"] == load_bundle(cluster["candidate"]).content_hash
    served_oracle, candidate_oracle = world["oracle"], cluster["oracle"]
    for doc in world["docs"][40:46]:
        query = doc.text[:50]
        answer = call(cluster["router"], "POST", "/search", json={"query": query, "k": 8}).json()
        ids = [h["id"] for h in answer["hits"]]
        rows = logged(cluster, answer["impression"])
        assert [r.doc for r in rows] == ids and len(ids) == 8
        teams = [SERVED if r.placed_by == r.model else CANDIDATE for r in rows]
        assert {r.placed_by for r in rows if r.placed_by != r.model} == {comparison["comparison"]["content_hash"]}
        assert abs(teams.count(SERVED) - teams.count(CANDIDATE)) <= 1
        rankings = {SERVED: served_oracle.top(query, 16)[0], CANDIDATE: candidate_oracle.top(query, 16)[0]}
        hits = {h["id"]: h for h in answer["hits"]}
        for i, (doc_id, team) in enumerate(zip(ids, teams, strict=True)):
            # each team adds its own highest-ranked result over the whole corpus not shown yet, with its own score
            assert doc_id == next(d for d in rankings[team] if d not in ids[:i]), (query, i, team)
            oracle = served_oracle if team == SERVED else candidate_oracle
            want = float(oracle.scores(query)[oracle.ids.index(doc_id)])
            assert hits[doc_id]["score"] == pytest.approx(want, abs=1e-4)
    later = call(cluster["router"], "POST", "/search", json={"query": world["docs"][3].title, "k": 4, "offset": 4})
    assert all(r.placed_by is None for r in logged(cluster, later.json()["impression"]))  # later pages: served alone
    assert status(cluster)["tally"]["impressions"] == 6
    exported = call(cluster["router"], "GET", "/metrics").text  # the single node's gauges, on the router
    assert 'ssi_interleave_impressions{collection="documents",outcome="impressions"} 6.0' in exported
    assert 'ssi_interleave_running{collection="documents"} 1.0' in exported
    assert 'ssi_interleaved_searches_total{collection="documents"} 6.0' in exported


def test_clicks_on_the_candidates_picks_decide_and_interleaving_stops(
    world: dict, cluster: dict, comparison: dict
) -> None:
    clicks = 0
    while status(cluster)["decision"] == "running":
        answer = call(cluster["router"], "POST", "/search", json={"query": world["docs"][100 + clicks].text[:40]})
        rows = logged(cluster, answer.json()["impression"])
        picked = next(r.doc for r in rows if r.placed_by != r.model)
        clicked = call(
            cluster["router"], "POST", "/clicks", json={"impression": answer.json()["impression"], "id": picked}
        )
        assert clicked.status_code == 200, clicked.text
        clicks += 1
        assert clicks < 20
    decided = status(cluster)
    assert decided["decision"] == "promote" and decided["tally"]["wins"] == clicks and decided["tally"]["losses"] == 0
    time.sleep(2.1)  # the router counts the log every 2 s: the next search sees the verdict
    call(cluster["router"], "POST", "/search", json={"query": "anything at all"})
    after = call(cluster["router"], "POST", "/search", json={"query": world["docs"][7].title}).json()
    assert all(r.placed_by is None for r in logged(cluster, after["impression"]))  # decided: served alone
    ended = call(cluster["router"], "DELETE", "/admin/interleave", headers=ADMIN).json()
    assert ended["running"] is False and ended["decision"] == "promote"
    assert 'ssi_interleave_running{collection="documents"} 0.0' in call(cluster["router"], "GET", "/metrics").text
    assert status(cluster) == {"collection": "documents", "running": False, **dict.fromkeys(NONE_FIELDS)}
    assert all(server._challenger is None for server in cluster["router"].servers)  # every shard let it go


NONE_FIELDS = ("comparison", "loaded", "error", "serving_compared_model", "tally", "decision")


def test_bad_requests_are_refused_and_change_nothing(world: dict, cluster: dict, tmp_path: Path) -> None:
    router = cluster["router"]

    def post(body: dict, headers: dict | None = ADMIN) -> int:
        return call(router, "POST", "/admin/interleave", json=body, headers=headers).status_code

    candidate = str(cluster["candidate"])
    assert post({"bundle": candidate}, headers=None) == 401
    assert post({"bundle": str(tmp_path)}) == 403  # outside the served bundle's folder
    missing = call(router, "POST", "/admin/interleave", json={"bundle": candidate + "-gone"}, headers=ADMIN)
    assert missing.status_code == 422 and "cannot compare" in missing.json()["detail"]
    itself = call(router, "POST", "/admin/interleave", json={"bundle": str(world["bundle"])}, headers=ADMIN)
    assert itself.status_code == 409 and "served model itself" in itself.json()["detail"]
    for bad in ({"share": 0}, {"delta": 0.5}, {"mode": "maybe"}, {"collection": "other"}):
        assert post({"bundle": candidate, **bad}) in (404, 422)
    assert status(cluster)["running"] is False
    assert all(server._challenger is None for server in router.servers)
    assert post({"bundle": candidate}) == 200
    second = call(router, "POST", "/admin/interleave", json={"bundle": candidate}, headers=ADMIN)
    assert second.status_code == 409 and "DELETE /admin/interleave" in second.json()["detail"]
    assert call(router, "DELETE", "/admin/interleave", headers=ADMIN).json()["running"] is False
