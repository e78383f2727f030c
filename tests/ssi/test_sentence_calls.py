"""How an encoder's texts become onnxruntime calls (ssi.sentence_calls): every text in exactly one call, a call's
padded tokens within the bound (a longer text alone), and calls run on several sessions at once with no session used
by two threads together, a failure raised to the caller."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ssi.sentence_calls import plan_calls, run_calls


@pytest.mark.parametrize("tokens, most", [(384, 64), (40, 3), (1, 64)])
def test_every_text_is_in_one_call_of_about_its_own_length_within_the_bound(tokens: int, most: int) -> None:
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.integers(2, 300, size=500)] + [7] * 40 + [600]
    calls = plan_calls(lengths, tokens, most)
    rows = np.concatenate(calls)
    assert sorted(rows.tolist()) == list(range(len(lengths)))  # each text once
    widths = [max(lengths[i] for i in call) for call in calls]
    assert widths == sorted(widths)  # shortest texts first: a call pads to texts of about its own length
    for call, width in zip(calls, widths, strict=True):
        assert 1 <= len(call) <= most
        assert len(call) == 1 or len(call) * width <= tokens  # a text past the bound goes alone
    # Full: the next call's first text did not fit (or the call had `most`).
    for call, after in zip(calls, calls[1:], strict=False):
        assert len(call) == most or (len(call) + 1) * lengths[after[0]] > tokens
    assert plan_calls([], tokens, most) == []


def test_calls_run_on_every_session_never_one_session_in_two_threads_at_once() -> None:
    in_use: set[int] = set()
    used: list[int] = []
    lock = threading.Lock()

    def run(call: np.ndarray, session: int) -> None:
        with lock:
            assert session not in in_use, f"session {session} run by two threads at once"
            in_use.add(session)
            used.append(session)
        time.sleep(0.002)  # long enough for the threads to overlap
        with lock:
            in_use.remove(session)

    calls = plan_calls([10] * 200, tokens=40)
    run_calls(calls, [0, 1, 2], run)
    assert len(used) == len(calls) == 50 and set(used) == {0, 1, 2}

    def fails(call: np.ndarray, session: int) -> None:
        if 0 in call:
            raise ValueError("a corrupt graph")

    with pytest.raises(ValueError, match="a corrupt graph"):
        run_calls(calls, [0, 1], fails)
