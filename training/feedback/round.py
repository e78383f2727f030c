"""One `ssi learn` round: split the service's log, train a candidate, estimate it, promote it or not.

The log is split by query (a fixed share of the queries held out whole, training.feedback.promote.split_by_query)
or by time. The rest trains the candidate (`ssi train --clicks ... --debias`, from scratch or warm-started from
the served bundle); the held-out part, never trained on, decides whether the candidate is at least as good as
the *judge*: the served bundle, or, when that was refit, the bundle it was refit from (which never saw the
held-out queries either, so the two are compared on equal terms). A promoted candidate is refit (`refit`, the
default with the query split): the same training on the whole log, so that the held-out queries are learned
too; the refit is what is served, the candidate is the next round's judge. With a server given, the served
bundle is swapped in with POST /admin/reload; bundles are written beside the served one, under the folder the
server allows reloads from (SSI_BUNDLE_ROOT, or by default the served bundle's parent).

With `folds` K >= 2 (cross-fitting) the queries are cut into K folds by the same hash; K candidates are trained,
each on the other K - 1 folds, each judged on its own fold against that fold's judge (the last promoted round's
candidate of the same fold, which never saw those queries either), and the per-query differences of all folds
pool into one estimate over every query (training.feedback.promote.estimate_folds). A promotion serves the refit
on the whole log; the K candidates judge the next round.
"""

from __future__ import annotations

import glob
import json
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import ssi
from ssi.bundle import load_bundle, read_manifest
from ssi.traffic import ShownResult
from training.click_recipe import CLICK_RECIPE
from training.debias import DEFAULT_CLIP
from training.feedback.online import Admin, OnlineSettings
from training.feedback.promote import (
    DEFAULT_FOLDS,
    DEFAULT_HOLDOUT,
    DEFAULT_TOLERANCE,
    DEFAULT_Z,
    Fold,
    PromotionEstimate,
    Ranker,
    Skipped,
    estimate_folds,
    fixed_propensities,
    held_out_impressions,
    propensities_of,
    read_log,
    split_by_query,
    split_by_time,
    split_into_folds,
    write_log,
)


@dataclass
class RoundSettings:
    """What one round needs; the `ssi learn` flags map onto these."""

    log: Path  # the service's events.sqlite, or a log exported from it
    served: Path  # the bundle the service serves now
    corpus: Path
    bundles: Path | None = None  # where the candidate goes (default: beside the served bundle)
    name: str | None = None  # the candidate's folder name (default: learn-<UTC time>)
    debias: str = "pbm"
    holdout: float | None = None  # the held-out share with one fold (None: DEFAULT_HOLDOUT)
    split: str = "query"  # query: a share of the queries held out whole; time: the newest impressions
    folds: int | None = None  # >= 2: cross-fitted, one candidate per fold, every query judges (`fold_count`)
    # What the candidates are compared with: one bundle for every fold, or one per fold (the last promoted round's
    # candidates); default: the served bundle.
    judges: list[Path] | None = None
    refit: bool = True  # a promoted candidate is trained again on the whole log, and that is served
    z: float = DEFAULT_Z
    labels: str = "pbm"  # what a judging click is worth, whatever --debias trains with: pbm (click model) or ips
    tolerance: float = DEFAULT_TOLERANCE
    eta: float | None = None  # None: estimated from the randomized impressions
    clip: float = DEFAULT_CLIP
    cutoff: int | None = None
    kind: str = "search"
    queries: Path | None = None  # labelled pairs mixed in (BEIR queries + qrels)
    qrels: Path | None = None
    warm: bool = False
    dims: int | None = None  # cold start only (a warm start keeps the served N)
    # None: the click recipe's (training.click_recipe), what the simulated loop measured; max_minutes alone is a
    # time budget instead of its epochs.
    epochs: float | None = None
    max_minutes: float | None = None
    lr: float | None = None
    warm_lr_scale: float | None = None
    seed: int = 0
    threads: int = 2
    train_args: list[str] = field(default_factory=list)
    server: str | None = None
    admin_key: str | None = None
    collection: str | None = None
    # With a server: an offline promotion is first interleaved with the served model and served only once the
    # service's sequential test says it wins (training.feedback.online); None: reloaded at once.
    online: OnlineSettings | None = None


