"""The learning loop, simulated, with and without online confirmation: does interleaving get the served model past
BM25 on stems + 0.05 in fewer sessions, and does it refuse a worse candidate?

Per seed, two arms on SciFact, each with its own `ssi serve` (a subprocess, real HTTP) and log, both run by the
learner's own code (training.feedback.learner.learn_once: the round history, its judges, the click recipe):

- `offline`: `ssi learn --no-interleave`, a candidate served as soon as the offline estimate promotes it (z = 1);
- `interleave`: `ssi learn` at its defaults with a server: a candidate past the offline estimate (z = 0) is
  interleaved with the served model on --share of first pages, and served once the service's sequential test
  (--online-test: by default the guard, which promotes unless users prefer the served model) says so (checked
  every --check sessions, as `ssi learn --every` would); a round while it runs is skipped.

The simulated users are benchmarks.click_loop's (train claims, examination (1/r)^η, clicks by relevance with
noise); on an interleaved page they click the same way. NDCG@10 of the served model on the validation claims is
measured after every change of the served model. Then, with the loop's log, a deliberately worse candidate
(trained on the same clicks with the queries shuffled across impressions) is interleaved with the served model,
and the sessions until the test decides are counted.

    python -m benchmarks.click_loop_online --seeds 0,1,2,3 --out runs/click-loop-online.json
    python -m benchmarks.click_loop_online --arms interleave --online-test better   # one arm, the other test
    python -m benchmarks.click_loop_online --quick      # a smoke run
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

import ssi
from benchmarks.click_loop import (
    ADMIN_KEY,
    TARGET_GAIN,
    Users,
    World,
    fmt,
    load_world,
    model_ndcg,
    ndcg,
    paired_change,
    serve_arm,
)
from service.bench.server import ServedProcess
from ssi.corpus import read_corpus
from training.evaluate.baselines.bm25 import BM25Scorer
from training.feedback.history import history_path
from training.feedback.learner import confirm, learn_once
from training.feedback.online import ONLINE_Z, Admin, OnlineSettings
from training.feedback.promote import DEFAULT_Z, Z_95, read_log, write_log
from training.feedback.round import RoundSettings, train_command
from training.feedback.start import write_bm25_start


def _store(root: Path) -> Path:
    return next((root / "data" / "stores").glob("*/events.sqlite"))


def run_arm(name: str, world: World, start: Path, work: Path, opts: dict[str, Any], start_model: Any) -> dict[str, Any]:
    """One arm: its own service, log, bundles and history; rounds every --sessions sessions."""
    interleave = name == "interleave"
    root = work / name
    bundles = root / "bundles"
    served_path = bundles / "start"
    hybrid = opts["encoder"] is not None  # the abstracts' e(d), encoded by the first arm's server, kept for the rest
    server = serve_arm(
        world, start, root, opts["explore"], opts["seed"], timeout=3600 if hybrid else 600,
        cache_dir=opts["cache"] if hybrid else None,
    )  # fmt: skip
    users = Users(world, opts["eta"], opts["p_relevant"], opts["p_other"], 10, random.Random(opts["seed"]))
    served_model = start_model
    start_ndcg = model_ndcg(start_model, world.valid_task)
    changes: list[dict[str, Any]] = [{"sessions": 0, "served_ndcg": [start_ndcg.mean, start_ndcg.stderr]}]
    rounds: list[dict[str, Any]] = []
    settings: RoundSettings | None = None
    online = OnlineSettings(share=opts["share"], mode=opts["online_test"])

    def served_now(serving: str, how: str) -> None:
        nonlocal served_model
        before, served_model = served_model, ssi.load(Path(serving), corpus=world.corpus)
        after, change = (
            model_ndcg(served_model, world.valid_task),
            paired_change(before, served_model, world.valid_task),
        )
        changes.append({
            "sessions": users.counts["sessions"], "how": how, "served": Path(serving).name,
            "served_ndcg": [after.mean, after.stderr], "change": [change.mean, change.stderr],
            "significantly_worse": change.mean + Z_95 * change.stderr < 0,
            "worse_beyond_one_se": change.mean + change.stderr < 0,
        })  # fmt: skip
        typer.echo(
            f"  {name} seed {opts['seed']}: {users.counts['sessions']} sessions, served {Path(serving).name} "
            f"({how}): NDCG@10 {fmt(after)}, change {fmt(change)}",
            err=True,
        )

    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for n in range(1, opts["rounds"] + 1):
                for _ in range(opts["sessions"] // opts["check"]):
                    for _ in range(opts["check"]):
                        users.session(client)
                    if settings is None:
                        settings = RoundSettings(
                            log=_store(root), served=served_path, corpus=world.corpus, bundles=bundles,
                            debias="pbm", seed=opts["seed"], threads=opts["threads"], server=server.url,
                            admin_key=ADMIN_KEY, z=ONLINE_Z if interleave else DEFAULT_Z,
                            online=online if interleave else None,
                        )  # fmt: skip
                    if interleave:
                        concluded, _ = confirm(settings, history_path(bundles))
                        if concluded is not None and concluded.decision == "promoted":
                            served_now(str(concluded.serving), "interleaving won")
                        elif concluded is not None:
                            typer.echo(f"  {name}: dropped {concluded.reason}", err=True)
                assert settings is not None
                t0 = time.perf_counter()
                learned = learn_once(replace(settings, name=f"round-{n}"))
                record = learned.record
                rounds.append({
                    "round": n, "sessions": users.counts["sessions"], "decision": record.decision,
                    "estimate": record.estimate and {k: record.estimate[k] for k in ("mean", "stderr", "queries")},
                    "reason": record.reason, "seconds": round(time.perf_counter() - t0, 1),
                })  # fmt: skip
                if record.decision == "promoted" and record.serving is not None:
                    served_now(record.serving, "offline estimate")
                typer.echo(f"  {name} seed {opts['seed']} round {n}: {rounds[-1]}", err=True)
            worse = worse_candidate(world, root, bundles, server, users, opts) if opts["worse"] else None
    finally:
        server.stop()
    return {"rounds": rounds, "changes": changes, "users": users.counts, "worse_candidate": worse}


def worse_candidate(
    world: World, root: Path, bundles: Path, server: ServedProcess, users: Users, opts: dict[str, Any]
) -> dict[str, Any]:
    """A model trained on the loop's clicks with the queries shuffled across impressions, interleaved with the
    served model: the sessions until the test decides, and the decision."""
    admin = Admin(server.url, ADMIN_KEY, None)
    if admin.status().get("running"):
        admin.end()
    results = read_log(_store(root))
    texts = sorted({r.impression: r.text for r in results}.items())
    shuffled = [t for _, t in texts]
    random.Random(opts["seed"]).shuffle(shuffled)
    swap = {imp: text for (imp, _), text in zip(texts, shuffled, strict=True)}
    log = root / "shuffled.jsonl"
    write_log((replace(r, text=swap[r.impression]) for r in results), log)
    out = bundles / "shuffled"
    base = RoundSettings(
        log=log, served=bundles / "start", corpus=world.corpus, seed=opts["seed"], threads=opts["threads"]
    )
    args, _ = train_command(base, log, out)
    subprocess.run(args, check=True, capture_output=True, text=True)
    worse_ndcg = model_ndcg(ssi.load(out, corpus=world.corpus), world.valid_task)
    admin.start(out, OnlineSettings(share=opts["share"], mode=opts["online_test"]))
    before = users.counts["sessions"]
    status: dict[str, Any] = {}
    with httpx.Client(base_url=server.url, timeout=60) as client:
        while users.counts["sessions"] - before < opts["worse_budget"]:
            for _ in range(opts["check"]):
                users.session(client)
            status = admin.status()
            if status.get("decision") not in (None, "running"):
                break
    admin.end()
    found = {
        "sessions": users.counts["sessions"] - before, "decision": status.get("decision"),
        "tally": status.get("tally"), "candidate_ndcg": [worse_ndcg.mean, worse_ndcg.stderr],
    }  # fmt: skip
    typer.echo(f"  worse candidate: {found}", err=True)
    return found


def sessions_to(changes: list[dict[str, Any]], target: float) -> int | None:
    return next((c["sessions"] for c in changes if c["served_ndcg"][0] >= target), None)


def main(
    data: Annotated[Path, typer.Option(help="The SciFact folder (BEIR format).")] = Path("../shared/data/scifact"),
    seeds: Annotated[str, typer.Option(help="Users' and trainer's seeds, comma-separated.")] = "0,1,2,3",
    rounds: Annotated[int, typer.Option(help="Rounds of sessions, each followed by `ssi learn`.")] = 6,
    sessions: Annotated[int, typer.Option(help="Sessions per round.")] = 5000,
    check: Annotated[int, typer.Option(help="Sessions between two looks at a running comparison.")] = 100,
    share: Annotated[float, typer.Option(help="ssi learn --share: first pages interleaved.")] = 0.5,
    eta: Annotated[float, typer.Option(help="Users examine position r with probability (1/r)^eta.")] = 1.0,
    p_relevant: Annotated[float, typer.Option(help="Click probability of an examined relevant result.")] = 0.9,
    p_other: Annotated[float, typer.Option(help="Click probability of an examined non-relevant result.")] = 0.1,
    explore: Annotated[float, typer.Option(help="SSI_EVENTS_EXPLORE.")] = 0.05,
    worse: Annotated[bool, typer.Option(help="Interleave a model trained on shuffled clicks at the end.")] = True,
    worse_budget: Annotated[int, typer.Option(help="Sessions the worse candidate's comparison may take.")] = 5000,
    threads: Annotated[int, typer.Option(help="Trainer threads.")] = 2,
    online_test: Annotated[str, typer.Option(help="ssi learn --online-test: guard or better.")] = "guard",
    arms: Annotated[str, typer.Option(help="Which arms to run, comma-separated: offline, interleave.")] = (
        "offline,interleave"
    ),
    encoder: Annotated[
        Path | None,
        typer.Option(
            help="A sentence-transformers folder: both arms start from the day-one hybrid (BM25 + the encoder at "
            "λ = 1), and their rounds train hybrid candidates (docs/guides/hybrid.md)."
        ),
    ] = None,
    quick: Annotated[bool, typer.Option(help="A smoke run: one seed, 2 rounds of 300 sessions.")] = False,
    work: Annotated[Path, typer.Option(help="Scratch folder.")] = Path("bench-results/click_loop_online"),
    out: Annotated[Path, typer.Option(help="JSON result file.")] = Path("bench-results/click_loop_online.json"),
) -> None:
    """Both arms per seed; print sessions to BM25 + 0.05, each promotion's paired change, the worse candidate."""
    seed_list = [int(s) for s in seeds.split(",")]
    arm_names = [a.strip() for a in arms.split(",") if a.strip()]
    if not arm_names or set(arm_names) - {"offline", "interleave"}:
        raise typer.BadParameter(f"--arms takes offline and interleave, got {arms!r}")
    if quick:
        seed_list, rounds, sessions, worse_budget = seed_list[:1], 2, 300, 600
    started = time.perf_counter()
    world = load_world(data)
    work.mkdir(parents=True, exist_ok=True)
    start = work / "start"
    shutil.rmtree(start, ignore_errors=True)
    write_bm25_start(world.corpus, start, encoder=encoder)
    start_model = ssi.load(start, corpus=world.corpus)
    docs = read_corpus(world.corpus)
    texts = list(world.valid_task.query_texts)
    bm25 = [
        ndcg(BM25Scorer(docs, k1=k1, b=b, stemmer="english").score(texts), world.valid_task)
        for k1, b in ((0.9, 0.4), (1.5, 0.75))
    ]
    # The bar is BM25 on stems + TARGET_GAIN, with or without the encoder (a hybrid start bundle is not BM25).
    best = max([*([] if encoder else [model_ndcg(start_model, world.valid_task)]), *bm25], key=lambda s: s.mean)
    target = best.mean + TARGET_GAIN
    result: dict[str, Any] = {
        "settings": {"seeds": seed_list, "rounds": rounds, "sessions": sessions, "check": check, "share": share,
                     "eta": eta, "p_relevant": p_relevant, "p_other": p_other, "explore": explore,
                     "online_test": online_test, "arms": arm_names, "encoder": str(encoder) if encoder else None},
        "best_bm25": [best.mean, best.stderr], "target": target, "seeds": {},
    }  # fmt: skip
    for seed in seed_list:
        opts = {
            "seed": seed, "rounds": rounds, "sessions": sessions, "check": check, "share": share, "eta": eta,
            "p_relevant": p_relevant, "p_other": p_other, "explore": explore, "threads": threads,
            "worse": worse, "worse_budget": worse_budget, "online_test": online_test, "encoder": encoder,
            "cache": work / "cache",
        }  # fmt: skip
        ran = {}
        for name in arm_names:
            ran[name] = run_arm(
                name,
                world,
                start,
                work / f"seed-{seed}",
                {**opts, "worse": worse and name == "interleave"},
                start_model,
            )
            ran[name]["sessions_to_target"] = sessions_to(ran[name]["changes"], target)
        result["seeds"][str(seed)] = ran
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
    result["seconds"] = round(time.perf_counter() - started, 1)
    out.write_text(json.dumps(result, indent=2))
    print_table(result)


