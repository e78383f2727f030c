"""Short excerpts of a hit's text, centred on the first query word it contains, so a user sees why it matched.

The work per hit is bounded whatever the request: the pattern holds at most `max_words` distinct
query words (a 4,000-character query has hundreds, and a regex alternation costs per alternative)
and the scan stops after `scan_chars` characters (SSI_SNIPPET_WORDS, SSI_SNIPPET_SCAN_CHARS). A word
found nowhere in that window leaves the snippet at the opening of the text.

The window is lower-cased and searched case-sensitively: a case-insensitive alternation costs two to
three times as much per character in Python's `re`. Like the casefolded query words it is matched
against, it misses only exotic folds (ß/ss).
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def query_pattern(words: Iterable[str], max_words: int) -> re.Pattern[str] | None:
    """One regex for the first `max_words` distinct query words (already NFKC-casefolded by the tokenizer)."""
    chosen: dict[str, None] = {}
    for word in words:
        if word and word not in chosen:
            chosen[word] = None
            if len(chosen) == max_words:
                break
    if not chosen:
        return None
    alternatives = sorted((re.escape(w) for w in chosen), key=len, reverse=True)
    return re.compile(r"(?<![^\W_])(?:" + "|".join(alternatives) + r")(?![^\W_])")


def _first_match(text: str, pattern: re.Pattern[str], scan_chars: int) -> int | None:
    """Where the first query word starts within the first `scan_chars` characters of `text`."""
    window = text[:scan_chars]
    lowered = window.lower()
    if len(lowered) == len(window):
        match = pattern.search(lowered)
    else:  # lower() changed lengths (İ becomes i + a combining dot): positions would shift
        match = re.compile(pattern.pattern, re.IGNORECASE).search(window)
    return None if match is None else match.start()


def make_snippet(text: str, pattern: re.Pattern[str] | None, width: int, scan_chars: int) -> str:
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