def fold_count(settings: RoundSettings) -> int:
    """The folds a round cross-fits: as given; else DEFAULT_FOLDS with the query split and no held-out share
    given, 1 otherwise (a time split, or a share asked for)."""
    if settings.folds is None:
        return DEFAULT_FOLDS if settings.split == "query" and settings.holdout is None else 1
    if settings.folds > 1 and settings.split != "query":
        raise ValueError("--folds splits the queries: it goes with --split query (or give --folds 1)")
    if settings.folds > 1 and settings.holdout is not None:
        raise ValueError("--holdout is the held-out share of one fold: it goes with --folds 1")
    return settings.folds


def fold_judges(settings: RoundSettings, folds: int) -> list[Path]:
    """Each fold's judge: `settings.judges` one per fold, or one for all; the served bundle by default."""
    judges = list(settings.judges or [settings.served])
    judges = judges * folds if len(judges) == 1 else judges
    if len(judges) != folds:
        raise ValueError(f"{len(judges)} judges given for {folds} folds: give one per fold, or one for all")
    return judges


def bundles_folder(settings: RoundSettings) -> Path:
    """The folder of the round's bundles (and of the learner's history and lock): as given, else the served
    bundle's, where the server may reload from."""
    return settings.bundles or settings.served.resolve().parent


def candidate_folder(settings: RoundSettings) -> Path:
    """Where the candidate bundle is written: a new folder (the server reloads only from a new one)."""
    root = bundles_folder(settings)
    name = settings.name or time.strftime("learn-%Y%m%dT%H%M%S", time.gmtime())
    out, n = root / name, 1
    while out.exists() or any(root.glob(f"{glob.escape(out.name)}-*")):  # its folds and refit are taken too
        n += 1
        out = root / f"{name}-{n}"
    return out


def warm_startable(bundle_path: Path) -> tuple[bool, int | None, str]:
    """(can the trainer warm-start from it, its N, why): a lowrank bundle whose U and V are not both zero.

    A bundle with U = V = 0 (a trainer's step 0 exported as is) has no gradient to start from.
    """
    bundle = load_bundle(bundle_path)
    form = bundle.form
    if form.name != "lowrank":
        return False, None, f"the served bundle is '{form.name}': the trainer warm-starts lowrank bundles only"
    n_dims = int(form.n_dims)
    if not np.any(form.values["U"]) and not np.any(form.values["V"]):
        return False, n_dims, "the served bundle's U and V are all zero: no gradient to warm-start from"
    return True, n_dims, "warm start from the served bundle"


