"""The click benchmark's exploration: what a randomized session is shown (benchmarks.click_debias.Explore)."""

from __future__ import annotations

import random
from typing import Any, cast

from benchmarks.click_debias import Explore
from benchmarks.click_loop import Users, World

RANKED = [f"d{i}" for i in range(1, 51)]


def test_an_unexplored_session_sees_the_top_ten_in_order() -> None:
    shown, randomized = Explore(0.0, 3, 30, random.Random(0)).shown(RANKED)
    assert shown == RANKED[:10]
    assert not randomized


def test_an_explored_session_keeps_the_top_and_draws_the_rest_from_the_pool() -> None:
    explore = Explore(1.0, 3, 30, random.Random(0))
    orders = set()
    for _ in range(200):
        shown, randomized = explore.shown(RANKED)
        assert randomized
        assert len(shown) == len(set(shown)) == 10
        assert set(RANKED[:7]) <= set(shown)  # the top 10 − swaps always
        deep = set(shown) - set(RANKED[:7])
        assert len(deep) == 3 and deep <= set(RANKED[10:30])  # swaps from ranks 11..pool only
        orders.add(tuple(shown))
    assert len(orders) > 150  # the order and the deep picks vary


def test_a_short_list_swaps_what_it_has() -> None:
    shown, randomized = Explore(1.0, 3, 30, random.Random(1)).shown(RANKED[:11])
    assert randomized
    assert sorted(shown, key=RANKED.index) == RANKED[:9] + [RANKED[10]]


def test_a_longer_page_shows_its_results_and_randomizes_only_the_top_ten() -> None:
    shown, randomized = Explore(0.0, 0, 10, random.Random(0), page=20).shown(RANKED)
    assert shown == RANKED[:20] and not randomized
    explore = Explore(1.0, 0, 10, random.Random(0), page=20)
    tops = set()
    for _ in range(50):
        shown, randomized = explore.shown(RANKED)
        assert randomized
        assert set(shown[:10]) == set(RANKED[:10])  # the first page shuffled among itself
        assert shown[10:] == RANKED[10:20]  # below it, the ranking's own order
        tops.add(tuple(shown[:10]))
    assert len(tops) > 40


def test_users_who_stay_on_the_first_page_never_click_below_it() -> None:
    relevant = frozenset(RANKED[:20])  # every result relevant: a click wherever a user looks

    def deep_clicks(page2: float) -> int:
        users = Users(cast(World, cast(Any, None)), 1.0, 1.0, 0.0, 20, random.Random(0), page2=page2)
        return sum(RANKED.index(d) >= 10 for _ in range(2000) for d in users.clicked(RANKED[:20], relevant))

    assert deep_clicks(0.0) == 0
    scrolled, paged = deep_clicks(1.0), deep_clicks(0.3)
    assert 2000 * 0.6 < scrolled < 2000 * 0.8  # Σ 1/r over r = 11..20 is 0.67 clicks a session
    assert 0.2 * scrolled < paged < 0.4 * scrolled
