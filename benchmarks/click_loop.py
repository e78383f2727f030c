"""The learning loop, simulated: a served model learns from its own users' clicks, round after round.

On SciFact, `ssi serve` (a subprocess, real HTTP) starts from a bundle that ranks exactly as its BM25 base
(training.feedback.start). Simulated users ask the training claims (the 80 % train share of the qrels' queries,
by `ssi train --valid-share 0.2`'s split; never a validation claim) with k = 10; a user examines position r
with probability (1/r)^η and clicks an examined relevant document (qrels) with probability --p-relevant, an
examined other one with --p-other, and reports each click with POST /clicks. After each round of S sessions,
`ssi learn`'s round runs on the log so far (query folds, `ssi train --clicks --debias`, the counterfactual
estimate, POST /admin/reload when promoted), and NDCG@10 of the served model on the validation claims is
measured in process (the same exact ranking as served). Beside each estimate, the same candidate − judge
difference is measured on the true labels of the train claims that judged it (what the estimate stands for).

Arms: --debias ips and naive, each with its own service and log; beside them, in the same process, BM25 on
stems (the evaluation harness's bm25s scorer at `ssi eval`'s two settings, and the start bundle itself) and
a model trained on the true labels of the same train claims (the README's labelled SciFact recipe).

    python -m benchmarks.click_loop                 # the default run (about 20 minutes on 2 cores)
    python -m benchmarks.click_loop --quick         # a smoke run (a test)
"""

from __future__ import annotations

import json
import platform
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import numpy as np
import typer

import ssi
from service.bench.server import ServedProcess
from ssi.corpus import read_beir_queries, read_corpus, read_qrels
from ssi.records import Query
from training.click_recipe import CLICK_RECIPE
from training.evaluate.baselines.bm25 import BM25Scorer
from training.evaluate.metrics import NDCG10, MetricSummary, quick_metrics, summarize
from training.evaluate.tasks import RetrievalTask, beir_task
from training.feedback.promote import DEFAULT_FOLDS, DEFAULT_HOLDOUT, DEFAULT_Z, Z_95, Ranker, fold_of, text_share
from training.feedback.round import RoundSettings, run_round
from training.feedback.start import write_bm25_start
from training.splits import split_by_query

ADMIN_KEY = "click-loop-admin"
VALID_SHARE = 0.2  # `ssi train --valid-share 0.2`, seed 0: the validation claims of docs/results/scifact.md
TARGET_GAIN = 0.05


@dataclass
class World:
    """The SciFact data split as `ssi train --valid-share 0.2` splits it."""

    corpus: Path
    queries_path: Path
    qrels_path: Path
    train_claims: list[Query]
    relevant: dict[str, frozenset[str]]  # train claim id → its relevant documents
    valid_task: RetrievalTask


def load_world(data: Path) -> World:
    corpus, queries_path, qrels_path = data / "corpus.jsonl.gz", data / "queries.jsonl.gz", data / "qrels/train.tsv"
    docs = read_corpus(corpus)
    queries = read_beir_queries(queries_path)
    pairs = read_qrels(qrels_path)
    train, valid = split_by_query(pairs, VALID_SHARE, 0)
    by_id = {q.id: q for q in queries}
    relevant: dict[str, set[str]] = {}
    for p in train:
        relevant.setdefault(p.query_id, set()).add(p.doc_id)
    valid_ids = {p.query_id for p in valid}
    task = beir_task(docs, [q for q in queries if q.id in valid_ids], valid, name="valid")
    return World(
        corpus, queries_path, qrels_path, [by_id[q] for q in sorted(relevant)],
        {q: frozenset(d) for q, d in relevant.items()}, task,
    )  # fmt: skip


def judging_tasks(world: World, folds: int) -> list[RetrievalTask]:
    """Per fold of `ssi learn`, the train claims it judges on (by the same hash), with their qrels: what the
    estimate would read if it had the true labels instead of clicks."""
    docs = read_corpus(world.corpus)
    pairs = [p for p in read_qrels(world.qrels_path) if p.query_id in world.relevant]
    share = {q.id: text_share(q.text) for q in world.train_claims}
    tasks = []
    for j in range(folds):
        judged = {q for q, s in share.items() if (fold_of(s, folds) == j if folds > 1 else s < DEFAULT_HOLDOUT)}
        claims = [q for q in world.train_claims if q.id in judged]
        tasks.append(beir_task(docs, claims, [p for p in pairs if p.query_id in judged], name=f"fold-{j + 1}"))
    return tasks


