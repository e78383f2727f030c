"""Snippets find the first whole query word in the window exactly where the regex rule they replaced did."""

from __future__ import annotations

import random
import re

from service.snippet import _first_match, make_snippet, query_pattern


def _regex_first(text: str, words: list[str], scan_chars: int) -> int | None:
    """The reference: one alternation of the words, bounded by anything but a letter or digit, searched in the
    lowered window (case-insensitively in the original where lowering changes lengths)."""
    alternatives = sorted((re.escape(w) for w in dict.fromkeys(words)), key=len, reverse=True)
    pattern = re.compile(r"(?<![^\W_])(?:" + "|".join(alternatives) + r")(?![^\W_])")
    window = text[:scan_chars]
    lowered = window.lower()
    if len(lowered) == len(window):
        match = pattern.search(lowered)
    else:
        match = re.compile(pattern.pattern, re.IGNORECASE).search(window)
    return None if match is None else match.start()


PIECES = ["gene", "genes", "Gene", "GENE", "ene", "cell", "cells", "x", "a", "9", "gene9", "_", "-", " ", "  ",
          ", ", ".", "é", "É", "straße", "ß", "ﬁ", "\n", "\t", "µ", "٣", "x_gene", "cell-a"]  # fmt: skip
WORDS = ["gene", "cell", "a", "9", "é", "x", "straße", "gene9", "٣"]


def test_the_first_whole_word_is_where_the_regex_rule_finds_it() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 60)))
        words = [w.casefold() for w in rng.sample(WORDS, rng.randrange(1, 4))]
        scan = rng.randrange(1, 200)
        pattern = query_pattern(words, 32)
        assert pattern is not None
        assert _first_match(text, pattern, scan) == _regex_first(text, words, scan), (text, words, scan)


def test_a_text_whose_lowering_changes_length_still_finds_the_word() -> None:
    text = "İstanbul notes: the gene of interest"  # "İ".lower() is two characters
    pattern = query_pattern(["gene"], 32)
    assert pattern is not None
    assert _first_match(text, pattern, 1000) == text.index("gene")
    assert make_snippet(text, pattern, 20, 1000).startswith("…the gene")


def test_a_word_inside_a_longer_word_is_not_a_match() -> None:
    pattern = query_pattern(["gene"], 32)
    assert pattern is not None
    assert _first_match("genes genetic oncogene", pattern, 1000) is None
    assert _first_match("genes, gene_x", pattern, 1000) == 7  # the underscore separates words


def test_a_window_of_near_misses_goes_back_to_the_regex_and_finds_the_same_word() -> None:
    text = "tree " * 400 + "e end"  # 800 occurrences of "e" inside longer words before the whole one
    pattern = query_pattern(["e", "ee"], 32)
    assert pattern is not None
    assert _first_match(text, pattern, len(text)) == text.index(" e ") + 1 == _regex_first(text, ["e", "ee"], 10**6)
    assert _first_match(text, pattern, 2000) is None  # the scan window stops before it
