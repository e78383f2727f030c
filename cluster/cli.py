"""`ssi index` and `ssi cluster serve|local`: the sharded index and its service on a Ray cluster.

Only typer is imported at module level (`ssi --help` lists these commands without loading Ray);
`ssi index` without `--ray` never imports Ray at all. Bad input (a missing corpus, a folder that
already holds an index, an unreachable cluster) exits with a one-line reason, never a traceback.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer

cluster_app = typer.Typer(
    help="Serve a sharded index on a Ray cluster (same HTTP API as `ssi serve`).", no_args_is_help=True
)


def fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def require_ray() -> None:
    """A clear message, not an ImportError, where the `cluster` extra is not installed (the service image)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise fail("this command needs Ray: pip install -e '.[cluster]' (or scripts/install.sh --extras ...,cluster)")


CollectionTypeOption = Annotated[
    str,
    typer.Option(
        "--type",
        help="documents (searched) or adverts (matched to pages by POST /match; a corpus line's category, "
        "advertiser, active and budget fields are kept per advert, as `ssi serve` keeps them)",
    ),
]


def index(
    bundle: Annotated[Path, typer.Option(help="Model bundle folder written by `ssi train`")],
    corpus: Annotated[Path, typer.Option(help="Corpus: JSONL (id, title, text; .gz too) or Parquet")],
    out: Annotated[Path, typer.Option(help="Empty folder for the sharded index (shards + cluster.json)")],
    shards: Annotated[int, typer.Option(min=1, max=4096, help="Number of index shards")] = 2,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray", help="Run as a Ray Data job on this cluster: 'local' starts one here, 'auto', ray://HOST:10001"
        ),
    ] = None,
    index_type: Annotated[str, typer.Option(help="flat (exact), hnsw or ivf")] = "flat",
    batch_size: Annotated[int, typer.Option(min=1, help="Documents per embedding batch (a Ray Data block)")] = 2048,
    workers: Annotated[int | None, typer.Option(min=1, help="CPUs of a 'local' Ray cluster (default: all)")] = None,
    collection_type: CollectionTypeOption = "documents",
    open_vocab: Annotated[
        bool | None,
        typer.Option(
            "--open-vocab/--closed-vocab",
            help="Write each shard's open vocabulary (the new words of its documents) for a cluster serving it "
            "(SSI_OPEN_VOCAB=true); default: SSI_OPEN_VOCAB",
        ),
    ] = None,
    statistics: Annotated[
        str | None,
        typer.Option(
            help="With the open vocabulary, whose statistics the cluster will weigh the lexical part with: bundle, "
            "or collection (every shard's rows at the avg_len of every document, recorded in cluster.json; "
            "SSI_OPEN_VOCAB_STATISTICS=collection serves it); default: SSI_OPEN_VOCAB_STATISTICS",
        ),
    ] = None,
    schema: Annotated[
        Path | None,
        typer.Option(
            help="A schema file (JSON: field name -> type) fixing the corpus's field types on every shard, as "
            "`ssi serve --schema` does; default: SSI_SCHEMA"
        ),
    ] = None,
    encoder_precision: Annotated[
        str | None,
        typer.Option(
            help="A hybrid bundle's sentence encoder graph every shard's vectors are encoded with: fp32 or int8 "
            "(default: SSI_ENCODER_PRECISION, else the bundle's, as `ssi serve` on this machine serves it)"
        ),
    ] = None,
) -> None:
    """Build a sharded index: each document's vectors computed once (in parallel with --ray), written per shard."""
    from cluster.index_job import build_index
    from cluster.manifest import ClusterIndexError
    from ssi.bundle import BundleError
    from ssi.corpus import DataFileError
    from ssi.fields.schema_file import read_schema

    if ray is not None:
        require_ray()
    if index_type not in ("flat", "hnsw", "ivf"):
        raise fail(f"--index-type must be flat, hnsw or ivf (got {index_type!r})")
    if collection_type not in ("documents", "adverts"):
        raise fail(f"--type must be documents or adverts (got {collection_type!r})")
    if statistics not in (None, "bundle", "collection"):
        raise fail(f"--statistics must be bundle or collection (got {statistics!r})")
    if encoder_precision not in (None, "fp32", "int8"):
        raise fail(f"--encoder-precision must be fp32 or int8 (got {encoder_precision!r})")
    # SSI_OPEN_VOCAB, SSI_OPEN_VOCAB_WORDS and SSI_OPEN_VOCAB_STATISTICS, as the cluster will serve
    settings = _settings(None, None, False)
    schema_file = schema if schema is not None else settings.schema_file
    try:
        declared = read_schema(schema_file) if schema_file is not None else None
    except (OSError, ValueError) as exc:
        raise fail(str(exc)) from None
    started = time.perf_counter()
    try:
        manifest = build_index(
            corpus,
            bundle,
            out,
            shards,
            ray_address=ray,
            index_type=index_type,
            batch_size=batch_size,
            workers=workers,  # type: ignore[arg-type]
            collection_type=collection_type,  # type: ignore[arg-type]
            open_vocab=settings.open_vocab if open_vocab is None else open_vocab,
            open_vocab_words=settings.open_vocab_words,
            statistics=settings.open_vocab_statistics if statistics is None else statistics,  # type: ignore[arg-type]
            declared=declared,
            precision=encoder_precision or settings.encoder_precision,  # type: ignore[arg-type]
        )
    except (ClusterIndexError, BundleError, DataFileError, ValueError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    except ConnectionError as exc:
        raise fail(f"cannot reach the Ray cluster at {ray}: {exc}") from None
    per_shard = ", ".join(str(e.documents) for e in manifest.entries)
    typer.echo(
        f"indexed {manifest.documents} {manifest.type} into {manifest.shards} shards ({per_shard}) under {out} "
        f"in {time.perf_counter() - started:.1f}s (embedding {manifest.embed_seconds:.1f}s, engine {manifest.engine})"
    )


def _settings(host: str | None, port: int | None, insecure_writes: bool) -> Any:
    from service.cli import settings_from

    return settings_from({"host": host, "port": port, "insecure_writes": insecure_writes or None})


def _serve_forever(index_dir: Path, settings: Any, options: Any, address: str, num_cpus: int | None) -> None:
    require_ray()
    from cluster.deploy import start, stop
    from cluster.manifest import ClusterIndexError

    try:
        start(index_dir, settings, options, address=address, num_cpus=num_cpus)
    except ClusterIndexError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"serving {index_dir} at http://{settings.host}:{settings.port} (Ctrl-C stops)")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    stop()


