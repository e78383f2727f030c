"""Short excerpts of a hit's text, centred on the first query word it contains, so a user sees why it matched."""

from __future__ import annotations

import re

from ssi.tokenize import tokenize

_WORD = re.compile(r"[^\W_]+")
_SCAN_CHARS = 200_000  # a query word deep inside a huge document is not worth scanning for


def make_snippet(text: str, query_words: set[str], width: int) -> str:
    """About `width` characters of `text` around the first query word (the opening if none), cut at spaces."""
    if not text:
        return ""
    position = 0
    if query_words:
        for match in _WORD.finditer(text, 0, _SCAN_CHARS):
            if any(word in query_words for word in tokenize(match.group())):
                position = match.start()
                break
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
