"""Which debiasing learns from noisy, position-biased clicks: one simulated log, every `--debias`, no loop.

The loop of benchmarks.click_loop mixes the debiasing with promotion and with the rankings each round serves;
this isolates it. Simulated users (benchmarks.click_loop.Users: examination (1/r)^η, clicks 0.9 on relevant and
0.1 on other examined results) ask SciFact's train claims of a bundle equal to BM25 (training.feedback.start),
ranked in process, `--sessions` times; the log (the exported click-log format) trains one model per mode from
scratch with the labelled recipe's knobs, and each is scored by NDCG@10 on the validation claims. Beside them:
the start (BM25), and the true labels of the train claims' relevant documents that BM25 shows in its top 10,
without noise: the most any click log of this ranker can teach (nothing below rank 10 is ever clicked).

Three ways past that limit, measured here rather than in the loop (each run takes a minute or a few):

- exploring below the top 10: a share `--explore-share` of sessions is shown the top 10 − `--explore-swaps`
  results and `--explore-swaps` drawn from ranks 11..`--explore-pool`, in random order (marked randomized);
- `--rounds` R > 1 (one mode): the log grows by `--sessions` a round, and each round's sessions are ranked by
  the model the previous round trained from the whole log (always promoted: the loop without its gate);
- `--page` P > 10: sessions are shown P results (its top 10 randomized when exploring), examined (1/r)^η down
  the list, times `--page2` below rank 10 (1: one long page users scroll; below 1: a second page fewer reach).

    python -m benchmarks.click_debias --sessions 30000
    python -m benchmarks.click_debias --modes pbm --explore-share 0.2 --explore-swaps 3 --explore-pool 30
    python -m benchmarks.click_debias --sessions 5000 --rounds 8 --modes pbm --explore-share 0.05
    python -m benchmarks.click_debias --modes pbm,naive --explore-share 0.05 --page 20 --oracle-depth 20
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any

import typer

import ssi
from benchmarks.click_loop import Users, World, fmt, load_world, model_ndcg
from training.feedback.start import write_bm25_start


def _train(corpus: Path, log: Path, out: Path, debias: str, seed: int) -> None:
    args = [
        sys.executable, "-m", "training", "train", "--corpus", str(corpus), "--clicks", str(log), "--out", str(out),
        "--debias", debias, "--valid-share", "0", "--dims", "64", "--epochs", "12", "--hard-fraction", "0",
        "--lr", "0.03", "--seed", str(seed), "--no-progress",
    ]  # fmt: skip
    subprocess.run(args, check=True, capture_output=True, text=True)


@dataclass
class Explore:
    """Which sessions are randomized, and how deep they reach."""

    share: float
    swaps: int
    pool: int
    rng: random.Random
    page: int = 10

    def shown(self, ranked: list[str]) -> tuple[list[str], bool]:
        """The ten results a session sees, and whether they were randomized."""
        if self.rng.random() >= self.share:
            return ranked[: self.page], False
        deep = ranked[10 : self.pool]
        picked = ranked[: 10 - min(self.swaps, len(deep))] + self.rng.sample(deep, min(self.swaps, len(deep)))
        self.rng.shuffle(picked)
        return picked + [d for d in ranked[10 : self.page] if d not in picked], True


def _sessions(
    world: World, users: Users, explore: Explore, ranked: dict[str, list[str]], n: int, first: int, handle: IO[str]
) -> int:
    """`n` sessions on `ranked` (each train claim's results, best first) written as log lines; their clicks."""
    clicks = 0
    for s in range(first, first + n):
        claim = users.rng.choice(world.train_claims)
        shown, randomized = explore.shown(ranked[claim.id])
        clicked = set(users.clicked(shown, world.relevant[claim.id]))
        clicks += len(clicked)
        for r, doc in enumerate(shown, start=1):
            line = {
                "impression": f"s{s}",
                "query": claim.text,
                "doc": doc,
                "position": r,
                "clicked": doc in clicked,
                "randomized": randomized,
            }
            handle.write(json.dumps(line) + "\n")
    return clicks


def _ranked(model: Any, world: World, depth: int) -> dict[str, list[str]]:
    return {q.id: [hit.id for hit in model.search(q.text, k=depth)] for q in world.train_claims}


def _recall(world: World, ranked: dict[str, list[str]]) -> tuple[int, int]:
    """Relevant documents of the train claims in their top 10, and in all."""
    found = sum(len(world.relevant[q] & set(r[:10])) for q, r in ranked.items())
    return found, sum(len(world.relevant[q]) for q in ranked)


def main(
    data: Annotated[Path, typer.Option(help="The SciFact folder (BEIR format).")] = Path("../shared/data/scifact"),
    sessions: Annotated[int, typer.Option(help="Simulated sessions (one claim, its clicks).")] = 30_000,
    modes: Annotated[str, typer.Option(help="--debias modes, comma-separated.")] = "pbm,naive,ips",
    eta: Annotated[float, typer.Option(help="Users examine position r with probability (1/r)^eta.")] = 1.0,
    p_relevant: Annotated[float, typer.Option(help="Click probability of an examined relevant result.")] = 0.9,
    p_other: Annotated[float, typer.Option(help="Click probability of an examined non-relevant result.")] = 0.1,
    explore_share: Annotated[float, typer.Option(help="Share of sessions shown a randomized list.")] = 0.0,
    explore_swaps: Annotated[int, typer.Option(help="Results from below the top 10 in a randomized list.")] = 0,
    explore_pool: Annotated[int, typer.Option(help="How deep the swapped-in results are drawn from.")] = 10,
    page: Annotated[int, typer.Option(help="Results a session shows (its top 10 randomized when exploring).")] = 10,
    page2: Annotated[float, typer.Option(help="Examination below rank 10 is (1/r)^eta times this.")] = 1.0,
    rounds: Annotated[int, typer.Option(help="Rounds, each ranked by the last round's model (one mode).")] = 1,
    oracle_depth: Annotated[
        list[int], typer.Option(help="Train on the true labels in BM25's top D too (0: at any rank); repeatable.")
    ] = [10],  # noqa: B006 (typer reads the default)
    seed: Annotated[int, typer.Option(help="Users' and trainer's seed.")] = 0,
    work: Annotated[Path, typer.Option(help="Scratch folder.")] = Path("bench-results/click_debias"),
    out: Annotated[Path, typer.Option(help="JSON result file.")] = Path("bench-results/click_debias.json"),
) -> None:
    started = time.perf_counter()
    oracle_depths = list(oracle_depth)
    world = load_world(data)
    mode_list = [m.strip() for m in modes.split(",") if m.strip()]
    if rounds > 1 and len(mode_list) != 1:
        raise typer.BadParameter("--rounds above 1 serves one mode's model: give one --modes")
    work.mkdir(parents=True, exist_ok=True)
    write_bm25_start(world.corpus, work / "start")
    start = ssi.load(work / "start", corpus=world.corpus)
    depth = max(explore_pool, page)
    ranked = _ranked(start, world, depth)
    users = Users(world, eta, p_relevant, p_other, page, random.Random(seed), page2=page2)
    explore = Explore(explore_share, explore_swaps, explore_pool, random.Random(seed + 1), page)
    log = work / "clicks.jsonl"
    clicks = 0
    result: dict[str, Any] = {"settings": {"explore": [explore_share, explore_swaps, explore_pool], "rounds": rounds}}
    rows = [("BM25 start (no training)", model_ndcg(start, world.valid_task))]
    with log.open("w", encoding="utf-8") as handle:
        for round_ in range(1, rounds + 1):
            found, relevant = _recall(world, ranked)
            clicks += _sessions(world, users, explore, ranked, sessions, (round_ - 1) * sessions, handle)
            handle.flush()
            if rounds == 1:
                break
            _train(world.corpus, log, work / f"round{round_}", mode_list[0], seed)
            model = ssi.load(work / f"round{round_}", corpus=world.corpus)
            rows.append(
                (
                    f"round {round_}: {round_ * sessions} sessions, served top 10 held {found}/{relevant} relevant",
                    model_ndcg(model, world.valid_task),
                )
            )
            ranked = _ranked(model, world, depth)
    result.update({"sessions": sessions * rounds, "clicks": clicks})
    if rounds == 1:
        for mode in mode_list:
            _train(world.corpus, log, work / mode, mode, seed)
            rows.append((f"--debias {mode}", model_ndcg(ssi.load(work / mode, corpus=world.corpus), world.valid_task)))
    bm25_ranked = _ranked(start, world, max([10, *oracle_depths]))
    for d in sorted(set(oracle_depths) - {0}) + ([0] if 0 in oracle_depths else []):
        oracle = work / f"oracle{d}.jsonl"
        found = 0
        with oracle.open("w", encoding="utf-8") as handle:
            for claim in world.train_claims:
                labels = world.relevant[claim.id] & set(bm25_ranked[claim.id][:d]) if d else world.relevant[claim.id]
                found += len(labels)
                for doc in labels:
                    line = {"query": claim.text, "doc": doc, "position": 1, "clicked": True}
                    handle.write(json.dumps(line) + "\n")
        _train(world.corpus, oracle, work / f"oracle{d}", "naive", seed)
        where = f"BM25's top {d}" if d else "any rank"
        rows.append(
            (
                f"true labels at {where} ({found} of the train claims' relevant documents), no noise",
                model_ndcg(ssi.load(work / f"oracle{d}", corpus=world.corpus), world.valid_task),
            )
        )
    result["ndcg10"] = {name: [s.mean, s.stderr] for name, s in rows}
    result["seconds"] = round(time.perf_counter() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    typer.echo(
        f"{sessions * rounds} simulated sessions ({clicks} clicks) on SciFact's {len(world.train_claims)} train "
        f"claims; NDCG@10 on {world.valid_task.n_queries} validation claims:"
    )
    for name, summary in rows:
        typer.echo(f"| {name} | {fmt(summary)} |")


if __name__ == "__main__":
    typer.run(main)
