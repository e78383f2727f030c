"""`ssi learn --every DURATION`: rounds at a fixed interval until interrupted.

The interval runs from one round's start to the next one's: a round that takes longer than the interval is
followed by the next at once, never overlapped by it (rounds run one after the other in this process, and the
bundles folder's lock keeps any other learner out, training.feedback.lock).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = r"(\d+(?:\.\d+)?)([smhd])"


def parse_duration(text: str) -> float:
    """Seconds of a duration written as numbers with units: 90s, 30m, 2h, 1d, 1h30m, 1.5h.

    A bare number is refused rather than guessed at (seconds or minutes?).
    """
    compact = text.strip().lower().replace(" ", "")
    if not re.fullmatch(f"(?:{_PART})+", compact):
        raise ValueError(f"{text!r} is not a duration: give a number with a unit, s, m, h or d (90s, 30m, 2h, 1h30m)")
    seconds = sum(float(number) * _UNITS[unit] for number, unit in re.findall(_PART, compact))
    if seconds <= 0:
        raise ValueError(f"{text!r} is no time at all: give a positive duration (90s, 30m, 2h)")
    return seconds


def describe_duration(seconds: float) -> str:
    """90 → '1m30s', 7200 → '2h': how a log line names the interval."""
    parts, rest = [], round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or f"{seconds:g}s"


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_every(
    every: float,
    tick: Callable[[], None],
    *,
    rounds: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Call `tick` every `every` seconds, `rounds` times or until interrupted (Ctrl-C, or SIGTERM: what
    `docker stop` sends, turned into the same interruption so that a training under way is stopped with it);
    returns the ticks that ran to their end."""
    main = threading.current_thread() is threading.main_thread()  # only the main thread may set a handler
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    done = 0
    try:
        while rounds is None or done < rounds:
            started = clock()
            tick()
            done += 1
            if rounds is not None and done >= rounds:
                break
            sleep(max(0.0, every - (clock() - started)))
    except KeyboardInterrupt:
        pass
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    return done
