"""Position bias in click logs: how likely each position is to be looked at, and what a click is worth.

A click says "relevant" only where the user looked, and users look at the top more than at the bottom, so
raw click counts mostly measure where a document was shown. Four ways to turn clicks into weighted pairs
(`ssi train --debias`):

- `naive`: every click is evidence; a (query, doc) pair weighs its number of clicks;
- `top`: only clicks at one position (`--clicked-position`, 1 by default) count, once per pair: the SSI
  paper's guard, which throws away every lower click;
- `ips`: inverse propensity scoring (Joachims, Swaminathan & Schnabel 2017, "Unbiased Learning-to-Rank
  with Biased Feedback", WSDM): a click at position r counts 1/p(r), where p(r) is the probability that
  position r is examined, so in expectation a relevant document collects the same weight wherever it was
  shown. A pair weighs the sum over its clicks.

- `pbm` (the default): the position-based click model (the examination hypothesis of Richardson, Dominowska
  & Ragno 2007 and Craswell, Zoeter, Taylor & Ramsey 2008; Chuklin, Markov & de Rijke 2015, "Click Models
  for Web Search", ch. 3): P(click on d at r) = p(r) · γ(q, d), with γ the probability that an examined
  result is clicked. With p known, γ's estimate is clicks / expected examinations, C / Σ p(r) over every time
  d was shown for q; a Beta prior of mean μ (the log's own clicks per examination, all pairs together) and
  weight PRIOR_EXAMINATIONS keeps a pair seen once or twice near μ. A pair weighs max(0, γ̂ − floor)
  (`relevance_floor`, default 0.5): what users click when they look at it, beyond what they click anyway.
  Why not plain IPS: users also click results that are not relevant (a tenth of the time in the simulated
  loop), and a query shows many of those: IPS weighs each such click 1/p(r) too, so the non-relevant results
  of a query together weigh about as much as its relevant one however large the log, and the model learns
  "like what the old ranker showed" (measured: docs/results/learning-loop.md). γ̂ against a floor sets them apart,
  and the more often a pair is shown the surer the estimate.

The propensities come from the log's randomized impressions (Wang, Bendersky, Metzler & Najork 2016,
"Learning to Rank with Selection Bias in Personal Search", SIGIR): their top results were shown in
uniformly random order, so relevance is independent of position there and the click-through rate at
position r is proportional to p(r). The rates of positions 1–10 are smoothed by a power law
p(r) = r^(−η) (p(1) = 1), fitted by weighted least squares on log CTR: log CTR(r) = a − η·log r, each
position weighted by clicks(r) / (1 − CTR(r)), the inverse of the delta-method variance of its log rate,
so sparse deep positions pull the fit less. With fewer than MIN_RANDOMIZED_CLICKS randomized clicks the
estimate is noise: η = 1 (the usual 1/r examination curve) is used instead, and the output says so.

Each 1/p(r) is clipped at `clip` (default 20): IPS is unbiased but its variance grows with the largest
weight, and a handful of clicks deep in a list (1/p = 50 at rank 50 with η = 1) would otherwise outweigh
thousands of top clicks and make every step's gradient a lottery; clipping trades a little bias on deep
clicks for bounded variance (the clipped estimator of Strehl et al. 2010, as Joachims et al. 2017 do).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from ssi.records import Pair

DebiasMode = Literal["pbm", "ips", "naive", "top"]
DEBIAS_MODES: tuple[str, ...] = ("pbm", "ips", "naive", "top")
WEIGHTED_MODES: tuple[str, ...] = ("pbm", "ips", "naive")  # the modes that weigh pairs (top filters clicks)
DEFAULT_RELEVANCE_FLOOR = 0.5
PRIOR_EXAMINATIONS = 2.0  # the Beta prior's weight, in examinations
MIN_RANDOMIZED_CLICKS = 50
RANDOMIZED_DEPTH = 10  # the service shuffles at most its first 10 results
FALLBACK_ETA = 1.0
DEFAULT_CLIP = 20.0


class ShownClick(Protocol):
    """What the debiasing reads of a log line (training.clicks.Impression has it)."""

    @property
    def page_id(self) -> str: ...
    @property
    def ad_id(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def clicked(self) -> bool: ...
    @property
    def randomized(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Propensities:
    """p(r) = r^(−η), and what it was estimated from."""

    eta: float
    estimated: bool  # False: too few randomized clicks, η is FALLBACK_ETA
    randomized_results: int  # randomized lines (shown results) at positions 1..RANDOMIZED_DEPTH
    randomized_clicks: int
    ctr: dict[int, float]  # the randomized click-through rate by position, relative to position 1's

    def at(self, position: int) -> float:
        return float(position) ** -self.eta

    def describe(self) -> str:
        if self.estimated:
            how = (
                f"estimated from {self.randomized_clicks} clicks on {self.randomized_results} randomized results "
                "(weighted least squares on log CTR, positions 1-10)"
            )
        else:
            how = (
                f"fallback: {self.randomized_clicks} randomized clicks < {MIN_RANDOMIZED_CLICKS}, "
                "too few to estimate examination by position"
            )
        return f"propensities: p(r) = r^-{self.eta:.3f}, eta {self.eta:.3f} {how}"


def estimate_propensities(lines: Iterable[ShownClick], min_clicks: int = MIN_RANDOMIZED_CLICKS) -> Propensities:
    """η of p(r) = r^(−η) from the randomized lines' click-through rate by position (module docstring)."""
    shown = [0] * (RANDOMIZED_DEPTH + 1)
    clicks = [0] * (RANDOMIZED_DEPTH + 1)
    for line in lines:
        if line.randomized and line.position <= RANDOMIZED_DEPTH:
            shown[line.position] += 1
            clicks[line.position] += int(line.clicked)
    total_shown, total_clicks = sum(shown), sum(clicks)
    rate = {r: clicks[r] / shown[r] for r in range(1, RANDOMIZED_DEPTH + 1) if shown[r]}
    top = rate.get(1, 0.0)
    relative = {r: c / top for r, c in rate.items()} if top > 0 else {}
    fitted = _fit_eta(shown, clicks) if total_clicks >= min_clicks else None
    if fitted is None:
        return Propensities(FALLBACK_ETA, False, total_shown, total_clicks, relative)
    return Propensities(fitted, True, total_shown, total_clicks, relative)


