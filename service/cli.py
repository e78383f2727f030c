"""`ssi serve` (and `ssi bench`): the online commands.

Only typer and the settings are imported at module level, so `ssi --help` stays fast; FastAPI,
FAISS and onnxruntime load when a command runs. Every flag has an `SSI_*` environment variable
(the flag wins); the API key is read from the environment only, so it never shows in `ps`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


def settings_from(overrides: dict[str, Any]) -> Any:
    """Settings from the environment with the given flags on top; a bad value exits with the reason."""
    from pydantic import ValidationError

    from service.settings import Settings

    try:
        return Settings(**{key: value for key, value in overrides.items() if value is not None})
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()]
        typer.echo("invalid settings:\n" + "\n".join(lines), err=True)
        raise typer.Exit(2) from None


def serve(
    bundle: Annotated[
        Path | None, typer.Option(help="Model bundle folder written by `ssi train` (env SSI_BUNDLE)")
    ] = None,
    corpus: Annotated[
        Path | None, typer.Option(help="JSONL corpus (id, title, text) to seed the documents from (env SSI_CORPUS)")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Address to bind (env SSI_HOST, default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (env SSI_PORT, default 8000)")] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Index snapshots (and, unless --data-dir, document stores) (env SSI_CACHE_DIR)")
    ] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Document stores (SQLite) (env SSI_DATA_DIR)")] = None,
    collection: Annotated[
        str | None, typer.Option(help="Name of the collection (env SSI_COLLECTION, default documents)")
    ] = None,
    schema: Annotated[
        Path | None,
        typer.Option(
            help='JSON file of the collection\'s field types, e.g. {"sku": "keyword", "price": "float"} (keyword, '
            "keyword_list, integer, float, boolean, date); other fields take their first value's type (env SSI_SCHEMA)"
        ),
    ] = None,
    index_type: Annotated[
        str | None, typer.Option(help="flat (exact), hnsw or ivf (approximate) (env SSI_INDEX_TYPE)")
    ] = None,
    threads: Annotated[int | None, typer.Option(help="FAISS and onnxruntime threads (env SSI_THREADS)")] = None,
    workers: Annotated[
        int | None,
        typer.Option(help="Server processes on the port and data folder, each with its own index (env SSI_WORKERS)"),
    ] = None,
    insecure_writes: Annotated[
        bool | None,
        typer.Option(
            "--insecure-writes/--no-insecure-writes",
            help="Accept writes without an API key (loopback address only) (env SSI_INSECURE_WRITES)",
        ),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option(help="critical, error, warning, info, debug (env SSI_LOG_LEVEL)")
    ] = None,
    encoder_precision: Annotated[
        str | None,
        typer.Option(
            help="A hybrid bundle's sentence encoder graph: fp32 or int8 (default: the one the bundle records) "
            "(env SSI_ENCODER_PRECISION)"
        ),
    ] = None,
    query_graph: Annotated[
        str | None,
        typer.Option(
            help="query (default): a hybrid bundle's query graph encodes queries where it has one (`ssi train "
            "--query-model`); document: its encoder does, as for documents (env SSI_QUERY_GRAPH)"
        ),
    ] = None,
    encode_device: Annotated[
        str | None,
        typer.Option(
            help="Where a first start encodes a hybrid bundle's documents: cpu, cuda (onnxruntime-gpu's CUDA "
            "provider) or auto (cuda where there, else cpu) (env SSI_ENCODE_DEVICE, default auto)"
        ),
    ] = None,
) -> None:
    """Serve search over a bundle: exact SSI ranking, live document updates, cached FAISS index.

    Writes need the X-API-Key header equal to SSI_API_KEY (environment only). See `GET /docs` for the API.
    """
    settings = settings_from(
        {
            "bundle": bundle,
            "corpus": corpus,
            "host": host,
            "port": port,
            "cache_dir": cache_dir,
            "data_dir": data_dir,
            "collection": collection,
            "schema_file": schema,
            "index_type": index_type,
            "threads": threads,
            "workers": workers,
            "insecure_writes": insecure_writes,
            "log_level": log_level,
            "encoder_precision": encoder_precision,
            "encode_device": encode_device,
            "query_graph": query_graph,
        }
    ).sized_for_this_machine()
    from service.server import preflight, run

    try:
        settings.collection_specs()
        preflight(settings)
    except ValueError as exc:
        typer.echo(f"ssi serve: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(run(settings))


def _ints(text: str, option: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"{option}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"{option}: expected positive integers, got {text!r}")
    return values


def bench(
    bundle: Annotated[Path, typer.Option(help="Model bundle folder to serve")],
    corpus: Annotated[Path | None, typer.Option(help="JSONL corpus to serve (or --generate N)")] = None,
    generate: Annotated[int, typer.Option(help="Generate this many short documents from the bundle's words")] = 0,
    passages: Annotated[
        int, typer.Option(help="Serve --corpus cut into 60-word passages, at most this many (real text at scale)")
    ] = 0,
    out: Annotated[Path | None, typer.Option(help="JSON result (default bench-results/bench-<time>.json)")] = None,
    work_dir: Annotated[Path | None, typer.Option(help="Caches and server logs (default: a new temp folder)")] = None,
    queries: Annotated[int, typer.Option(help="Keyword queries sampled from the corpus")] = 500,
    query_words: Annotated[int, typer.Option(help="Words per query (n random words of a document)")] = 5,
    query_sampler: Annotated[
        str,
        typer.Option(
            help="distinct: n distinct words of a document (the evaluation protocol); positions: words at random "
            "positions, stop words as often as the text has them"
        ),
    ] = "distinct",
    clients: Annotated[str, typer.Option(help="Concurrent HTTP clients, comma-separated")] = "1,8,32",
    seconds: Annotated[float, typer.Option(help="Seconds of load per client count")] = 10.0,
    index_types: Annotated[
        str,
        typer.Option(
            "--index-types",
            "--kinds",  # the flag's earlier name
            help="Index types, comma-separated; flat is the exact reference (default: flat,hnsw,ivf for search, "
            "flat for match)",
        ),
    ] = "",
    ef_search: Annotated[
        str, typer.Option(help="HNSW efSearch values for recall (values below the candidate pool, 64, act as 64)")
    ] = "64,128,256,512",
    nprobe: Annotated[str, typer.Option(help="IVF nprobe values for recall")] = "1,4,16,64,256",
    threads: Annotated[
        int | None, typer.Option(help="SSI_THREADS of the served process (default: as `ssi serve` chooses)", min=1)
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(help="SSI_WORKERS of the served process (default: as `ssi serve` chooses)", min=1, max=64),
    ] = None,
    setting: Annotated[
        list[str] | None,
        typer.Option(help="Another setting of the served process, NAME=VALUE for SSI_NAME (repeatable)"),
    ] = None,
    scenario: Annotated[
        str,
        typer.Option(
            help="search: POST /search with keyword queries; match: POST /match with whole pages against adverts "
            "(the corpus cut into 60-word passages; pages: its documents laid end to end)"
        ),
    ] = "search",
    ads: Annotated[str, typer.Option(help="match: adverts in the collection, comma-separated")] = "10000,100000",
    page_kb: Annotated[str, typer.Option(help="match: page sizes in kB, comma-separated")] = "2,20,60",
    pages: Annotated[int, typer.Option(help="match: distinct pages of each size", min=1)] = 50,
    ad_words: Annotated[
        int, typer.Option(help="match: words per advert (the corpus cut into passages this long)", min=1)
    ] = 60,
    restart: Annotated[
        bool,
        typer.Option(
            help="search: start the flat server again from its cache and time it (off: one server start less, "
            "for a check on a lent machine)"
        ),
    ] = True,
) -> None:
    """Benchmark the service over HTTP, with floors measured in the same run.

    `--scenario search` (default), against an in-process BM25 (bm25s) on the same corpus: p50/p99 latency
    and throughput at each client count, first-start (build) and restart (cache) times, memory, and recall@10
    of HNSW/IVF against the exact flat index at each knob. `--scenario match`: POST /match for pages of each
    size against each advert count, against the FAISS scan of the pages' embeddings and the same matching in
    process; IVF (in --index-types) served once per --nprobe with its recall@k against the flat answers.
    """
    import tempfile
    from datetime import datetime

    from service.bench.queries import SAMPLERS
    from service.bench.run import BenchConfig, run_bench

    if scenario not in ("search", "match"):
        raise typer.BadParameter(f"--scenario: use search or match, not {scenario!r}")
    if query_sampler not in SAMPLERS:
        raise typer.BadParameter(f"--query-sampler: use {' or '.join(SAMPLERS)}, not {query_sampler!r}")

    type_list = [t.strip() for t in (index_types or ("flat" if scenario == "match" else "flat,hnsw,ivf")).split(",")]
    type_list = [t for t in type_list if t]
    unknown = set(type_list) - {"flat", "hnsw", "ivf"}
    if unknown or (set(type_list) - {"flat"} and "flat" not in type_list):
        raise typer.BadParameter(
            "--index-types: use flat, hnsw, ivf (flat is needed as the exact reference for recall)"
        )
    if "flat" in type_list:
        type_list = ["flat", *[t for t in type_list if t != "flat"]]
    if corpus is None and generate <= 0:
        raise typer.BadParameter("give --corpus FILE or --generate N")
    extra: dict[str, str] = {}
    for item in setting or []:
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise typer.BadParameter(f"--setting: expected NAME=VALUE (e.g. ivf_nlist=4000), got {item!r}")
        extra["SSI_" + name.strip().upper().removeprefix("SSI_")] = value
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    if scenario == "match":
        from service.bench.match import MatchBenchConfig, run_match_bench

        if corpus is None:
            raise typer.BadParameter("--scenario match: give --corpus FILE (its passages are the adverts)")
        if set(type_list) - {"flat", "ivf"}:
            raise typer.BadParameter("--scenario match: --index-types flat or flat,ivf")
        match_config = MatchBenchConfig(
            bundle=bundle,
            corpus=corpus,
            work_dir=work_dir or Path(tempfile.mkdtemp(prefix="ssi-bench-")),
            out=out or Path("bench-results") / f"bench-match-{stamp}.json",
            ads=_ints(ads, "--ads"),
            page_kb=_ints(page_kb, "--page-kb"),
            pages=pages,
            ad_words=ad_words,
            clients=_ints(clients, "--clients"),
            seconds=seconds,
            index_types=type_list,
            nprobe=_ints(nprobe, "--nprobe"),
            threads=threads,
            workers=workers,
            extra_settings=extra,
        )
        run_match_bench(match_config, log=lambda line: typer.echo(line, err=True))
        return
    config = BenchConfig(
        bundle=bundle,
        corpus=corpus,
        generate=generate,
        passages=passages,
        work_dir=work_dir or Path(tempfile.mkdtemp(prefix="ssi-bench-")),
        out=out or Path("bench-results") / f"bench-{stamp}.json",
        n_queries=queries,
        query_words=query_words,
        query_sampler=query_sampler,  # type: ignore[arg-type]
        clients=_ints(clients, "--clients"),
        seconds=seconds,
        index_types=type_list,
        ef_search=_ints(ef_search, "--ef-search"),
        nprobe=_ints(nprobe, "--nprobe"),
        threads=threads,
        workers=workers,
        measure_restart=restart,
        extra_settings=extra,
    )
    run_bench(config, log=lambda line: typer.echo(line, err=True))


CacheDirOption = Annotated[
    Path | None, typer.Option(help="The service's index snapshots (and, unless --data-dir, stores) (env SSI_CACHE_DIR)")
]
DataDirOption = Annotated[Path | None, typer.Option(help="The service's document stores (env SSI_DATA_DIR)")]
CollectionsOption = Annotated[
    list[str] | None, typer.Option("--collection", help="A collection to include (repeat; default: every one)")
]


def backup(
    out: Annotated[Path, typer.Option(help="New folder to write the backup into")],
    cache_dir: CacheDirOption = None,
    data_dir: DataDirOption = None,
    collection: CollectionsOption = None,
) -> None:
    """Copy a running service's collections (documents, click log, newest index snapshots) consistently.

    Safe while the service serves and writes: SQLite's online backup copies one consistent state of each store.
    """
    from service.backup import BackupError
    from service.backup import backup as take_backup

    settings = settings_from({"cache_dir": cache_dir, "data_dir": data_dir})
    try:
        manifest = take_backup(settings, out, collection)
    except BackupError as exc:
        typer.echo(f"ssi backup: {exc}", err=True)
        raise typer.Exit(2) from None
    for name, held in manifest.collections.items():
        typer.echo(
            f"{name}: {held.documents} documents up to write {held.store_seq}, {len(held.snapshots)} snapshot(s)"
        )
    typer.echo(f"backup written to {out}")


def restore(
    source: Annotated[Path, typer.Option("--from", help="A folder written by `ssi backup`")],
    cache_dir: CacheDirOption = None,
    data_dir: DataDirOption = None,
    collection: CollectionsOption = None,
) -> None:
    """Copy a backup into a service's folders (checked against its sha256s; never over an existing collection).

    Then start `ssi serve` on those folders with the same bundle.
    """
    from service.backup import BackupError
    from service.backup import restore as restore_backup

    settings = settings_from({"cache_dir": cache_dir, "data_dir": data_dir})
    try:
        manifest = restore_backup(source, settings, collection)
    except BackupError as exc:
        typer.echo(f"ssi restore: {exc}", err=True)
        raise typer.Exit(2) from None
    names = collection or list(manifest.collections)
    typer.echo(f"restored {', '.join(names)} into {settings.store_dir} and {settings.index_dir}")


def register(app: typer.Typer) -> None:
    app.command("serve", help=serve.__doc__)(serve)
    app.command("bench", help=bench.__doc__)(bench)
    app.command("backup", help=backup.__doc__)(backup)
    app.command("restore", help=restore.__doc__)(restore)