def judging_truth(candidates: list[Any], judges: list[Ranker], tasks: list[RetrievalTask]) -> MetricSummary:
    """Candidate − judge NDCG@10 per judging claim, pooled over the folds (mean ± SE over claims)."""
    diffs = []
    for candidate, judge, task in zip(candidates, judges, tasks, strict=True):
        texts = list(task.query_texts)
        ours = quick_metrics(candidate.scores(texts), task.relevant_matrix, task.excluded_matrix)[NDCG10]
        theirs = quick_metrics(judge.model.scores(texts), task.relevant_matrix, task.excluded_matrix)[NDCG10]
        diffs.append(np.asarray(ours) - np.asarray(theirs))
    return summarize(np.concatenate(diffs))


def ndcg(scores: np.ndarray, task: RetrievalTask) -> MetricSummary:
    return summarize(quick_metrics(scores, task.relevant_matrix, task.excluded_matrix)[NDCG10])


def model_ndcg(model: Any, task: RetrievalTask) -> MetricSummary:
    return ndcg(model.scores(list(task.query_texts)), task)


def paired_change(before: Any, after: Any, task: RetrievalTask) -> MetricSummary:
    """After − before NDCG@10 per claim (mean ± SE over claims): what a promotion changed, with the noise of
    162 claims beside it (two consecutive served models differ on a few claims only)."""
    texts = list(task.query_texts)
    old = quick_metrics(before.scores(texts), task.relevant_matrix, task.excluded_matrix)[NDCG10]
    new = quick_metrics(after.scores(texts), task.relevant_matrix, task.excluded_matrix)[NDCG10]
    return summarize(np.asarray(new) - np.asarray(old))


@dataclass
class Users:
    """Simulated users: a train claim, k results, examination (1/r)^η, clicks by relevance with noise."""

    world: World
    eta: float
    p_relevant: float
    p_other: float
    k: int
    rng: random.Random
    page2: float = 1.0  # examination below rank 10 is (1/r)^eta times this: users who go to the second page
    counts: dict[str, int] = field(default_factory=lambda: {"sessions": 0, "clicks": 0, "relevant_clicks": 0})

    def session(self, client: httpx.Client) -> None:
        claim = self.rng.choice(self.world.train_claims)
        answer = client.post("/search", json={"query": claim.text, "k": self.k})
        answer.raise_for_status()
        body = answer.json()
        impression = body.get("impression")
        if impression is None:
            raise RuntimeError("the server answered without an impression: is traffic recording on (SSI_EVENTS)?")
        self.counts["sessions"] += 1
        relevant = self.world.relevant[claim.id]
        for doc_id in self.clicked([hit["id"] for hit in body["hits"]], relevant):
            click = client.post("/clicks", json={"impression": impression, "id": doc_id})
            click.raise_for_status()
            self.counts["clicks"] += 1
            self.counts["relevant_clicks"] += int(doc_id in relevant)

    def clicked(self, shown: list[str], relevant: frozenset[str]) -> list[str]:
        """What this user clicks of a shown list: position r examined with (1/r)^η, then by relevance."""
        clicks = []
        for r, doc_id in enumerate(shown, start=1):
            if self.rng.random() >= r**-self.eta * (self.page2 if r > 10 else 1.0):
                continue  # not examined
            if self.rng.random() < (self.p_relevant if doc_id in relevant else self.p_other):
                clicks.append(doc_id)
        return clicks


