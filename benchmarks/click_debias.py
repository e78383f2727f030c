"""Which debiasing learns from noisy, position-biased clicks: one simulated log, every `--debias`, no loop.

The loop of benchmarks.click_loop mixes the debiasing with promotion and with the rankings each round serves;
this isolates it. Simulated users (benchmarks.click_loop.Users: examination (1/r)^η, clicks 0.9 on relevant and
0.1 on other examined results) ask SciFact's train claims of a bundle equal to BM25 (training.feedback.start),
ranked in process, `--sessions` times; the log (the exported click-log format) trains one model per mode from
scratch with the labelled recipe's knobs, and each is scored by NDCG@10 on the validation claims. Beside them:
the start (BM25), and the true labels of the train claims' relevant documents that BM25 shows in its top 10,
without noise: the most any click log of this ranker can teach (nothing below rank 10 is ever clicked).

    python -m benchmarks.click_debias --sessions 30000
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

import ssi
from benchmarks.click_loop import Users, fmt, load_world, model_ndcg
from training.feedback.start import write_bm25_start


def _train(corpus: Path, log: Path, out: Path, debias: str, seed: int) -> None:
    args = [
        sys.executable, "-m", "training", "train", "--corpus", str(corpus), "--clicks", str(log), "--out", str(out),
        "--debias", debias, "--valid-share", "0", "--dims", "64", "--epochs", "12", "--hard-fraction", "0",
        "--lr", "0.03", "--seed", str(seed), "--no-progress",
    ]  # fmt: skip
    subprocess.run(args, check=True, capture_output=True, text=True)


def main(
    data: Annotated[Path, typer.Option(help="The SciFact folder (BEIR format).")] = Path("../shared/data/scifact"),
    sessions: Annotated[int, typer.Option(help="Simulated sessions (one claim, its clicks).")] = 30_000,
    modes: Annotated[str, typer.Option(help="--debias modes, comma-separated.")] = "pbm,naive,ips",
    eta: Annotated[float, typer.Option(help="Users examine position r with probability (1/r)^eta.")] = 1.0,
    p_relevant: Annotated[float, typer.Option(help="Click probability of an examined relevant result.")] = 0.9,
    p_other: Annotated[float, typer.Option(help="Click probability of an examined non-relevant result.")] = 0.1,
    seed: Annotated[int, typer.Option(help="Users' and trainer's seed.")] = 0,
    work: Annotated[Path, typer.Option(help="Scratch folder.")] = Path("bench-results/click_debias"),
    out: Annotated[Path, typer.Option(help="JSON result file.")] = Path("bench-results/click_debias.json"),
) -> None:
    started = time.perf_counter()
    world = load_world(data)
    work.mkdir(parents=True, exist_ok=True)
    write_bm25_start(world.corpus, work / "start")
    start = ssi.load(work / "start", corpus=world.corpus)
    shown = {q.id: [hit.id for hit in start.search(q.text, k=10)] for q in world.train_claims}
    users = Users(world, eta, p_relevant, p_other, 10, random.Random(seed))
    log = work / "clicks.jsonl"
    clicks = 0
    with log.open("w", encoding="utf-8") as handle:
        for s in range(sessions):
            claim = users.rng.choice(world.train_claims)
            clicked = set(users.clicked(shown[claim.id], world.relevant[claim.id]))
            clicks += len(clicked)
            for r, doc in enumerate(shown[claim.id], start=1):
                line = {
                    "impression": f"s{s}",
                    "query": claim.text,
                    "doc": doc,
                    "position": r,
                    "clicked": doc in clicked,
                }
                handle.write(json.dumps(line) + "\n")
    oracle = work / "oracle.jsonl"
    with oracle.open("w", encoding="utf-8") as handle:
        for claim in world.train_claims:
            for doc in world.relevant[claim.id] & set(shown[claim.id]):
                handle.write(json.dumps({"query": claim.text, "doc": doc, "position": 1, "clicked": True}) + "\n")
    result: dict[str, Any] = {"sessions": sessions, "clicks": clicks}
    rows = [("BM25 start (no training)", model_ndcg(start, world.valid_task))]
    for mode in [m.strip() for m in modes.split(",") if m.strip()]:
        _train(world.corpus, log, work / mode, mode, seed)
        rows.append((f"--debias {mode}", model_ndcg(ssi.load(work / mode, corpus=world.corpus), world.valid_task)))
    _train(world.corpus, oracle, work / "oracle", "naive", seed)
    rows.append(
        (
            "true labels shown in BM25's top 10",
            model_ndcg(ssi.load(work / "oracle", corpus=world.corpus), world.valid_task),
        )
    )
    result["ndcg10"] = {name: [s.mean, s.stderr] for name, s in rows}
    result["seconds"] = round(time.perf_counter() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    typer.echo(
        f"{sessions} simulated sessions ({clicks} clicks) on SciFact's {len(world.train_claims)} train claims; "
        f"NDCG@10 on {world.valid_task.n_queries} validation claims:"
    )
    for name, summary in rows:
        typer.echo(f"| {name} | {fmt(summary)} |")


if __name__ == "__main__":
    typer.run(main)