def _fit_eta(shown: list[int], clicks: list[int]) -> float | None:
    """Weighted least squares of log CTR on log r; None with fewer than two positions that have clicks."""
    points = []
    for r in range(1, len(shown)):
        if shown[r] and clicks[r]:
            ctr = clicks[r] / shown[r]
            weight = clicks[r] / max(1.0 - ctr, 1e-6)
            points.append((math.log(r), math.log(ctr), weight))
    if len(points) < 2:
        return None
    total = sum(w for _, _, w in points)
    mean_x = sum(w * x for x, _, w in points) / total
    mean_y = sum(w * y for _, y, w in points) / total
    sxx = sum(w * (x - mean_x) ** 2 for x, _, w in points)
    sxy = sum(w * (x - mean_x) * (y - mean_y) for x, y, w in points)
    if sxx <= 0:
        return None
    return max(-sxy / sxx, 0.0)  # more clicks lower down is noise, not negative examination


@dataclass(frozen=True, slots=True)
class ClickWeights:
    """Clicked (query, doc) pairs in first-click order, each with its weight, and how they were counted."""

    pairs: list[Pair]
    weights: list[float]
    clicks: int
    clipped: int  # clicks whose 1/p(r) was cut at the clip

    def describe(self, mode: str, clip: float) -> str:
        if not self.weights:
            return f"click pairs ({mode}): none"
        mean = sum(self.weights) / len(self.weights)
        clipped = f", {self.clipped} clicks clipped at 1/p = {clip:g}" if mode == "ips" else ""
        if mode == "pbm":
            clipped = f" (examined-click rate above the floor; {self.clicks} clicks in all)"
        return (
            f"click pairs ({mode}): {self.clicks} clicks -> {len(self.pairs)} pairs, "
            f"weight mean {mean:.3f} max {max(self.weights):.3f}{clipped}"
        )


def click_weights(
    lines: Iterable[ShownClick],
    mode: DebiasMode,
    propensities: Propensities | None = None,
    clip: float = DEFAULT_CLIP,
    relevance_floor: float = DEFAULT_RELEVANCE_FLOOR,
) -> ClickWeights:
    """Every clicked pair with its weight: clicks (`naive`), Σ min(1/p(position), clip) (`ips`) or the position-based
    model's γ̂ above `relevance_floor` (`pbm`; pairs at or below it are left out).

    `top` is the position filter of training.clicks (one unweighted pair per click at that position), not a
    weighting: it is refused here.
    """
    if mode not in WEIGHTED_MODES:
        raise ValueError(f"click weights are 'pbm', 'ips' or 'naive', not {mode!r}")
    if mode in ("ips", "pbm") and propensities is None:
        raise ValueError(f"{mode} weights need propensities")
    if mode == "pbm":
        assert propensities is not None
        return _click_model_weights(lines, propensities, relevance_floor)
    weight_of: dict[Pair, float] = {}
    clicks = clipped = 0
    for line in lines:
        if not line.clicked:
            continue
        clicks += 1
        pair = Pair(line.page_id, line.ad_id)
        if mode == "naive":
            weight = 1.0
        else:
            assert propensities is not None
            inverse = 1.0 / propensities.at(line.position)
            weight = min(inverse, clip)
            clipped += inverse > clip
        weight_of[pair] = weight_of.get(pair, 0.0) + weight
    return ClickWeights(list(weight_of), list(weight_of.values()), clicks, clipped)


def _click_model_weights(lines: Iterable[ShownClick], propensities: Propensities, floor: float) -> ClickWeights:
    """γ̂(q, d) = (C + m·μ) / (E + m) of the position-based model (module docstring); weight max(0, γ̂ − floor)."""
    clicked: dict[Pair, float] = {}
    examined: dict[Pair, float] = {}
    clicks = 0
    for line in lines:
        pair = Pair(line.page_id, line.ad_id)
        examined[pair] = examined.get(pair, 0.0) + propensities.at(line.position)
        if line.clicked:
            clicks += 1
            clicked[pair] = clicked.get(pair, 0.0) + 1.0
    total_examined = sum(examined.values())
    prior = clicks / total_examined if total_examined > 0 else 0.0
    pairs, weights = [], []
    for pair, count in clicked.items():
        gamma = (count + PRIOR_EXAMINATIONS * prior) / (examined[pair] + PRIOR_EXAMINATIONS)
        if gamma > floor:
            pairs.append(pair)
            weights.append(gamma - floor)
    return ClickWeights(pairs, weights, clicks, 0)
