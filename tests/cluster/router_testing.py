"""The router app over in-process shards (cluster.fanout.LocalShards), called through httpx's ASGI transport: what
tests/cluster/test_cluster_ray.py runs on Ray Serve, without Ray."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from cluster.fanout import Fanout, LocalShards
from cluster.http import build_app
from cluster.manifest import read_manifest
from cluster.shard_server import ShardServer
from cluster.shard_settings import statistics_of
from service.settings import Settings


class Router:
    """The router app over in-process shards, called through httpx's ASGI transport."""

    def __init__(
        self,
        index: Path,
        shards: type[LocalShards] = LocalShards,
        data_dir: Path | None = None,
        **settings: object,
    ) -> None:
        """`data_dir`: the router's own folder (its traffic log and comparison record); None keeps no log."""
        manifest = read_manifest(index)
        app_settings = Settings(**settings)
        # given to shards as cluster.deploy gives them
        open_vocab = (app_settings.open_vocab, app_settings.open_vocab_words, statistics_of(app_settings, manifest))
        self.servers = [ShardServer(str(index), i, 1, *open_vocab) for i in range(manifest.shards)]
        about = manifest.model_dump(exclude={"entries"})  # what cluster.deploy gives the Serve router
        self.shards = shards(self.servers)
        self.app = build_app(app_settings, Fanout(self.shards), about, data_dir)
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://router")

    def close(self) -> None:
        for server in self.servers:
            server.close()


def call(router: Router, method: str, url: str, **kwargs: object) -> httpx.Response:
    return asyncio.run(router.client.request(method, url, **kwargs))  # type: ignore[arg-type]