Host = Annotated[str, typer.Option(help="Address of the HTTP proxy")]
Port = Annotated[int, typer.Option(help="Port of the HTTP proxy")]
Insecure = Annotated[
    bool, typer.Option("--insecure-writes", help="Accept writes without SSI_API_KEY (loopback address only)")
]
Replicas = Annotated[
    int,
    typer.Option(
        min=1,
        help="Replicas of every shard, each on its own node's disk and all taking part in writes (more than 1: "
        "replica i runs on the node labelled ssi.node=n<i>)",
    ),
]
ShardCpus = Annotated[float, typer.Option(min=0, help="CPUs Ray reserves for each shard replica")]
Threads = Annotated[int, typer.Option(min=1, help="FAISS / onnxruntime threads per shard replica")]
Retry = Annotated[float, typer.Option(min=0, help="Seconds the router retries a failing shard before a 503")]
ShardTimeout = Annotated[
    float, typer.Option(min=0.1, help="Seconds one shard call may take, retries included, before a 503 naming it")
]
NodeDir = Annotated[
    Path | None,
    typer.Option(help="Where each node keeps its replicas' copies (its own disk). Default: INDEX/nodes"),
]
MinCopies = Annotated[
    int, typer.Option(min=1, help="Replicas that must hold a write before it is acknowledged (with --replicas > 1)")
]
RouterData = Annotated[
    Path | None,
    typer.Option(
        help="The router's data folder: its traffic log (impressions, clicks) in stores/. Default: INDEX/router"
    ),
]


@cluster_app.command("serve")
def serve_command(
    index_dir: Annotated[Path, typer.Option("--index", help="Sharded index folder written by `ssi index`")],
    address: Annotated[
        str, typer.Option(help="Ray cluster: 'local' starts one here, 'auto', ray://HOST:10001")
    ] = "auto",
    host: Host = "127.0.0.1",
    port: Port = 8000,
    replicas: Replicas = 1,
    shard_cpus: ShardCpus = 1.0,
    threads: Threads = 1,
    retry_seconds: Retry = 30.0,
    shard_timeout: ShardTimeout = 60.0,
    insecure_writes: Insecure = False,
    router_data_dir: RouterData = None,
    node_dir: NodeDir = None,
    min_copies: MinCopies = 2,
    router_on_head: Annotated[
        bool, typer.Option(help="Run the router on the head node, so that a lost worker node takes no router with it")
    ] = False,
    router_on_workers: Annotated[
        bool,
        typer.Option(
            help="Run the routers on the labelled worker nodes, one a node (with --replicas > 1): the head lost takes "
            "none of them, and every node's HTTP proxy reaches one"
        ),
    ] = False,
    router_replicas: Annotated[int, typer.Option(min=1, help="Replicas of the router")] = 1,
    map_store: Annotated[
        str | None,
        typer.Option(
            help="With --replicas > 1: where the coordinator keeps the shard map, redis://HOST:PORT (a Redis with "
            "appendonly yes and appendfsync always, such as the one of Ray's GCS fault tolerance) so that it outlives "
            "the head; or redis+sentinel://SENTINEL[,SENTINEL...]/NAME[/DB] for a Redis behind Sentinel; ?replicas=N: "
            "a change counts once N Redis replicas hold it; default: NODE_DIR/coordinator/map.json on the head's disk"
        ),
    ] = None,
) -> None:
    """Serve a sharded index on a running Ray cluster: one Serve deployment per shard and a router."""
    require_ray()
    from cluster.deploy import ClusterOptions

    options = ClusterOptions(
        node_dir=node_dir,
        min_copies=min_copies,
        router_on_head=router_on_head,
        router_on_workers=router_on_workers,
        router_replicas=router_replicas,
        map_store=map_store,
        replicas=replicas,
        shard_cpus=shard_cpus,
        threads=threads,
        retry_seconds=retry_seconds,
        shard_timeout_seconds=shard_timeout,
        router_data_dir=router_data_dir,
    )
    _serve_forever(index_dir, _settings(host, port, insecure_writes), options, address, None)