def serve_arm(
    world: World,
    start: Path,
    root: Path,
    explore: float,
    seed: int,
    timeout: float = 600,
    cache_dir: Path | None = None,
) -> ServedProcess:
    """An arm's own `ssi serve` (started), recording plain-text traffic in `root`, serving a copy of `start` as
    `root/bundles/start`, reloadable from `root/bundles` with ADMIN_KEY; its own draws seeded with `seed`
    (SSI_RANDOM_SEED), so that a run can be repeated. `timeout`: for its first start (a hybrid start encodes every
    abstract first: about 7 minutes on 2 cores). `cache_dir`: SSI_CACHE_DIR shared with other arms (default: the
    arm's own), so that a hybrid start reads the abstracts' e(d) another arm's server kept (service.sentence_cache);
    snapshots are keyed by each arm's own store, so no arm reads another's index."""
    bundles = root / "bundles"
    shutil.rmtree(root, ignore_errors=True)
    bundles.mkdir(parents=True)
    shutil.copytree(start, bundles / "start")
    settings = {
        "SSI_DATA_DIR": str(root / "data"), "SSI_CACHE_DIR": str(cache_dir or root / "cache"),
        "SSI_ADMIN_KEY": ADMIN_KEY,
        "SSI_BUNDLE_ROOT": str(bundles), "SSI_WORKERS": "1", "SSI_EVENTS": "true", "SSI_EVENTS_TEXT": "plain",
        "SSI_EVENTS_EXPLORE": str(explore), "SSI_RANDOM_SEED": str(seed),
    }  # fmt: skip
    server = ServedProcess(bundles / "start", world.corpus, root, settings)
    server.start(timeout=timeout)
    return server


def fmt(s: MetricSummary) -> str:
    return f"{s.mean:.4f} ± {s.stderr:.4f}"


def run_arm(
    arm: str, world: World, start: Path, work: Path, opts: dict[str, Any], start_model: Any, start_ranker: Ranker
) -> dict[str, Any]:
    """One debiasing arm: its own service, log and bundles; the rounds."""
    root = work / arm
    bundles = root / "bundles"
    served_path = bundles / "start"
    server = serve_arm(world, start, root, opts["explore"], opts["seed"], timeout=3600 if opts["encoder"] else 600)
    users = Users(
        world, opts["eta"], opts["p_relevant"], opts["p_other"], opts["page_size"], random.Random(opts["seed"])
    )
    served_model = start_model
    # The judge: what candidates are compared with (the bundle the served one was refit from: it never saw the
    # held-out queries either); at the start, the start bundle itself.
    # With --folds K, one judge per fold: the last promoted round's candidate of that fold.
    judge_paths, judge_rankers = [served_path] * opts["folds"], [start_ranker] * opts["folds"]
    tasks = judging_tasks(world, opts["folds"])
    rounds: list[dict[str, Any]] = []
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for n in range(1, opts["rounds"] + 1):
                t0 = time.perf_counter()
                for _ in range(opts["sessions"]):
                    users.session(client)
                sessions_seconds = time.perf_counter() - t0
                store = next((root / "data" / "stores").glob("*/events.sqlite"))
                outcome = run_round(
                    RoundSettings(
                        log=store, served=served_path, judges=judge_paths, folds=opts["folds"],
                        corpus=world.corpus, bundles=bundles, name=f"round-{n}",
                        debias=arm, warm=opts["warm"], warm_lr_scale=opts["warm_lr_scale"], epochs=opts["epochs"],
                        lr=opts["lr"], seed=opts["seed"], threads=opts["threads"], z=opts["z"],
                        train_args=["--valid-share", str(opts["valid_share"])],  # the rest: CLICK_RECIPE
                        server=server.url, admin_key=ADMIN_KEY,
                    ),
                    judge_rankers=judge_rankers,
                )  # fmt: skip
                report = outcome.report
                row: dict[str, Any] = {
                    "round": n, "sessions": users.counts["sessions"], "clicks": users.counts["clicks"],
                    "relevant_clicks": users.counts["relevant_clicks"], "sessions_seconds": round(sessions_seconds, 1),
                    "round_seconds": report.get("seconds"), "train": report.get("train"),
                    "start": report.get("start"), "propensities": report.get("propensities"),
                    "error": report.get("error"),
                }  # fmt: skip
                before_model = served_model
                if outcome.candidates:
                    folds = [model_ndcg(c, world.valid_task) for c in outcome.candidates]
                    truth = judging_truth(outcome.candidates, judge_rankers, tasks)
                    est = report["estimate"]
                    row.update(
                        estimate={k: est[k] for k in ("mean", "stderr", "ci95", "lower", "queries", "clicks", "eta")},
                        candidate_ndcg=[
                            float(np.mean([f.mean for f in folds])),
                            float(np.mean([f.stderr for f in folds])),
                        ],
                        candidate_ndcg_folds=[f.mean for f in folds],
                        judging_truth=[truth.mean, truth.stderr],
                        promoted=outcome.promoted,
                    )
                    if outcome.promoted:
                        judge_paths = [Path(c) for c in report["candidates"]]
                        judge_rankers = [Ranker(c) for c in outcome.candidates]
                        served_path, served_model = Path(report["serving"]), outcome.serving
                else:
                    row["promoted"] = False
                after = model_ndcg(served_model, world.valid_task)
                row["served_ndcg"] = [after.mean, after.stderr]
                if row["promoted"]:
                    change = paired_change(before_model, served_model, world.valid_task)
                    row["promotion_change"] = [change.mean, change.stderr]
                    row["promotion_hurt"] = change.mean < 0
                    row["promotion_significantly_worse"] = change.mean + Z_95 * change.stderr < 0
                rounds.append(row)
                est_text = (
                    f"Δ {row['estimate']['mean']:+.4f} ± {row['estimate']['stderr']:.4f} (on their qrels "
                    f"{row['judging_truth'][0]:+.4f} ± {row['judging_truth'][1]:.4f})"
                    if "estimate" in row
                    else "—"
                )
                typer.echo(
                    f"  {arm:<5} round {n}: {row['sessions']:>5} sessions, {row['clicks']:>5} clicks; candidate "
                    f"{row.get('candidate_ndcg', ['nan'])[0] if 'candidate_ndcg' in row else '—'}; {est_text} → "
                    f"{'promoted' if row['promoted'] else 'kept'}; served NDCG@10 {fmt(after)} "
                    f"({report.get('seconds')} s)",
                    err=True,
                )
    finally:
        server.stop()
    return {"rounds": rounds, "users": users.counts}


