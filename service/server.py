"""Run the app under uvicorn: one process with bounded threads, or a group of worker processes.

One process by default (STYLE.md): each worker holds its own copy of the model and index. With
SSI_WORKERS > 1, service.workers runs a supervised group over one data folder that replays each
other's writes from the store (not uvicorn's --workers, whose processes would each build and write
the same cache). Thread pools are bounded as service.threads says.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from service.cores import usable_cores
from service.settings import Settings, is_loopback
from service.threads import bound_thread_environment, limit_malloc_arenas

log = logging.getLogger("service")


# httptools (the `serve` extra): the C parser. Measured with wrk on 100k passages (2 threads, docs/performance/search.md
# "Where a search's time goes"), it took 1 client's p50 from 4.0–4.3 ms with h11 to 2.9–3.4 ms. It answers a request
# line it cannot parse (a made-up method) with its own 400 before the app; h11 passes it on for a 405. Tests'
# servers use the same protocol.
HTTP_PROTOCOL = "httptools"


def http_protocol(settings: Settings) -> type:
    """HTTP_PROTOCOL with the bounds on slow and idle clients (service.slow_clients), for one server."""
    from service.slow_clients import guarded

    return guarded(settings.header_timeout, settings.body_timeout, settings.max_connections_per_client)


def preflight(settings: Settings) -> None:
    """Cheap checks before the server starts, so a wrong path fails now with a clear message.

    The full bundle verification (every file's hash, the encoder against the form's query map)
    runs when the collection loads; a failure there also stops the process with the reason.
    """
    if "SSI_INDEX_KIND" in os.environ:
        log.warning("SSI_INDEX_KIND is deprecated: name the index type SSI_INDEX_TYPE (flat, hnsw or ivf)")
    from ssi.bundle import read_manifest
    from ssi.sentence import providers_for

    for name, spec in settings.collection_specs().items():
        try:
            read_manifest(spec.bundle)
        except ValueError as exc:
            raise ValueError(f"collection '{name}': {exc}") from None
        if spec.corpus is not None and not spec.corpus.is_file():
            raise ValueError(f"collection '{name}': corpus {spec.corpus} is not a file")
    if settings.encode_device == "cuda":
        providers_for("cuda")  # a SentenceError (a ValueError) naming what is missing
    for folder in (settings.cache_dir, settings.store_dir):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"cannot create {folder}: {exc}") from None
        if not os.access(folder, os.W_OK):
            raise ValueError(f"{folder} is not writable")
    if not settings.writes_enabled:
        log.warning("no SSI_API_KEY: document writes and reloads are refused (403)")
    if not is_loopback(settings.host):
        if not settings.reads_need_key:
            log.warning("reads are open to anyone who reaches %s: set SSI_READ_KEY to require a key", settings.host)
        if not settings.allowed_hosts:
            log.warning("any Host header is answered: set SSI_ALLOWED_HOSTS to the names clients use")


def configure_process(settings: Settings) -> None:
    """Before anything heavy is imported: bounded threads and malloc arenas, and the log format."""
    bound_thread_environment(settings.threads)
    limit_malloc_arenas()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def uvicorn_config(app: Any, settings: Settings) -> Any:
    import uvicorn

    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        workers=1,
        # uvloop when installed (the `serve` extra): a faster event loop.
        loop="auto",
        http=http_protocol(settings),
        timeout_graceful_shutdown=30,
        server_header=False,
    )


def run(settings: Settings) -> int:
    """Serve until interrupted; returns the process exit code (1 if a collection could not load)."""
    configure_process(settings)
    busy = settings.workers * settings.threads
    cores = usable_cores()
    log.info(
        "%d worker process%s × %d thread%s (SSI_WORKERS, SSI_THREADS) on %s",
        settings.workers, "es" if settings.workers > 1 else "", settings.threads, "s" if settings.threads > 1 else "",
        cores.describe(),
    )  # fmt: skip
    if busy > cores.usable:
        log.warning("%d busy threads on %d cores: requests will wait for each other's cores", busy, cores.usable)
    if settings.workers > 1:
        from service.workers import supervise

        return supervise(settings)
    import uvicorn

    from service.app import create_app

    fatal: list[str] = []
    server: uvicorn.Server | None = None

    def on_fatal(message: str) -> None:
        fatal.append(message)
        if server is not None:
            server.should_exit = True

    app = create_app(settings, on_fatal=on_fatal)
    server = uvicorn.Server(uvicorn_config(app, settings))
    server.run()
    if fatal:
        print(f"ssi serve: {fatal[0]}", file=sys.stderr)
        return 1
    return 0
