"""The sharded service on Ray Serve: one deployment per index shard and a router deployment in front.

    router  (HTTP ingress: cluster.http over cluster.fanout, `router_replicas` replicas)
      ├── shard-0000  (cluster.shard_server.ShardServer, `replicas` replicas)
      ├── shard-0001
      └── …

With `replicas` = 1 a shard is one Serve replica over the shard's folder (store + snapshot written by `ssi index`),
so a restarted replica comes back with every acknowledged write: the store is the truth and its write log is
replayed over the snapshot (service.state_builder). With `replicas` > 1 every shard is replicated
(cluster.replication): each replica a Ray actor on its own labelled node with its own copy on that node's disk,
primary–backup with terms and sequence numbers, every replica taking part in writes (docs/operate/replication.md).
SSI_OPEN_VOCAB, SSI_OPEN_VOCAB_WORDS and
SSI_OPEN_VOCAB_STATISTICS are the router's settings, given to every shard (cluster.shard_settings). The router keeps
the traffic log (cluster.events) in a data folder of its own, `<index>/router` unless `router_data_dir` says
otherwise; its replicas share it.
Imported only by the `ssi cluster` commands.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import serve
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

from cluster.events import ROUTER_FOLDER, router_traffic
from cluster.fanout import Fanout, retrying
from cluster.http import build_app, refuse_filtered_keys
from cluster.manifest import ClusterIndexError, read_manifest
from cluster.replication.events import ShippedTraffic
from cluster.replication.ray_replicas import (
    HEAD_RESOURCE,
    NODE_LABEL,
    EventPeers,
    NoCopy,
    ReplicatedShards,
    node_label,
    start_replicas,
    stop_replicas,
)
from cluster.replication.replica import ServerArgs
from cluster.shard_server import Reply, ShardServer
from cluster.shard_settings import statistics_of
from cluster.sharding import shard_folder_name
from service.settings import Settings

APP_NAME = "ssi"
# A dead replica, one being replaced, or a node gone: worth retrying (Serve routes to a new replica).
RETRIED = (RayActorError, ActorDiedError, ActorUnavailableError)


@dataclass(frozen=True)
class ClusterOptions:
    """How the sharded service is laid out on the cluster (flags of `ssi cluster serve`)."""

    replicas: int = 1  # per shard; more than 1: replicated shards (cluster.replication)
    router_replicas: int = 1
    shard_cpus: float = 1.0  # CPUs Ray reserves for each shard replica (0 on a small local cluster)
    router_cpus: float = 0.0
    threads: int = 1  # FAISS / onnxruntime threads in a shard replica
    retry_seconds: float = 30.0  # how long the router retries a failing (dead, restarting) shard before a 503
    # The longest one shard call may take, retries included, before a 503 naming the shard: Serve queues a
    # call while a shard has no live replica, so without it a shard that cannot come back holds requests.
    shard_timeout_seconds: float = 60.0
    max_ongoing_requests: int = 16
    # The router's data folder (its traffic log, cluster.events); None: `<index>/router`, on the volume every
    # node mounts, so every router replica writes the one log.
    router_data_dir: Path | None = None
    # With replicas > 1: each replica of a shard on its labelled node, its copy under `node_dir` on that node's disk
    # (default `<index>/nodes`), a write acknowledged once `min_copies` replicas hold it.
    node_dir: Path | None = None
    min_copies: int = 2
    failure_timeout_seconds: float = 2.0
    # The router's replicas on the head node (where the coordinator runs too): a worker node lost then takes no
    # router, and no request in flight, with it; but the head lost takes them all.
    router_on_head: bool = False
    # The router's replicas on the labelled worker nodes instead, at most one a node (with replicas > 1): the head
    # lost takes no router, and the HTTP proxy of every other node (proxy_location EveryNode) still reaches one.
    router_on_workers: bool = False
    # Where the coordinator keeps the shard map (with replicas > 1): a `redis://` URL (off the head's disk: the
    # Redis of Ray's GCS fault tolerance), or None for `<node_dir>/coordinator/map.json` on the head's disk.
    map_store: str | None = None


class RayShards:
    """The router's view of the shard deployments: `call` with retries on a dead or restarting replica."""

    def __init__(self, handles: list[Any], retry_seconds: float, timeout_seconds: float | None = None) -> None:
        self.handles = handles
        self.count = len(handles)
        self.retry_seconds = retry_seconds
        self.timeout_seconds = timeout_seconds

    async def call(self, shard: int, method: str, *args: Any) -> Reply:
        handle = self.handles[shard]
        return await retrying(
            lambda: getattr(handle, method).remote(*args), shard, self.retry_seconds, RETRIED, self.timeout_seconds
        )


