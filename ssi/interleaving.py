"""Team-draft interleaving of two rankers, its click credit, and the sequential test that ends a comparison.

Why interleaving: a candidate that passed the offline estimate (training.feedback.promote) is confirmed on live
traffic before it is served to everyone. Team-draft interleaving (Radlinski, Kurup & Joachims 2008, "How does
clickthrough data reflect retrieval quality?", CIKM) shows one list merged from both rankings, each result
placed by one of the two "teams"; a user's clicks then vote for the team whose results they chose. Chapelle,
Joachims, Radlinski & Yue (2012, "Large-scale validation and analysis of interleaved search evaluation", TOIS)
found it agrees with A/B tests while needing one to two orders of magnitude fewer sessions.

The merge (`team_draft`): the team with fewer picks so far picks next (a fair coin when tied); it adds its
highest-ranked result not shown yet. Each impression is then *won* by the candidate when more of its clicks fall
on the candidate's picks than on the served model's, *lost* in the opposite case, and *tied* otherwise (no
click, or as many on each side); ties carry no information about which ranker is better and are left out.

The test (`SequentialTest`): Wald's sequential probability ratio test on the decided impressions, whose
candidate wins are Bernoulli(p), H0: p = p0 against H1: p = p1. After w wins and l losses the log-likelihood ratio
is w·log(p1/p0) + l·log((1 − p1)/(1 − p0)); the comparison ends *promote* when it reaches log((1 − β)/α) and *drop*
when it falls to log(β/(1 − α)). Error rates (Wald 1945): a candidate whose win rate is p0 or lower is promoted
with probability at most α/(1 − β); one whose win rate is p1 or higher is dropped with probability at most
β/(1 − α). A comparison that reaches its session budget undecided ends *budget*: not promoted (stopping early can
only lower the chance of a promotion, so the bound on a wrong promotion holds). Two questions, by `mode`:

- `guard` (the default): H0 p = 1/2 − δ (the candidate is worse), H1 p = 1/2 (it is as good). The offline
  estimate has already said the candidate is better; the interleaving only has to catch a candidate that users
  like less, which the offline estimate cannot see (it reorders only what was logged). Candidates a round trains
  are often better by a few thousandths of NDCG@10, a win rate within a point of 1/2, which no test on a few
  thousand sessions can tell from 1/2; under `better` such candidates were dropped (docs/results/learning-loop.md).
- `better`: H0 p = 1/2 (the candidate is no better: with identical rankers team-draft credits each side by a fair
  coin), H1 p = 1/2 + δ. A candidate is served only when users prefer it.

With δ = 0.05, α = 0.05, β = 0.1, simulated 4,000 times per win rate without a budget (`python -m
benchmarks.interleave_sprt`): under `better`, a candidate that wins 55 % of decided impressions is promoted 91 % of
the time, after 486 of them on average; one that wins 50 %, 4.6 % of the time (after 400); 45 % and 40 %, never:
dropped after 151 and 92 on average (90 % within 258 and 142). Under `guard`, see docs/guides/learn.md.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

SERVED = "a"  # a result placed by the served model, in an impression's `teams`
CANDIDATE = "b"  # a result placed by the candidate

DEFAULT_SHARE = 0.5  # of first pages interleaved while a comparison runs
DEFAULT_DELTA = 0.05  # the gap, in win rate, between the test's two hypotheses
DEFAULT_ALPHA = 0.05
DEFAULT_BETA = 0.1
DEFAULT_BUDGET = 5000  # interleaved impressions before an undecided comparison ends

Decision = Literal["running", "promote", "drop", "budget"]
TestMode = Literal["guard", "better"]
DEFAULT_MODE: TestMode = "guard"
MODES: tuple[TestMode, ...] = ("guard", "better")


def team_draft(served: Sequence[str], candidate: Sequence[str], k: int, rng: random.Random) -> tuple[list[str], str]:
    """The interleaved list of at most `k` ids from two rankings, and who placed each (`teams`, one letter per id:
    SERVED or CANDIDATE). A team whose ranking has nothing new left stops picking; the other fills the page."""
    shown: list[str] = []
    teams: list[str] = []
    seen: set[str] = set()
    rankings = {SERVED: list(served), CANDIDATE: list(candidate)}
    next_at = {SERVED: 0, CANDIDATE: 0}
    picks = {SERVED: 0, CANDIDATE: 0}

    def has_more(team: str) -> bool:
        ranking = rankings[team]
        while next_at[team] < len(ranking) and ranking[next_at[team]] in seen:
            next_at[team] += 1
        return next_at[team] < len(ranking)

    while len(shown) < k:
        more = [team for team in (SERVED, CANDIDATE) if has_more(team)]
        if not more:
            break
        if len(more) == 1:
            team = more[0]
        elif picks[SERVED] != picks[CANDIDATE]:
            team = SERVED if picks[SERVED] < picks[CANDIDATE] else CANDIDATE
        else:
            team = SERVED if rng.random() < 0.5 else CANDIDATE
        doc = rankings[team][next_at[team]]
        seen.add(doc)
        shown.append(doc)
        teams.append(team)
        picks[team] += 1
    return shown, "".join(teams)


def credit(teams: str, clicked: Iterable[int]) -> int:
    """+1 when the candidate's picks got more of the clicks (offsets into `teams`), −1 when the served model's did,
    0 for a tie."""
    balance = 0
    for offset in clicked:
        if 0 <= offset < len(teams):
            balance += 1 if teams[offset] == CANDIDATE else -1
    return (balance > 0) - (balance < 0)


@dataclass(frozen=True, slots=True)
class SequentialTest:
    """Wald's SPRT on the candidate's wins: H0 p = 1/2 − δ against H1 p = 1/2 (`guard`), or H0 p = 1/2 against
    H1 p = 1/2 + δ (`better`); the module docstring says what each promises."""

    delta: float = DEFAULT_DELTA
    alpha: float = DEFAULT_ALPHA
    beta: float = DEFAULT_BETA
    budget: int = DEFAULT_BUDGET
    mode: TestMode = DEFAULT_MODE

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"the test's mode is one of {', '.join(MODES)}, got {self.mode!r}")
        if not 0.0 < self.delta < 0.5:
            raise ValueError(f"delta is a win rate above 1/2: in (0, 0.5), got {self.delta}")
        for name, value in (("alpha", self.alpha), ("beta", self.beta)):
            if not 0.0 < value < 0.5:
                raise ValueError(f"{name} is an error rate in (0, 0.5), got {value}")
        if self.budget < 1:
            raise ValueError(f"the budget is a number of impressions >= 1, got {self.budget}")

    @property
    def upper(self) -> float:
        return math.log((1.0 - self.beta) / self.alpha)

    @property
    def lower(self) -> float:
        return math.log(self.beta / (1.0 - self.alpha))

    @property
    def p0(self) -> float:
        """H0's win rate."""
        return 0.5 - self.delta if self.mode == "guard" else 0.5

    @property
    def p1(self) -> float:
        """H1's win rate."""
        return 0.5 if self.mode == "guard" else 0.5 + self.delta

    def llr(self, wins: int, losses: int) -> float:
        p0, p1 = self.p0, self.p1
        return wins * math.log(p1 / p0) + losses * math.log((1.0 - p1) / (1.0 - p0))

    def decide(self, wins: int, losses: int, impressions: int) -> Decision:
        value = self.llr(wins, losses)
        if value >= self.upper:
            return "promote"
        if value <= self.lower:
            return "drop"
        return "budget" if impressions >= self.budget else "running"


