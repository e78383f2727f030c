"""Short excerpts of a hit's text, centred on the first query word it contains, so a user sees why it matched."""

from __future__ import annotations

import re
from collections.abc import Iterable

_SCAN_CHARS = 50_000  # a query word deep inside a huge document is not worth scanning for


def query_pattern(words: Iterable[str]) -> re.Pattern[str] | None:
    """One regex for the query's words (already NFKC-casefolded by the tokenizer), built once per query."""
    alternatives = sorted({re.escape(w) for w in words if w}, key=len, reverse=True)
    if not alternatives:
        return None
    # Case-insensitive matching on the original text rather than casefolding a copy of every hit's text
    # (that copy was most of a search's time on long articles); it misses only exotic folds like ß/ss.
    return re.compile(r"(?<![^\W_])(?:" + "|".join(alternatives) + r")(?![^\W_])", re.IGNORECASE)


def make_snippet(text: str, pattern: re.Pattern[str] | None, width: int) -> str:
    """About `width` characters of `text` around the first query word (the opening if none), cut at spaces."""
    if not text:
        return ""
    position = 0
    if pattern is not None:
        match = pattern.search(text, 0, _SCAN_CHARS)
        if match is not None:
            position = match.start()
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
