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
    index_kind: Annotated[
        str | None, typer.Option(help="flat (exact), hnsw or ivf (approximate) (env SSI_INDEX_KIND)")
    ] = None,
    threads: Annotated[int | None, typer.Option(help="FAISS and onnxruntime threads (env SSI_THREADS)")] = None,
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
            "index_kind": index_kind,
            "threads": threads,
            "insecure_writes": insecure_writes,
            "log_level": log_level,
        }
    )
    from service.server import preflight, run

    try:
        settings.collection_specs()
        preflight(settings)
    except ValueError as exc:
        typer.echo(f"ssi serve: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(run(settings))


def register(app: typer.Typer) -> None:
    app.command("serve", help=serve.__doc__)(serve)