class RetriedShards:
    """Replicated shards with the router's retry window: a shard with no copy answering is retried, then a 503."""

    def __init__(self, shards: ReplicatedShards, retry_seconds: float, timeout_seconds: float | None) -> None:
        self.shards = shards
        self.count = shards.count
        self.retry_seconds = retry_seconds
        self.timeout_seconds = timeout_seconds

    async def call(self, shard: int, method: str, *args: Any) -> Reply:
        return await retrying(
            lambda: self.shards.call(shard, method, *args),
            shard,
            self.retry_seconds,
            (*RETRIED, NoCopy),
            self.timeout_seconds,
        )


@serve.ingress()
class Router:
    """The HTTP ingress: cluster.http's app over the shard handles."""

    def __init__(
        self,
        handles: list[Any],
        settings: Settings,
        about: dict[str, Any],
        retry_seconds: float,
        timeout_seconds: float | None = None,
        data_dir: str | None = None,
        replicated: Replication | None = None,
    ) -> None:
        self.app_settings = settings
        shards: Any = RayShards(handles, retry_seconds, timeout_seconds)
        if replicated is not None:  # copies reached through the coordinator's map
            # A replica that does not answer a read is passed over well within the shard's timeout: a killed one
            # is restarted by Ray, and a call sent to it meanwhile waits for the restart.
            read_timeout = min(5.0, (timeout_seconds or 15.0) / 3)
            shards = RetriedShards(
                ReplicatedShards(replicated.group, replicated.shards, read_timeout=read_timeout),
                retry_seconds,
                timeout_seconds,
            )
        self.fanout = Fanout(shards)
        self.about = about
        self.data_dir = None if data_dir is None else Path(data_dir)
        self.replicated = replicated

    def __serve_build_asgi_app__(self) -> Any:
        traffic = None
        if self.replicated is not None and self.data_dir is not None:
            copies = EventPeers(self.replicated.group, self.replicated.copies, self.replicated.timeout)
            local = router_traffic(self.app_settings, self.data_dir)
            traffic = ShippedTraffic(local, self.app_settings.collection, copies, self.replicated.min_copies)
        return build_app(self.app_settings, self.fanout, self.about, self.data_dir, traffic)


@dataclass(frozen=True)
class Replication:
    """What the router needs of replicated shards: the actors' group, the shards, copies and the ack quorum."""

    group: str
    shards: int
    copies: int
    min_copies: int
    timeout: float


def application(index: Path, settings: Settings, options: ClusterOptions) -> Any:
    """The bound Serve application for the sharded index at `index` (checked before anything starts)."""
    refuse_filtered_keys(settings)
    manifest = read_manifest(index)
    if options.replicas < 1:
        raise ClusterIndexError(f"replicas must be at least 1 (got {options.replicas})")
    if options.replicas > 1 and not 2 <= options.min_copies <= options.replicas:
        raise ClusterIndexError(
            f"--min-copies must be between 2 (so that losing one node loses no acknowledged write) and --replicas "
            f"({options.replicas}); got {options.min_copies}"
        )
    if options.replicas > 1 and options.map_store is not None:
        check_map_store(options.map_store)
    open_vocab = settings.open_vocab  # the router's, given to every shard
    statistics = statistics_of(settings, manifest)
    replicated = None
    if options.replicas > 1:
        group = start_copies(index, settings, options, manifest.shards, statistics)
        replicated = Replication(
            group, manifest.shards, options.replicas, options.min_copies, options.failure_timeout_seconds
        )
    shard_app = serve.deployment(ShardServer)
    handles = (
        []
        if replicated
        else [
            shard_app.options(
                name=shard_folder_name(i),
                num_replicas=1,
                ray_actor_options={"num_cpus": options.shard_cpus},
                max_ongoing_requests=options.max_ongoing_requests,
                health_check_period_s=2,
            ).bind(
                str(index.resolve()),
                i,
                options.threads,
                open_vocab,
                settings.open_vocab_words,
                statistics,
            )
            for i in range(manifest.shards)
        ]
    )
    about = manifest.model_dump(exclude={"entries"}) | {"documents_per_shard": [e.documents for e in manifest.entries]}
    placement: dict[str, Any] = {"num_cpus": options.router_cpus}
    spread: dict[str, Any] = {}
    if options.router_on_head:
        placement["resources"] = {HEAD_RESOURCE: 0.001}
    elif options.router_on_workers and options.replicas > 1:
        labels = ",".join(node_label(r) for r in range(options.replicas))
        placement["label_selector"] = {NODE_LABEL: f"in({labels})"}
        spread["max_replicas_per_node"] = 1
    router = serve.deployment(Router).options(
        name="router",
        num_replicas=options.router_replicas,
        ray_actor_options=placement,
        max_ongoing_requests=256,
        **spread,
    )
    data_dir = options.router_data_dir or index / ROUTER_FOLDER
    return router.bind(
        handles,
        settings,
        about,
        options.retry_seconds,
        options.shard_timeout_seconds,
        str(data_dir.resolve()),
        replicated,
    )


