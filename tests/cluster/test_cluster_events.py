"""The sharded router's traffic log: the merged answers name an impression and the router records the clicks.

The router (cluster.http) runs in process over ShardServer objects (cluster.fanout.LocalShards), as in
test_cluster_local.py, with a data folder of its own: the log is read back with the trainer's reader
(ssi.traffic.read_events), so what a cluster logs is what `ssi train --clicks` learns from.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster.events import ROUTER_FOLDER
from cluster.fanout import Fanout, LocalShards
from cluster.http import build_app
from cluster.index_job import build_index
from cluster.manifest import read_manifest
from cluster.shard_server import ShardServer
from service.events.store import new_impression_id
from service.settings import Settings
from ssi.traffic import EVENTS_FILE, ShownResult, read_events


class EventsRouter:
    """The router app over in-process shards with `data_dir` as its data folder, called through httpx's ASGI
    transport (which runs no lifespan: `close` closes the log as the app's shutdown would)."""

    def __init__(self, index: Path, data_dir: Path | None, **settings: object) -> None:
        manifest = read_manifest(index)
        self.about = manifest.model_dump(exclude={"entries"})
        self.servers = [ShardServer(str(index), i) for i in range(manifest.shards)]
        self.settings = Settings(**settings)
        self.app = build_app(self.settings, Fanout(LocalShards(self.servers)), self.about, data_dir)
        self.log = None if data_dir is None else data_dir / "stores" / self.settings.collection / EVENTS_FILE

    def post(self, url: str, body: dict) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://router") as client:
                return await client.post(url, json=body)

        return asyncio.run(send())

    def close(self) -> None:
        self.app.state.traffic.close()
        for server in self.servers:
            server.close()


def logged(router: EventsRouter, impression: str, timeout: float = 5.0) -> list[ShownResult]:
    """The impression's shown results once the router's writer committed them (it commits every 0.1 s)."""
    assert router.log is not None
    deadline = time.monotonic() + timeout
    while True:
        rows = [r for r in read_events(router.log) if r.impression == impression] if router.log.exists() else []
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


@pytest.fixture(scope="module")
def router(world: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EventsRouter]:
    index = tmp_path_factory.mktemp("events-index") / "index"
    build_index(world["corpus"], world["bundle"], index, 2, batch_size=64)
    r = EventsRouter(index, index / ROUTER_FOLDER)  # where cluster.deploy puts it by default
    yield r
    r.close()


def test_a_search_through_the_router_names_an_impression_and_its_click_is_logged(
    world: dict, router: EventsRouter
) -> None:
    query = world["docs"][30].title
    answer = router.post("/search", {"query": query, "k": 5})
    assert answer.status_code == 200, answer.text
    impression, ids = answer.json()["impression"], [h["id"] for h in answer.json()["hits"]]
    assert impression and len(ids) == 5
    click = router.post("/clicks", {"impression": impression, "id": ids[3]})
    assert click.status_code == 200, click.text
    assert click.json() == {"recorded": True, "position": 4}
    again = router.post("/clicks", {"impression": impression, "id": ids[3], "dwell_ms": 2500})
    assert again.json() == {"recorded": False, "position": 4}  # counted once; the dwell time fills in

    # The router's own log (beside the shards, under the index folder), as the trainer reads it.
    rows = logged(router, impression)
    assert [r.doc for r in rows] == ids and [r.position for r in rows] == [1, 2, 3, 4, 5]
    assert [r.clicked for r in rows] == [False, False, False, True, False]
    assert rows[3].dwell_ms == 2500 and rows[0].text == query and rows[0].kind == "search"
    assert rows[0].model == router.about["bundle_hash"]


def test_a_click_on_an_unknown_impression_or_an_id_not_shown_is_a_404(world: dict, router: EventsRouter) -> None:
    answer = router.post("/search", {"query": world["docs"][31].title, "k": 3}).json()
    unknown = router.post("/clicks", {"impression": new_impression_id(time.time() - 60), "id": answer["hits"][0]["id"]})
    assert unknown.status_code == 404 and "impression" in unknown.json()["detail"]
    assert router.post("/clicks", {"impression": "not-an-id", "id": "x"}).status_code == 404
    not_shown = router.post("/clicks", {"impression": answer["impression"], "id": "no-such-doc"})
    assert not_shown.status_code == 404 and "not shown" in not_shown.json()["detail"]
    assert router.post("/clicks", {"impression": answer["impression"]}).status_code == 422


def test_paged_and_batched_answers_through_the_router_log_their_positions(world: dict, router: EventsRouter) -> None:
    titles = [d.title for d in world["docs"][32:35]]
    page = router.post("/search", {"query": titles[0], "k": 3, "offset": 3}).json()
    click = router.post("/clicks", {"impression": page["impression"], "id": page["hits"][0]["id"]})
    assert click.json()["position"] == 4  # the first hit of the second page of three
    batch = router.post("/search/batch", {"queries": titles[1:], "k": 2}).json()
    impressions = [r["impression"] for r in batch["results"]]
    assert len(set(impressions)) == 2 and all(impressions)
    for impression, title, result in zip(impressions, titles[1:], batch["results"], strict=True):
        rows = logged(router, impression)
        assert [r.doc for r in rows] == [h["id"] for h in result["hits"]] and rows[0].text == title


def test_a_match_through_the_router_names_each_pages_impression(world: dict, tmp_path: Path) -> None:
    index = tmp_path / "adverts"
    build_index(world["corpus"], world["bundle"], index, 2, batch_size=64, collection_type="adverts")
    router = EventsRouter(index, tmp_path / "router-data", collection="ads")
    try:
        pages = [world["docs"][40].full_text, world["docs"][41].full_text]
        answer = router.post("/match", {"pages": pages, "k": 4})
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        impressions = [r["impression"] for r in results]
        assert all(impressions) and len(set(impressions)) == 2
        ad = results[1]["ads"][1]["id"]
        assert router.post("/clicks", {"impression": impressions[1], "id": ad}).json()["position"] == 2
        rows = logged(router, impressions[1])
        assert rows[0].kind == "match" and rows[0].text == pages[1]
        assert [r.doc for r in rows if r.clicked] == [ad]
        assert router.log == tmp_path / "router-data" / "stores" / "ads" / EVENTS_FILE
    finally:
        router.close()


def test_without_a_data_folder_or_with_events_off_the_router_keeps_no_log(world: dict, tmp_path: Path) -> None:
    index = tmp_path / "index"
    build_index(world["corpus"], world["bundle"], index, 1, batch_size=64)
    for data_dir, settings in ((None, {}), (tmp_path / "off", {"events": False})):
        router = EventsRouter(index, data_dir, **settings)  # one at a time: a shard's folder has one server
        try:
            answer = router.post("/search", {"query": world["docs"][5].title, "k": 2}).json()
            assert answer["impression"] is None and len(answer["hits"]) == 2
            refused = router.post("/clicks", {"impression": new_impression_id(time.time()), "id": "x"})
            assert refused.status_code == 403 and "SSI_EVENTS" in refused.json()["detail"]
        finally:
            router.close()
    assert not (tmp_path / "off").exists()


def test_the_deployment_gives_the_router_a_data_folder(world: dict, tmp_path: Path) -> None:
    """`cluster.deploy:build` (the RayService entry) takes the router's folder; by default it is `<index>/router`."""
    pytest.importorskip("ray", reason="needs the cluster extra: pip install -e .[cluster]")
    from cluster.deploy import ClusterOptions, build

    index = tmp_path / "index"
    build_index(world["corpus"], world["bundle"], index, 1, batch_size=64)
    assert ClusterOptions().router_data_dir is None
    # The router deployment's sixth constructor argument is its data folder (cluster.deploy.Router: handles,
    # settings, about, retry, timeout, data_dir, replicated); Serve keeps the bound arguments on the application.
    default = build({"index": str(index)})
    assert default._bound_deployment.init_args[5] == str((index / ROUTER_FOLDER).resolve())
    chosen = build({"index": str(index), "router_data_dir": str(tmp_path / "logs")})
    assert chosen._bound_deployment.init_args[5] == str((tmp_path / "logs").resolve())
