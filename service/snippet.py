"""Short excerpts of a hit's text, centred on the first query word it contains, so a user sees why it matched.

The work per hit is bounded whatever the request: it looks for at most `max_words` distinct query
words (a 4,000-character query has hundreds) and the scan stops after `scan_chars` characters
(SSI_SNIPPET_WORDS, SSI_SNIPPET_SCAN_CHARS). A word found nowhere in that window leaves the snippet at
the opening of the text.

The window is lower-cased and its words (maximal runs of letters and digits, as the tokenizer cuts them)
are compared with the casefolded query words; like those, it misses only exotic folds (ß/ss). No pattern is
compiled per query: a regex alternation of five query words took 0.22 ms to compile (every query differs, so
re's cache never hits), as much as the ten snippets of a hit list. Each word's first whole-word occurrence is found
by str.find in C, stepping over occurrences inside longer words, and the earliest wins; a window with more
than MAX_SKIPS such near misses (a query of single letters) goes back to the compiled alternation, so the
worst case costs what it did.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

MAX_SKIPS = 64  # occurrences inside longer words stepped over in Python before the regex takes over


def query_pattern(words: Iterable[str], max_words: int) -> frozenset[str] | None:
    """The first `max_words` distinct query words (already NFKC-casefolded by the tokenizer) a snippet looks for."""
    chosen: dict[str, None] = {}
    for word in words:
        if word and word not in chosen:
            chosen[word] = None
            if len(chosen) == max_words:
                break
    return frozenset(chosen) if chosen else None


@functools.lru_cache(maxsize=256)
def _regex(words: frozenset[str], ignore_case: bool) -> re.Pattern[str]:
    """One alternation of the words, each bounded by anything but a letter or digit: the fallback, compiled only
    for a window full of near misses (or one whose lowering changes its length), and kept for repeats."""
    alternatives = sorted((re.escape(w) for w in words), key=len, reverse=True)
    flags = re.IGNORECASE if ignore_case else 0
    return re.compile(r"(?<![^\W_])(?:" + "|".join(alternatives) + r")(?![^\W_])", flags)


def _first_match(text: str, words: frozenset[str], scan_chars: int) -> int | None:
    """Where the first query word starts, as a whole word, within the first `scan_chars` characters of `text`."""
    window = text[:scan_chars]
    lowered = window.lower()
    if len(lowered) != len(window):  # lower() changed lengths (İ becomes i + a combining dot): positions would shift
        match = _regex(words, True).search(window)
        return None if match is None else match.start()
    best: int | None = None
    skips = 0
    for word in words:
        start = 0
        while True:  # str.find in C; Python only steps over occurrences inside longer words
            stop = len(lowered) if best is None else best + len(word) - 1  # only starts before the best so far
            position = lowered.find(word, start, stop)
            if position < 0:
                break
            end = position + len(word)
            if (position == 0 or not lowered[position - 1].isalnum()) and (
                end == len(lowered) or not lowered[end].isalnum()
            ):
                best = position
                break
            skips += 1
            if skips > MAX_SKIPS:  # a window of near misses ("e" in English text): the regex's C scan is cheaper
                match = _regex(words, False).search(lowered)
                return None if match is None else match.start()
            start = position + 1
    return best


def make_snippet(text: str, pattern: frozenset[str] | None, width: int, scan_chars: int) -> str:
    """About `width` characters of `text` around the first query word within its first `scan_chars`
    characters (the opening if none), cut at spaces."""
    if not text:
        return ""
    position = 0
    if pattern is not None:
        position = _first_match(text, pattern, scan_chars) or 0
    start = max(0, position - width // 3)
    if start > 0:
        space = text.find(" ", start, position)
        start = space + 1 if space != -1 else start
    end = min(len(text), start + width)
    if end < len(text):
        space = text.rfind(" ", start + width // 2, end)
        end = space if space != -1 else end
    excerpt = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + excerpt + ("…" if end < len(text) else "")