def train_command(settings: RoundSettings, clicks: Path, out: Path) -> tuple[list[str], str]:
    """The `ssi train` command line of the candidate, and how it starts (warm or cold, and why).

    The training is the click recipe's (training.click_recipe: the simulated loop's epochs, rate, uniform
    negatives, no early stopping on clicks; one model instead of its folded three for a hybrid served bundle, whose
    encoder the candidate keeps and whose λ it learns again) unless given: --epochs, --max-minutes and --lr of the
    round, then `train_args`, which come last and so win over anything before them.
    """
    args = [
        sys.executable, "-m", "training", "train", "--corpus", str(settings.corpus), "--clicks", str(clicks),
        "--debias", settings.debias, "--out", str(out), "--seed", str(settings.seed),
        "--threads", str(settings.threads), "--no-progress",
    ]  # fmt: skip
    warm, n_dims, why = warm_startable(settings.served)
    if settings.warm and warm:
        args += ["--init-from", str(settings.served), "--dims", str(n_dims)]
        if settings.warm_lr_scale is not None:
            args += ["--warm-lr-scale", str(settings.warm_lr_scale)]
        start = why
    else:
        start = "cold start" + ("" if not settings.warm else f" ({why})")
        dims = settings.dims or n_dims
        if dims is not None:
            args += ["--dims", str(dims)]
    if settings.queries is not None and settings.qrels is not None:
        args += ["--queries", str(settings.queries), "--qrels", str(settings.qrels)]
    if read_manifest(settings.served).sentence is not None:  # hybrid served: its candidates keep its encoder
        args += ["--encoder", str(settings.served)]
    if settings.debias == "ips":
        args += ["--propensity-clip", str(settings.clip)]
    epochs = settings.epochs if settings.epochs is not None or settings.max_minutes else CLICK_RECIPE.epochs
    training = (
        ("--epochs", epochs), ("--max-minutes", settings.max_minutes), ("--lr", settings.lr or CLICK_RECIPE.lr),
        ("--hard-fraction", CLICK_RECIPE.hard_fraction), ("--valid-share", CLICK_RECIPE.valid_share),
    )  # fmt: skip
    for flag, value in training:
        if value is not None:
            args += [flag, f"{value:g}"]
    return args + list(settings.train_args), start


def _summary(stdout: str) -> dict[str, Any]:
    """The JSON summary `ssi train` prints last."""
    start = stdout.rfind("\n{")
    text = stdout[start + 1 :] if start >= 0 else stdout[stdout.find("{") :]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {"stdout_tail": stdout[-2000:]}


@dataclass
class RoundOutcome:
    """A round's JSON-ready report, and the candidates as loaded for the estimate (empty if training failed)."""

    report: dict[str, Any]
    candidates: list[Any] = field(default_factory=list)  # one per fold
    serving: Any | None = None  # what is served after the round when promoted: the refit, or the candidate

    @property
    def promoted(self) -> bool:
        return bool(self.report.get("promoted"))

    @property
    def candidate(self) -> Any | None:
        """The first fold's candidate (the only one without --folds)."""
        return self.candidates[0] if self.candidates else None


def _train(
    settings: RoundSettings, lines: Sequence[ShownResult], out: Path
) -> tuple[subprocess.CompletedProcess[str], list[str], str, float]:
    """`ssi train` on these log lines into `out`: the finished process, its command, how it started, seconds."""
    with tempfile.TemporaryDirectory(prefix="ssi-learn-") as work:
        clicks = Path(work) / "clicks.jsonl"
        write_log(lines, clicks)
        args, start = train_command(settings, clicks, out)
        t0 = time.perf_counter()
        done = subprocess.run(args, capture_output=True, text=True, check=False)
    return done, args, start, round(time.perf_counter() - t0, 1)


def _failed(done: subprocess.CompletedProcess[str], what: str) -> str:
    return f"{what} failed ({done.returncode}): {done.stderr.strip()[-2000:]}"


