"""The click benchmark's exploration: what a randomized session is shown (benchmarks.click_debias.Explore)."""

from __future__ import annotations

import random

from benchmarks.click_debias import Explore

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
