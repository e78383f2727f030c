"""How a sentence encoder's texts are split into onnxruntime calls, and run on one session or several at once.

A call holds texts of about one length (sorted first, so it pads little) and at most TOKENS_PER_CALL padded tokens.
On this project's CPU (AVX-512 VNNI, all-MiniLM-L6-v2, one thread, benchmarks/encoder_calls.py), calls of 384 tokens
against the 32 texts a call of before: int8 60-word passages 122 a second against 93, 256-token pages 31 against 19,
20-word texts alike (376, 372); fp32 47 against 40 and 14 against 11. Several sessions of one thread each, taking
the calls in turn, kept two cores busier than one session of two threads, which wait on each other within every
call: int8 passages on two cores 229 a second against 157 the way before (benchmarks/encoder_peak.py; both in
docs/results/hybrid.md, "Calls and sessions").
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

# Padded tokens a call holds at most ([CLS] and [SEP] counted); a longer text goes alone.
TOKENS_PER_CALL = 384
# Texts a call holds at most, however short.
TEXTS_PER_CALL = 64
# A call's bound on a GPU, which wants large calls: 32 texts of the encoder's longest (256 tokens), as many as a GPU
# call held before (not measured here: no GPU was lent to this project's sessions since).
GPU_TOKENS_PER_CALL = 32 * 256

Session = TypeVar("Session")


def plan_calls(lengths: Sequence[int], tokens: int = TOKENS_PER_CALL, most: int = TEXTS_PER_CALL) -> list[np.ndarray]:
    """The rows (indices into `lengths`) of each call, shortest texts first: as many as fit in `tokens` padded to
    the call's longest, at most `most`, at least one."""
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    calls: list[np.ndarray] = []
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and end - start < most and (end - start + 1) * lengths[order[end]] <= tokens:
            end += 1
        calls.append(order[start:end])
        start = end
    return calls


def run_calls(
    calls: Sequence[np.ndarray], sessions: Sequence[Session], run: Callable[[np.ndarray, Session], Any]
) -> None:
    """`run(call, session)` for every call: in this thread where there is one session (or one call), else on as many
    threads as sessions, each call on a session no other thread is running (onnxruntime lets the GIL go while it
    runs), the last calls first (`plan_calls` puts the longest texts last) so that no thread is left with a long one
    at the end."""
    if len(sessions) == 1 or len(calls) <= 1:
        for call in calls:
            run(call, sessions[0])
        return
    free: queue.SimpleQueue[Session] = queue.SimpleQueue()
    for session in sessions:
        free.put(session)

    def one(call: np.ndarray) -> None:
        session = free.get()
        try:
            run(call, session)
        finally:
            free.put(session)

    with ThreadPoolExecutor(max_workers=len(sessions), thread_name_prefix="encoder") as pool:
        for _ in pool.map(one, calls[::-1]):  # re-raises the first failure
            pass
