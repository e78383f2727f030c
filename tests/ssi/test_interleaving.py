"""Team-draft interleaving, its click credit and the sequential test (ssi.interleaving)."""

from __future__ import annotations

import math
import random

import pytest

from ssi.interleaving import CANDIDATE, SERVED, SequentialTest, credit, tally, team_draft


def test_team_draft_takes_each_teams_best_unshown_result_in_turn() -> None:
    rng = random.Random(0)
    served, candidate = ["a", "b", "c", "d", "e"], ["c", "a", "f", "g", "b"]
    for _ in range(50):
        ids, teams = team_draft(served, candidate, 6, rng)
        assert len(ids) == len(set(ids)) == 6 and len(teams) == 6
        for i, team in enumerate(teams):
            ranking = served if team == SERVED else candidate
            assert ids[i] == next(d for d in ranking if d not in ids[:i])
        for n in range(2, 7, 2):  # after every two picks the teams are even
            assert teams[:n].count(SERVED) == teams[:n].count(CANDIDATE)


def test_team_draft_of_one_ranking_with_itself_is_that_ranking_and_a_fair_coin() -> None:
    rng = random.Random(1)
    ranking = [f"d{i}" for i in range(10)]
    firsts = [team_draft(ranking, ranking, 10, rng) for _ in range(400)]
    assert all(ids == ranking for ids, _ in firsts)
    share = sum(teams[0] == CANDIDATE for _, teams in firsts) / len(firsts)
    assert 0.4 < share < 0.6


def test_a_team_that_runs_out_leaves_the_page_to_the_other() -> None:
    ids, teams = team_draft(["a"], ["b", "c", "d"], 4, random.Random(2))
    assert sorted(ids) == ["a", "b", "c", "d"] and teams.count(SERVED) == 1
    assert team_draft([], [], 5, random.Random(3)) == ([], "")


def test_credit_goes_to_the_team_with_more_clicks() -> None:
    assert credit("abab", [1]) == 1 and credit("abab", [0]) == -1
    assert credit("abab", [0, 1]) == 0 and credit("abab", []) == 0
    assert credit("abab", [1, 3, 0]) == 1 and credit("ab", [7]) == 0  # an offset past the page counts nothing


@pytest.mark.parametrize(("mode", "p0", "p1"), [("guard", 0.4, 0.5), ("better", 0.5, 0.6)])
def test_the_sequential_test_stops_at_walds_bounds(mode: str, p0: float, p1: float) -> None:
    """H0 and H1 by mode: guard asks whether the candidate is worse by delta, better whether it is better by it."""
    test = SequentialTest(delta=0.1, alpha=0.05, beta=0.1, budget=1000, mode=mode)
    assert (test.p0, test.p1) == pytest.approx((p0, p1))
    assert test.upper == pytest.approx(math.log(18)) and test.lower == pytest.approx(math.log(0.1 / 0.95))
    wins_to_promote = math.ceil(test.upper / math.log(p1 / p0))
    assert test.decide(wins_to_promote - 1, 0, 20) == "running"
    assert test.decide(wins_to_promote, 0, 20) == "promote"
    losses_to_drop = math.ceil(-test.lower / -math.log((1 - p1) / (1 - p0)))
    assert test.decide(0, losses_to_drop - 1, 20) == "running" and test.decide(0, losses_to_drop, 20) == "drop"
    assert test.decide(30, 30, 999) == "running" and test.decide(30, 30, 1000) == "budget"
    for bad in ({"delta": 0.5}, {"alpha": 0.0}, {"beta": 0.7}, {"budget": 0}, {"mode": "maybe"}):
        with pytest.raises(ValueError):
            SequentialTest(**{"mode": mode, **bad})


def test_the_guard_promotes_an_even_candidate_that_the_better_test_drops() -> None:
    """A candidate users like as much as the served model (as many wins as losses): the guard lets it through, the
    test of `better` keeps it out; one that clearly loses is dropped by both."""
    guard, better = SequentialTest(), SequentialTest(mode="better")
    assert guard.decide(300, 300, 600) == "promote" and better.decide(300, 300, 600) == "drop"
    assert guard.decide(40, 80, 120) == "drop" and better.decide(40, 80, 120) == "drop"


def test_tally_counts_wins_losses_and_ties_of_clicked_impressions() -> None:
    counted = tally([("ab", [1]), ("ab", [0]), ("ba", [0]), ("ab", [0, 1]), ("ab", [])], SequentialTest())
    assert (counted.impressions, counted.clicked, counted.wins, counted.losses, counted.ties) == (5, 4, 2, 1, 1)
    assert (counted.clicks_candidate, counted.clicks_served) == (3, 2)
    assert counted.win_rate == pytest.approx(2 / 3) and counted.decision == "running"
