"""`ssi learn` at its defaults against the recipe the simulated loop measured, on the same SciFact log: the round's
time, and its candidates' NDCG@10 on the validation claims beside candidates trained with the benchmark's own
flags (benchmarks.click_loop's: --epochs 12 --lr 0.03 --hard-fraction 0 --valid-share 0).

The log: --sessions simulated sessions (benchmarks.click_loop.Users, seed 0) against a served BM25 start bundle.
Then, with no server (nothing reloaded), one `ssi learn` round with no flag but the data's, and one with the
benchmark's flags spelled out, each in a bundles folder of its own.

    python -m benchmarks.learn_defaults --sessions 10000 --out runs/learn-defaults.json
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

import ssi
from benchmarks.click_loop import ADMIN_KEY, Users, load_world, model_ndcg
from service.bench.server import ServedProcess
from ssi.bundle import load_bundle
from training.feedback.learner import learn_once
from training.feedback.round import RoundSettings
from training.feedback.start import write_bm25_start

BENCHMARK_FLAGS = {"epochs": 12.0, "lr": 0.03, "train_args": ["--hard-fraction", "0", "--valid-share", "0"]}


def simulated_log(world: Any, start: Path, work: Path, sessions: int) -> Path:
    """A copy of the event store after `sessions` simulated sessions."""
    env = {
        "SSI_DATA_DIR": str(work / "data"), "SSI_CACHE_DIR": str(work / "cache"), "SSI_ADMIN_KEY": ADMIN_KEY,
        "SSI_WORKERS": "1", "SSI_EVENTS": "true", "SSI_EVENTS_TEXT": "plain", "SSI_EVENTS_EXPLORE": "0.05",
    }  # fmt: skip
    server = ServedProcess(start, world.corpus, work, env)
    server.start(timeout=600)
    users = Users(world, 1.0, 0.9, 0.1, 10, random.Random(0))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for _ in range(sessions):
                users.session(client)
        time.sleep(0.5)  # the writer commits every 0.1 s
    finally:
        server.stop()
    store = next((work / "data" / "stores").glob("*/events.sqlite"))
    log = work / "log.sqlite"
    source, target = sqlite3.connect(f"file:{store}?mode=ro", uri=True), sqlite3.connect(log)
    source.backup(target)
    source.close()
    target.close()
    return log


def main(
    data: Annotated[Path, typer.Option(help="The SciFact folder (BEIR format).")] = Path("../shared/data/scifact"),
    sessions: Annotated[int, typer.Option(help="Simulated sessions in the log.")] = 10_000,
    out: Annotated[Path, typer.Option(help="JSON result file.")] = Path("runs/learn-defaults.json"),
) -> None:
    """Print each round's seconds, decision and candidates' validation NDCG@10."""
    world = load_world(data)
    found: dict[str, Any] = {"sessions": sessions}
    with tempfile.TemporaryDirectory(prefix="ssi-learn-defaults-") as scratch:
        work = Path(scratch)
        start = work / "start"
        write_bm25_start(world.corpus, start)
        log = simulated_log(world, start, work, sessions)
        for name, flags in (("defaults", {}), ("benchmark_flags", BENCHMARK_FLAGS)):
            bundles = work / name
            shutil.copytree(start, bundles / "start")
            settings = RoundSettings(log=log, served=bundles / "start", corpus=world.corpus, bundles=bundles, **flags)
            t0 = time.perf_counter()
            learned = learn_once(settings)
            seconds = time.perf_counter() - t0
            assert learned.outcome is not None, learned.record.reason
            report = learned.outcome.report
            scores = [
                model_ndcg(ssi.load(Path(c), corpus=world.corpus), world.valid_task) for c in report["candidates"]
            ]
            found[name] = {
                "seconds": round(seconds, 1), "decision": learned.record.decision,
                "train_command": report["train_command"],
                "candidates_ndcg": [[s.mean, s.stderr] for s in scores],
                "content_hashes": [load_bundle(c).content_hash for c in report["candidates"]],
            }  # fmt: skip
            typer.echo(f"{name}: {json.dumps(found[name])}", err=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(found, indent=2))
    typer.echo(json.dumps(found, indent=2))


if __name__ == "__main__":
    typer.run(main)