def check_map_store(url: str) -> None:
    """A `--map-store` that is a Redis URL and answers, refused with its reason before any actor starts."""
    from cluster.replication.map_redis import RedisMapStore
    from cluster.replication.map_store import is_redis_url
    from service.errors import Unavailable

    if not is_redis_url(url):
        raise ClusterIndexError(
            f"--map-store must be a redis:// or redis+sentinel:// URL (got {url!r}); without it the map is a file"
        )
    try:
        RedisMapStore(url).ping()
    except ValueError as exc:
        raise ClusterIndexError(f"--map-store: {exc}") from None
    except Unavailable as exc:
        raise ClusterIndexError(exc.message) from None


# The actors of the replicated copies this process started (coordinator first), stopped by `stop`, and their groups.
COPIES: list[Any] = []
GROUPS: list[str] = []


def start_copies(index: Path, settings: Settings, options: ClusterOptions, shards: int, statistics: Any) -> str:
    """Start the coordinator and every copy of every shard (cluster.replication.ray_replicas); their group name."""
    import uuid

    group = f"ssi-{uuid.uuid4().hex[:8]}"
    GROUPS.append(group)
    args = [
        ServerArgs(
            str(index.resolve()),
            i,
            options.threads,
            settings.open_vocab,
            settings.open_vocab_words,
            statistics,
        )
        for i in range(shards)
    ]
    COPIES.extend(
        start_replicas(
            group,
            args,
            options.replicas,
            (options.node_dir or index / "nodes").resolve(),
            min_copies=options.min_copies,
            timeout=options.failure_timeout_seconds,
            cpus=options.shard_cpus,
            map_store=options.map_store,
        )
    )
    return group


def start(
    index: Path, settings: Settings, options: ClusterOptions, *, address: str = "local", num_cpus: int | None = None
) -> Any:
    """Connect to the cluster, start Serve's HTTP proxy on settings.host:port and deploy; returns the router handle."""
    from cluster.connect import connect

    # a bad folder, or settings the cluster cannot serve, refused before any cluster is joined
    refuse_filtered_keys(settings)
    statistics_of(settings, read_manifest(index))
    connect(address, num_cpus=num_cpus)
    start_proxies(settings)
    return serve.run(application(index, settings, options), name=APP_NAME, route_prefix="/", blocking=False)


def start_proxies(settings: Settings, attempts: int = 3, every_node: bool = True) -> None:
    """`serve.start`, tried again where Serve killed a proxy that was slow to start (ActorDiedError), after
    the wider start-up bounds of cluster.connect: a slow first start is retried rather than fatal.

    `every_node=False`: one proxy, on the head (one machine's test cluster, whose clients all call the head)."""
    for attempt in range(1, attempts + 1):
        try:
            serve.start(
                proxy_location="EveryNode" if every_node else "HeadOnly",
                http_options={"host": settings.host, "port": settings.port},
            )
            return
        except RETRIED:
            if attempt == attempts:
                raise
            serve.shutdown()


def stop() -> None:
    serve.delete(APP_NAME)
    stop_replicas(COPIES)
    COPIES.clear()


def build(args: dict[str, str]) -> Any:
    """Serve's config-file entry (`import_path: cluster.deploy:build`, as KubeRay's RayService uses it).

    `args`: `index` (the sharded index folder on a volume every node mounts), and optionally
    `replicas`, `shard_cpus`, `threads`, `retry_seconds`, `shard_timeout_seconds`, `router_data_dir`, `node_dir`,
    `min_copies`; keys,
    bounds and the rest come from the `SSI_*` environment as for `ssi serve`.
    """
    from service.settings import Settings

    known = {
        "index",
        "replicas",
        "shard_cpus",
        "threads",
        "retry_seconds",
        "shard_timeout_seconds",
        "router_data_dir",
        "node_dir",
        "min_copies",
    }
    unknown = sorted(set(args) - known)
    if unknown or "index" not in args:
        raise ClusterIndexError(
            f"serve config args: need 'index', may set {sorted(known - {'index'})}; got {sorted(args)}"
        )
    options = ClusterOptions(
        replicas=int(args.get("replicas", 1)),
        shard_cpus=float(args.get("shard_cpus", 1.0)),
        threads=int(args.get("threads", 1)),
        retry_seconds=float(args.get("retry_seconds", 30.0)),
        shard_timeout_seconds=float(args.get("shard_timeout_seconds", 60.0)),
        router_data_dir=Path(args["router_data_dir"]) if args.get("router_data_dir") else None,
        node_dir=Path(args["node_dir"]) if args.get("node_dir") else None,
        min_copies=int(args.get("min_copies", 2)),
    )
    return application(Path(args["index"]), Settings(), options)