def labelled_arm(world: World, work: Path, opts: dict[str, Any]) -> tuple[MetricSummary, float]:
    """The README's labelled SciFact recipe on the same train claims (docs/results/scifact.md)."""
    out = work / "labelled"
    args = [
        sys.executable, "-m", "training", "train", "--corpus", str(world.corpus), "--queries", str(world.queries_path),
        "--qrels", str(world.qrels_path), "--valid-share", str(VALID_SHARE), "--out", str(out), "--dims", "64",
        "--lr", "0.03", "--hard-fraction", "0", "--epochs", "12", "--eval-every", "1", "--threads",
        str(opts["threads"]), "--no-progress",
    ]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    return model_ndcg(ssi.load(out, corpus=world.corpus), world.valid_task), seconds


def main(
    data: Annotated[Path, typer.Option(help="The SciFact folder (BEIR format).")] = Path("../shared/data/scifact"),
    rounds: Annotated[int, typer.Option(help="Rounds of sessions, each followed by `ssi learn`'s round.")] = 6,
    sessions: Annotated[int, typer.Option(help="Sessions (one query, its clicks) per round and arm.")] = 5000,
    eta: Annotated[float, typer.Option(help="Users examine position r with probability (1/r)^eta.")] = 1.0,
    p_relevant: Annotated[float, typer.Option(help="Click probability of an examined relevant result.")] = 0.9,
    p_other: Annotated[float, typer.Option(help="Click probability of an examined non-relevant result.")] = 0.1,
    explore: Annotated[float, typer.Option(help="SSI_EVENTS_EXPLORE: share of randomized impressions.")] = 0.05,
    page_size: Annotated[int, typer.Option(help="Results a session is shown (k), all on one page.")] = 10,
    arms: Annotated[
        str, typer.Option(help="Debiasing arms, comma-separated (pbm, ips, naive, top).")
    ] = "pbm,naive,ips",
    epochs: Annotated[
        float, typer.Option(help="ssi train --epochs per round (the click recipe's, training/click_recipe.py).")
    ] = CLICK_RECIPE.epochs,
    lr: Annotated[
        float, typer.Option(help="ssi train --lr per round (the labelled SciFact recipe's, from scratch).")
    ] = CLICK_RECIPE.lr,
    warm: Annotated[bool, typer.Option("--warm/--cold", help="Warm-start each round from the served bundle.")] = False,
    warm_lr_scale: Annotated[float, typer.Option(help="ssi train --warm-lr-scale of a warm start.")] = 1.0,
    z: Annotated[float, typer.Option(help="ssi learn --z: promote when the estimate mean - z·SE >= 0.")] = DEFAULT_Z,
    folds: Annotated[
        int, typer.Option(min=1, help="ssi learn --folds: cross-fitted candidates, every train claim judges.")
    ] = DEFAULT_FOLDS,
    valid_share: Annotated[
        float,
        typer.Option(
            help="ssi train --valid-share of the click pages, for early stopping. 0 (default): none, the last step is "
            "kept and the held-out estimate alone decides; validation on clicks favours the ranker that logged them "
            "(its clicked documents are its top ones), so with it the trainer kept its start every round."
        ),
    ] = CLICK_RECIPE.valid_share,
    labelled: Annotated[bool, typer.Option(help="Also train on the true labels of the train claims.")] = True,
    encoder: Annotated[
        Path | None,
        typer.Option(
            help="A sentence-transformers folder: the loop starts from the day-one hybrid (BM25 + the encoder, "
            "λ = 1) and its rounds train hybrid candidates with the served bundle's encoder (docs/guides/hybrid.md)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Users' and trainer's seed.")] = 0,
    threads: Annotated[int, typer.Option(help="Trainer threads.")] = 2,
    quick: Annotated[
        bool, typer.Option(help="A smoke run: 2 rounds of 60 sessions, 3 epochs, no labelled arm.")
    ] = False,
    work: Annotated[Path, typer.Option(help="Scratch folder (servers' data, bundles).")] = Path(
        "bench-results/click_loop"
    ),
    out: Annotated[Path, typer.Option(help="JSON result file.")] = Path("bench-results/click_loop.json"),
) -> None:
    """Simulate the loop per arm, print NDCG@10 per round against BM25 and the labelled model, write JSON."""
    if quick:
        rounds, sessions, epochs, labelled = 2, 60, 3.0, False
    started = time.perf_counter()
    opts = {
        "rounds": rounds, "sessions": sessions, "eta": eta, "p_relevant": p_relevant, "p_other": p_other,
        "explore": explore, "page_size": page_size, "epochs": epochs, "lr": lr, "warm": warm,
        "warm_lr_scale": warm_lr_scale, "z": z, "folds": folds,
        "seed": seed, "threads": threads, "valid_share": valid_share, "encoder": str(encoder) if encoder else None,
    }  # fmt: skip
    world = load_world(data)
    work.mkdir(parents=True, exist_ok=True)
    start = work / "start"
    shutil.rmtree(start, ignore_errors=True)
    write_bm25_start(world.corpus, start, encoder=encoder)
    start_model = ssi.load(start, corpus=world.corpus)
    start_ndcg = model_ndcg(start_model, world.valid_task)
    docs = read_corpus(world.corpus)
    texts = list(world.valid_task.query_texts)
    bm25 = {  # `ssi eval`'s two BM25 settings, on the same stems as the bundles
        f"k1={k1}, b={b}": ndcg(BM25Scorer(docs, k1=k1, b=b, stemmer="english").score(texts), world.valid_task)
        for k1, b in ((0.9, 0.4), (1.5, 0.75))
    }
    # The bar is BM25 on stems + TARGET_GAIN, with or without the encoder (a hybrid start bundle is not BM25).
    best_bm25 = max([*([] if encoder else [start_ndcg]), *bm25.values()], key=lambda s: s.mean)
    target = best_bm25.mean + TARGET_GAIN
    typer.echo(
        f"SciFact: {len(docs)} abstracts; {len(world.train_claims)} train claims asked, "
        f"{world.valid_task.n_queries} validation claims measured; {rounds} rounds × {sessions} sessions per arm; "
        f"eta {eta}, p(click | relevant) {p_relevant}, p(click | other) {p_other}, explore {explore}",
        err=True,
    )
    result: dict[str, Any] = {
        "settings": {**opts, "arms": arms, "data": str(data), "quick": quick, "labelled": labelled},
        "corpus_documents": len(docs),
        "train_claims": len(world.train_claims),
        "valid_claims": world.valid_task.n_queries,
        "bm25_start_bundle": [start_ndcg.mean, start_ndcg.stderr],
        "bm25_stems": {k: [v.mean, v.stderr] for k, v in bm25.items()},
        "target": target,
        "machine": platform.machine(),
        "arms": {},
    }
    start_ranker = Ranker(start_model)
    for arm in [a.strip() for a in arms.split(",") if a.strip()]:
        result["arms"][arm] = run_arm(arm, world, start, work, opts, start_model, start_ranker)
    if labelled:
        label_ndcg, label_seconds = labelled_arm(world, work, opts)
        result["labelled"] = {"ndcg": [label_ndcg.mean, label_ndcg.stderr], "train_seconds": round(label_seconds, 1)}
    for res in result["arms"].values():
        passed = [r["sessions"] for r in res["rounds"] if r["served_ndcg"][0] >= target]
        res["sessions_to_target"] = passed[0] if passed else None
        res["promotions_that_hurt"] = sum(bool(r.get("promotion_hurt")) for r in res["rounds"])
        res["promotions_significantly_worse"] = sum(bool(r.get("promotion_significantly_worse")) for r in res["rounds"])
    result["seconds"] = round(time.perf_counter() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print_table(result, start_ndcg, bm25)


def print_table(result: dict[str, Any], start: MetricSummary, bm25: dict[str, MetricSummary]) -> None:
    s = result["settings"]
    lines = [
        f"click loop on SciFact: {result['corpus_documents']} abstracts, {result['train_claims']} train claims asked, "
        f"NDCG@10 on {result['valid_claims']} validation claims (mean ± SE); eta {s['eta']}, clicks "
        f"{s['p_relevant']}/{s['p_other']}, explore {s['explore']}, epochs {s['epochs']}, lr {s['lr']}, "
        f"{'warm' if s['warm'] else 'cold'} start, z {s['z']}, folds {s.get('folds', 1)}",
        f"BM25 start bundle (k1 1.5, b 0.75, stems): {fmt(start)}; "
        + "; ".join(f"BM25 on stems {k}: {fmt(v)}" for k, v in bm25.items())
        + f"; target (best + {TARGET_GAIN}): {result['target']:.4f}",
    ]
    if "labelled" in result:
        m, e = result["labelled"]["ndcg"]
        gain = m - result["target"] + TARGET_GAIN
        lines.append(f"labelled recipe on the same train claims: {m:.4f} ± {e:.4f} ({gain:+.4f} vs the best BM25)")
    arms = list(result["arms"])
    header = (
        "| round | sessions | "
        + " | ".join(f"{a}: served NDCG@10 | {a}: estimate Δ → decision (candidate NDCG@10)" for a in arms)
        + " |"
    )
    lines += ["", header, "|" + "---|" * (2 + 2 * len(arms))]
    n_rounds = max(len(result["arms"][a]["rounds"]) for a in arms)
    for i in range(n_rounds):
        cells = []
        sessions = ""
        for a in arms:
            row = result["arms"][a]["rounds"][i]
            sessions = str(row["sessions"])
            m, se = row["served_ndcg"]
            served = f"{m:.4f} ± {se:.4f} ({m / start.mean:.3f}× start)"
            if "estimate" in row:
                e, verdict = row["estimate"], "promoted" if row["promoted"] else "kept"
                decision = (
                    f"{e['mean']:+.4f} ± {e['stderr']:.4f} → {verdict} ({row['candidate_ndcg'][0]:.4f}; "
                    f"on the judging claims' qrels {row['judging_truth'][0]:+.4f})"
                )
                if "promotion_change" in row:
                    c, c_se = row["promotion_change"]
                    decision += f"; served changed {c:+.4f} ± {c_se:.4f}"
            else:
                decision = f"training failed: {row.get('error')}"
            cells += [served, decision]
        lines.append(f"| {i + 1} | {sessions} | " + " | ".join(cells) + " |")
    lines.append("")
    for a in arms:
        res = result["arms"][a]
        reached = res["sessions_to_target"]
        passed = f"reached BM25 + 0.05 after {reached} sessions" if reached else "did not reach BM25 + 0.05"
        lines.append(
            f"{a}: {passed}; "
            f"promotions that lowered validation NDCG@10: {res['promotions_that_hurt']} "
            f"(by more than 1.96 SE of the paired change: {res['promotions_significantly_worse']}); "
            f"clicks {res['users']['clicks']} ({res['users']['relevant_clicks']} on relevant documents)"
        )
    lines.append(f"total {result['seconds']} s")
    typer.echo("\n".join(lines))


if __name__ == "__main__":
    typer.run(main)
