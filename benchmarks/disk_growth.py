"""Disk use under replacements: the store, the snapshots and the index rows, as a collection is rewritten.

Starts the real server on a generated corpus, replaces the same `--replace` documents over and over
(one batch per round), and prints what the data folders hold every `--every` rounds. Replacing a
document adds a row; online compaction, write-log trimming and snapshot pruning keep all three flat.

    python -m benchmarks.disk_growth --documents 400 --replace 100 --rounds 40
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer

from benchmarks.crash_loop import KEY, Config, Server, make_world
from service.snapshot import disk_bytes


def main(
    documents: Annotated[int, typer.Option(help="Documents of the generated corpus")] = 400,
    replace: Annotated[int, typer.Option(help="Documents replaced per round (one batch)")] = 100,
    rounds: Annotated[int, typer.Option(help="Rounds of replacements")] = 40,
    every: Annotated[int, typer.Option(help="Print every this many rounds")] = 10,
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="ssi-disk-"))
    docs, corpus, bundle = make_world(folder / "world", documents, seed=0)
    config = Config(work_dir=folder, snapshot_every_writes=50, compact_dead_fraction=0.3)
    server = Server(config, corpus, bundle)
    server.start()
    try:
        server.wait_ready()
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for r in range(1, rounds + 1):
                batch = [
                    {"id": d.id, "title": f"v{r}", "text": docs[(i + r) % len(docs)].text}
                    for i, d in enumerate(docs[:replace])
                ]
                client.post("/documents", json={"documents": batch}, headers=KEY).raise_for_status()
                time.sleep(0.3)  # snapshots are due every 50 writes or 0.2 s
                if r % every == 0:
                    rows = client.get("/model").json()["index"]["rows"]
                    typer.echo(
                        f"after {r * replace:,} replacements: store {disk_bytes(folder / 'data') / 1e3:.0f} kB, "
                        f"snapshots {disk_bytes(folder / 'cache' / 'index') / 1e3:.0f} kB, index rows {rows:,}"
                    )
    finally:
        server.stop()


if __name__ == "__main__":
    typer.run(main)