def run_round(
    settings: RoundSettings,
    judge_rankers: Sequence[Ranker] | None = None,
    results: Sequence[ShownResult] | None = None,
) -> RoundOutcome:
    """One round (module docstring). `judge_rankers`: each fold's judge already loaded (`settings.judges`);
    `results`: the log already read (`read_log(settings.log)`)."""
    started = time.perf_counter()
    results = read_log(settings.log) if results is None else results
    folds = fold_count(settings)
    holdout = settings.holdout if settings.holdout is not None else DEFAULT_HOLDOUT
    if folds > 1:
        splits = split_into_folds(results, folds)
    else:
        splits = [(split_by_query if settings.split == "query" else split_by_time)(results, holdout)]
    out = candidate_folder(settings)
    outs = [out] if folds == 1 else [out.with_name(f"{out.name}-fold{j + 1}") for j in range(folds)]
    judges = fold_judges(settings, folds)
    report: dict[str, Any] = {
        "log": str(settings.log),
        "served": str(settings.served),
        "candidate": str(out) if folds == 1 else None,
        "candidates": [str(o) for o in outs],
        "debias": settings.debias,
        "holdout": holdout if folds == 1 else None,
        "folds": folds,
        "impressions": {"train": splits[0].impressions[0], "held_out": sum(s.impressions[1] for s in splits)},
        "cutoff_time": min(s.cutoff for s in splits),
        "train_clicks": sum(r.clicked for r in splits[0].train),
        "train_seconds": 0.0,
    }
    trained = []
    for split, where in zip(splits, outs, strict=True):
        done, args, start, seconds = _train(settings, split.train, where)
        report["start"], report["train_command"] = start, shlex.join(args)
        report["train_seconds"] = round(report["train_seconds"] + seconds, 1)
        if done.returncode != 0:
            report["error"] = _failed(done, "ssi train")
            report["promoted"] = False
            return RoundOutcome(report)
        trained.append(_summary(done.stdout))
        report["train_messages"] = done.stderr.strip()[-2000:]
    report["train"] = {k: trained[0].get(k) for k in ("content_hash", "valid", "best_step", "steps", "seconds")}
    report["judges"] = [str(j) for j in judges]
    report["judge"] = report["judges"][0]
    if judge_rankers is None:
        loaded: dict[Path, Ranker] = {}
        for j in judges:
            if j not in loaded:
                loaded[j] = Ranker(ssi.load(j, corpus=settings.corpus))
        judge_rankers = [loaded[j] for j in judges]
    candidates = [ssi.load(o, corpus=settings.corpus) for o in outs]
    propensities = fixed_propensities(settings.eta) if settings.eta is not None else propensities_of(results)
    report["propensities"] = propensities.describe()
    parts, no_text, other, unknown = [], 0, 0, 0
    for split, judge, candidate in zip(splits, judge_rankers, candidates, strict=True):
        impressions, skipped = held_out_impressions(split.held_out, settings.kind, judge)
        no_text, other = no_text + skipped.no_text, other + skipped.other_kind
        unknown += skipped.unknown_filter
        parts.append(Fold(judge.model, candidate, impressions, judge))
    result: PromotionEstimate = estimate_folds(
        parts, propensities, clip=settings.clip, z=settings.z, tolerance=settings.tolerance, cutoff=settings.cutoff,
        skipped=Skipped(no_text=no_text, other_kind=other, unknown_filter=unknown), labels=settings.labels,
    )  # fmt: skip
    report["estimate"] = result.to_dict()
    report["estimate_text"] = result.describe()
    report["promoted"] = result.promote
    serving, serving_path = candidates[0], out
    if result.promote and settings.split == "query" and (settings.refit or folds > 1):
        serving_path = out.with_name(out.name + "-refit")
        done, _, _, _ = _train(settings, results, serving_path)
        if done.returncode != 0:
            report["error"] = _failed(done, "the refit")
            report["promoted"] = False
            return RoundOutcome(report, candidates)
        serving = ssi.load(serving_path, corpus=settings.corpus)
    if result.promote:
        report["serving"] = str(serving_path)
    if result.promote and settings.server is not None:
        admin = Admin(settings.server, settings.admin_key, settings.collection)
        try:
            if settings.online is not None:  # confirmed online first (training.feedback.online)
                report["interleaving"] = admin.start(serving_path, settings.online)
                report["promoted"] = False
            else:
                report["reload"] = admin.reload(serving_path)
        except (RuntimeError, httpx.HTTPError) as exc:  # trained and estimated: the report keeps all of that
            what = "starting the comparison" if settings.online is not None else "the reload"
            report["error"] = f"{what} failed: {exc}"
            report["promoted"] = False
            return RoundOutcome(report, candidates)
        if settings.online is not None:
            report["seconds"] = round(time.perf_counter() - started, 1)
            return RoundOutcome(report, candidates)
    report["seconds"] = round(time.perf_counter() - started, 1)
    return RoundOutcome(report, candidates, serving if result.promote else None)
