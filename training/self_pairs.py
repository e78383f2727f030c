"""Training pairs made from the corpus itself, for collections that come with no labels.

Two ways to cut a document into a (query, relevant document) pair, both seeded:

- `title`: the title is the query, the body (without the title) the relevant document — the shape of
  scientific claims against abstracts, or of a search for a page by its name;
- `split`: a span of `span_words` consecutive words, taken at a sentence start when there is one, is the
  query and the rest of the document (the span removed) the relevant document — the "one part of a
  document against the rest" of the issue, which asks the model to recognise the context a passage
  belongs to, so words that co-occur across a document's parts learn to match.

The document side of a pair never contains its query's text: otherwise the diagonal q·d alone would
solve every pair and the low-rank part would learn nothing. With `unshared`, the query keeps only the words
its document side does not contain (a pair left with none gives none): q·d of the positive is then 0, and
every pair is one the semantic part must solve alone — the vocabulary mismatch the lexical part cannot see.
The trainer ranks these training texts;
the bundle, `ssi eval` and the service rank the full documents as always.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ssi.records import Document, Pair, Query
from ssi.tokenize import tokenize

SelfPairMode = Literal["title", "split"]
SELF_PAIR_MODES: tuple[str, ...] = ("title", "split")
_SENTENCE_ENDS = frozenset(".!?")


@dataclass(frozen=True, slots=True)
class SelfPairs:
    """Queries cut from documents, their training and validation pairs, and the documents' training texts."""

    queries: list[Query]
    train: list[Pair]
    valid: list[Pair]
    doc_texts: list[str]  # per input document, in order: its text with the query part removed
    held_out: frozenset[str]  # ids of the validation documents, left out of training altogether
    skipped: int  # documents that gave no pair (no title, or too short to split)


def _span(text: str, span_words: int, rng: np.random.Generator) -> tuple[str, str] | None:
    """(a span of `span_words` words, the text without it), the span at a sentence start when one fits.

    A span must leave at least as many words behind as it takes, or the rest is not a document.
    """
    words = text.split()
    if len(words) < 2 * span_words:
        return None
    last = len(words) - span_words
    starts = [0] + [i + 1 for i, word in enumerate(words[:-1]) if word[-1] in _SENTENCE_ENDS and i + 1 <= last]
    start = int(rng.choice(starts)) if len(starts) > 1 else int(rng.integers(0, last + 1))
    return " ".join(words[start : start + span_words]), " ".join(words[:start] + words[start + span_words :])


def _training_cut(
    doc: Document, mode: SelfPairMode, span_words: int, rng: np.random.Generator, unshared: bool
) -> tuple[str, str] | None:
    cut = (
        ((doc.title, doc.text) if doc.title.strip() and doc.text.strip() else None)
        if mode == "title"
        else _span(doc.full_text, span_words, rng)
    )
    if cut is None or not unshared:
        return cut
    query, rest = cut
    kept = _unshared_words(query, rest)
    return (kept, rest) if kept else None


def _unshared_words(query: str, rest: str) -> str:
    """The query's words that its document does not contain: what the semantic part alone can match."""
    present = set(tokenize(rest))
    return " ".join(word for word in tokenize(query) if word not in present)


def build_self_pairs(
    docs: Sequence[Document],
    mode: SelfPairMode,
    *,
    span_words: int = 30,
    valid_share: float = 0.0,
    seed: int = 0,
    unshared: bool = False,
) -> SelfPairs:
    """One pair per document that allows one; a seeded `valid_share` of them validates.

    The validation documents must be left out of training altogether (`held_out`): each document is
    the positive of its own query only, so one kept in training only as a negative is a document the
    model learns to bury, and validation would measure exactly that.
    """
    if mode not in SELF_PAIR_MODES:
        raise ValueError(f"unknown self-pair mode '{mode}' (choose from {', '.join(SELF_PAIR_MODES)})")
    rng = np.random.default_rng(seed)
    queries: list[Query] = []
    train: list[Pair] = []
    valid: list[Pair] = []
    doc_texts: list[str] = []
    held_out: set[str] = set()
    skipped = 0
    for doc in docs:
        cut = _training_cut(doc, mode, span_words, rng, unshared)
        if cut is None:
            skipped += 1
            doc_texts.append(doc.full_text)
            continue
        query, rest = cut
        pair = Pair(f"self:{doc.id}", doc.id)
        queries.append(Query(pair.query_id, query))
        if rng.random() < valid_share:
            valid.append(pair)
            held_out.add(doc.id)
        else:
            train.append(pair)
        doc_texts.append(rest)
    return SelfPairs(queries, train, valid, doc_texts, frozenset(held_out), skipped)
