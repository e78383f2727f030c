"""`ssi learn` with online confirmation against a real `ssi serve`: a candidate that passes the offline estimate
is interleaved, not served; the next round skips while the comparison runs, and serves the candidate when the
service's test says it wins, or drops it when it loses (training.feedback.online, service.interleave)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from ssi.traffic import EVENTS_FILE, read_events
from tests.service.service_testing import ThreadServer
from tests.training.test_learn_loop import learn, round_args
from tests.training.test_learn_round import write_store, write_world
from training.feedback.history import history_path, loop_state, read_history
from training.feedback.start import write_bm25_start

ADMIN_KEY = "learn-online-admin-key"
HEADERS = {"X-API-Key": ADMIN_KEY}
# A round whose candidate passes the offline gate on the tiny world (judged on later impressions of the queries it
# trained on: the query split holds out queries whose words it never saw), and a test that decides in a few answers.
ROUND = ["--split", "time", "--holdout", "0.5", "--no-refit", "--epochs", "100", "--lr", "0.1", "--tolerance", "1"]
ONLINE = ["--share", "1", "--delta", "0.25", "--train-args", "--ensemble 1"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("online")
    corpus, relevant = write_world(root)
    write_bm25_start(corpus, root / "start", dims=8)
    write_store(root / "events.sqlite", relevant)
    return {"root": root, "corpus": corpus, "start": root / "start", "store": root / "events.sqlite"}


def vote(server: ThreadServer, for_candidate: bool) -> None:
    """One interleaved answer and a click on a result placed by the candidate (or by the served model)."""
    answer = server.client.post("/search", json={"query": "riverish money", "k": 6}).json()
    server.app.state.traffic.flush()
    store = server.settings.store_dir / "documents" / EVENTS_FILE
    shown = [r for r in read_events(store) if r.impression == answer["impression"]]
    assert shown and all(r.placed_by is not None for r in shown), "every first page is interleaved (--share 1)"
    doc = next(r.doc for r in shown if (r.placed_by != r.model) == for_candidate)
    assert server.client.post("/clicks", json={"impression": answer["impression"], "id": doc}).status_code == 200


def decided(server: ThreadServer, for_candidate: bool) -> None:
    while server.client.get("/admin/interleave", headers=HEADERS).json()["decision"] == "running":
        vote(server, for_candidate)
    deadline = time.monotonic() + 15
    while not server.app.state.comparisons._live["documents"].decided and time.monotonic() < deadline:
        time.sleep(0.2)


@pytest.mark.parametrize("wins", [True, False], ids=["candidate-wins", "candidate-loses"])
def test_a_candidate_is_served_only_once_interleaving_confirms_it(
    world: dict[str, Path], tmp_path: Path, wins: bool
) -> None:
    bundles = tmp_path / "bundles"
    shutil.copytree(world["start"], bundles / "start")
    with ThreadServer(
        bundle=bundles / "start", corpus=world["corpus"], cache_dir=tmp_path / "cache", admin_key=ADMIN_KEY,
        bundle_root=bundles,
    ) as server:  # fmt: skip
        online = ["--server", server.url, "--admin-key", ADMIN_KEY, *ONLINE]
        code, output = learn(*round_args(world, bundles, *ROUND, "--name", "r1", *online))
        assert code == 0, output
        assert "interleaving" in output and "the next `ssi learn` serves it if it wins" in output
        first = read_history(history_path(bundles))[-1]
        assert first.decision == "interleaving" and first.serving == str(bundles / "r1")
        assert server.client.get("/model").json()["bundle"] == "start"  # not served yet
        status = server.client.get("/admin/interleave", headers=HEADERS).json()
        assert status["running"] and status["comparison"]["bundle"] == str(bundles / "r1")

        code, output = learn(*round_args(world, bundles, *ROUND, *online))
        assert code == 0 and "skipped: the comparison of r1 runs" in output, output

        decided(server, wins)
        code, output = learn(*round_args(world, bundles, *ROUND, *online, "--min-new-sessions", "100000"))
        assert code == 0, output
        records = read_history(history_path(bundles))
        concluded = records[-2]
        assert records[-1].decision == "skipped"  # the log has no new sessions: nothing trains after the verdict
        if wins:
            assert concluded.decision == "promoted" and concluded.serving == str(bundles / "r1") and concluded.reloaded
            assert concluded.candidates == first.candidates and concluded.interleaving["decision"] == "promote"
            assert server.client.get("/model").json()["bundle"] == "r1"
            assert loop_state(records).served == bundles / "r1"
            assert loop_state(records).judges(1) == [bundles / "r1"]
        else:
            assert concluded.decision == "dropped" and concluded.serving is None
            assert concluded.interleaving["decision"] == "drop" and concluded.interleaving["losses"] >= 2
            assert server.client.get("/model").json()["bundle"] == "start"
            assert loop_state(records).served is None
        assert server.client.get("/admin/interleave", headers=HEADERS).json()["running"] is False