def print_table(result: dict[str, Any]) -> None:
    lines = [
        f"target: best BM25 on stems {result['best_bm25'][0]:.4f} + {TARGET_GAIN} = {result['target']:.4f} "
        f"(NDCG@10, validation claims)",
        "",
        "| seed | arm | sessions to target | promotions: sessions → served NDCG@10 (paired change ± SE) | worse |",
        "|---|---|---|---|---|",
    ]
    for seed, arms in result["seeds"].items():
        for name, arm in arms.items():
            promotions = "; ".join(
                f"{c['sessions']} → {c['served_ndcg'][0]:.4f} ({c['change'][0]:+.4f} ± {c['change'][1]:.4f})"
                for c in arm["changes"][1:]
            )
            worse = arm.get("worse_candidate")
            worse_text = "" if not worse else f"{worse['decision']} after {worse['sessions']} sessions"
            lines.append(f"| {seed} | {name} | {arm['sessions_to_target']} | {promotions or '—'} | {worse_text} |")
    reached = {
        name: [arms[name]["sessions_to_target"] for arms in result["seeds"].values() if name in arms]
        for name in ("offline", "interleave")
    }
    for name, values in reached.items():
        done = [v for v in values if v is not None]
        median = statistics.median(done) if done else None
        lines.append(f"{name}: reached the target in {len(done)} of {len(values)} seeds; median sessions {median}")
    typer.echo("\n".join(lines))


if __name__ == "__main__":
    typer.run(main)