# The test's settings, as POST /admin/interleave and a comparison's record name them.
TEST_FIELDS: tuple[str, ...] = tuple(field.name for field in fields(SequentialTest))


@dataclass(frozen=True, slots=True)
class Tally:
    """A comparison's counts so far and the test's verdict on them."""

    impressions: int  # interleaved impressions shown
    clicked: int  # of them with at least one click
    wins: int  # the candidate's
    losses: int
    ties: int  # clicked, as many clicks on each side
    clicks_served: int
    clicks_candidate: int
    llr: float
    decision: Decision

    @property
    def win_rate(self) -> float | None:
        decided = self.wins + self.losses
        return self.wins / decided if decided else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "win_rate": self.win_rate}


def tally(impressions: Iterable[tuple[str, Sequence[int]]], test: SequentialTest) -> Tally:
    """The counts and verdict of interleaved impressions, each given as (teams, clicked offsets)."""
    shown = clicked = wins = losses = ties = by_served = by_candidate = 0
    for teams, offsets in impressions:
        shown += 1
        if not offsets:
            continue
        clicked += 1
        for offset in offsets:
            if 0 <= offset < len(teams):
                by_candidate += teams[offset] == CANDIDATE
                by_served += teams[offset] == SERVED
        vote = credit(teams, offsets)
        wins += vote > 0
        losses += vote < 0
        ties += vote == 0
    return Tally(
        impressions=shown,
        clicked=clicked,
        wins=wins,
        losses=losses,
        ties=ties,
        clicks_served=by_served,
        clicks_candidate=by_candidate,
        llr=round(test.llr(wins, losses), 6),
        decision=test.decide(wins, losses, shown),
    )