@cluster_app.command("local")
def local_command(
    bundle: Annotated[Path, typer.Option(help="Model bundle folder written by `ssi train`")],
    corpus: Annotated[
        Path, typer.Option(help="Corpus: JSONL or Parquet (indexed unless --out already holds its index)")
    ],
    out: Annotated[Path, typer.Option(help="Folder of the sharded index (built here on first run)")],
    shards: Annotated[int, typer.Option(min=1, help="Number of index shards")] = 2,
    workers: Annotated[int, typer.Option(min=0, help="Worker nodes beside the head, on loopback")] = 2,
    host: Host = "127.0.0.1",
    port: Port = 8000,
    threads: Threads = 1,
    insecure_writes: Insecure = False,
    collection_type: CollectionTypeOption = "documents",
    replicas: Replicas = 1,
    min_copies: MinCopies = 2,
) -> None:
    """One command: start a Ray cluster here (a head and worker nodes on loopback), index the corpus on it, serve it."""
    require_ray()
    from cluster.deploy import ClusterOptions
    from cluster.local import LocalCluster
    from cluster.manifest import MANIFEST_FILE

    settings = _settings(host, port, insecure_writes)
    open_vocab = settings.open_vocab
    if replicas > workers:
        raise fail(f"--replicas {replicas} needs as many worker nodes (--workers {workers}): each has its own node")
    # Replicated shards: the head's tables (Ray's GCS) and the shard map in a Redis of their own, persistence on,
    # beside the index folder (which `ssi index` wants empty): a GCS killed and started again reads them back.
    head_dir = out.with_name(f"{out.name}-head") if replicas > 1 else None
    try:
        local = LocalCluster(workers=workers, redis_dir=None if head_dir is None else head_dir / "redis")
    except FileNotFoundError as exc:
        raise fail(str(exc)) from None
    try:
        local.connect()
        typer.echo(f"local Ray cluster at {local.address}: {local.nodes()} nodes")
        if local.redis is not None:
            typer.echo(f"the GCS's tables and the shard map in Redis at {local.redis.address} ({head_dir})")
            local.supervise_gcs()  # a GCS that exits (killed, its Redis restarted) is started again on its tables
        if not (out / MANIFEST_FILE).exists():
            index(
                bundle=bundle,
                corpus=corpus,
                out=out,
                shards=shards,
                ray=local.address,
                collection_type=collection_type,
                open_vocab=open_vocab,
                statistics=settings.open_vocab_statistics,
            )
        options = ClusterOptions(
            shard_cpus=0,
            threads=threads,
            replicas=replicas,
            min_copies=min_copies,
            # one router a worker node, each node's HTTP proxy in front: the head lost takes none of them
            router_on_workers=replicas > 1,
            router_replicas=replicas if replicas > 1 else 1,
            map_store=local.map_store,
        )
        _serve_forever(out, settings, options, local.address, None)
    finally:
        local.shutdown()


@cluster_app.command("events")
def events_command(
    out: Annotated[Path, typer.Option(help="New event store file: the union of every node's copy of the click log")],
    address: Annotated[
        str, typer.Option(help="Ray cluster serving with --replicas: 'auto', ray://HOST:10001")
    ] = "auto",
) -> None:
    """Write the cluster's click log (every labelled node's copy, merged) to one file for `ssi train --clicks`."""
    require_ray()
    from cluster.connect import connect
    from cluster.replication.events import export
    from cluster.replication.ray_replicas import EventPeers, running_groups
    from service.errors import Unavailable as ServiceUnavailable

    try:
        connect(address)
    except ConnectionError as exc:
        raise fail(f"cannot reach the Ray cluster at {address}: {exc}") from None
    groups = running_groups()
    if len(groups) != 1:
        found = ", ".join(f"{g} ({n} replicas)" for g, n in groups.items()) or "none"
        raise fail(f"expected one replicated deployment (ssi cluster serve --replicas N) on the cluster; found {found}")
    ((group, copies),) = groups.items()
    try:
        read = export(EventPeers(group, copies, timeout=30.0), out)
    except (FileExistsError, ServiceUnavailable) as exc:
        raise fail(str(exc)) from None
    missing = f"; not answering: {', '.join(read['copies_not_answering'])}" if read["copies_not_answering"] else ""
    typer.echo(f"wrote {out}: {read['clicks']} clicks from {', '.join(read['copies_read'])}{missing}")


def register(app: typer.Typer) -> None:
    app.command("index")(index)
    app.add_typer(cluster_app, name="cluster")
