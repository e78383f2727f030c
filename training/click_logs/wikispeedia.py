"""A click log from real text: Wikispeedia articles as pages, their openings as adverts, links as clicks
(`generate_from_links` does the same for any corpus with links, e.g. the demo's).

Every article is a page (its title and whole text). Every article is also an "advert": its title plus
its first sentence, cut to 25 words, so adverts are a few words against pages of ~900, as in
content matching. A link page → article is a click on that article's advert at position 1 (the
links carry no slate, so there is no position bias to undo). The train links are the training
clicks, the validation links the held-out ones; the test links are held back by the data set.
An advert's category is the article's first subject (from categories.tsv.gz).
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Any

from ssi.corpus import read_corpus, read_pairs
from ssi.records import Document
from training.click_logs import write_jsonl, write_split
from training.clicks import Impression

AD_WORDS = 25
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
DEFINING = re.compile(r"\b(is|are|was|were)\b")


def first_sentence(doc: Document, max_words: int = AD_WORDS) -> str:
    """The article's first prose sentence (skipping infobox and caption lines), cut to `max_words` words.

    The first prose paragraph that defines (is, are, was, were in its first 30 words), else the first prose one,
    else the first; read up to the one chosen, not the whole article (4,604 articles: 3 s of CPU a log)."""
    first = prose = None
    for raw in doc.text.split("\n\n"):
        words = raw.split()
        paragraph = " ".join(words)
        first = paragraph if first is None else first
        if len(words) >= 10 and "Enlarge" not in paragraph and "." in paragraph:
            if DEFINING.search(" ".join(words[:30])):
                chosen = paragraph
                break
            prose = paragraph if prose is None else prose
    else:
        chosen = prose if prose is not None else first or ""
    sentence = SENTENCE_END.split(chosen, maxsplit=1)[0]
    return " ".join(sentence.split()[:max_words])


def read_categories(path: Path) -> dict[str, str]:
    """Article id -> its first top-level subject ('subject.Science.Biology' -> 'Science')."""
    categories: dict[str, str] = {}
    if not path.is_file():
        return categories
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            doc_id, _, category = line.rstrip("\n").partition("\t")
            parts = category.split(".")
            if doc_id and len(parts) > 1:
                categories.setdefault(doc_id, parts[1])
    return categories


def generate_from_links(
    corpus: Path, links: dict[str, Path], out: Path, categories: dict[str, str] | None = None
) -> dict[str, Any]:
    """Any corpus with links: every document a page and an advert (title + first sentence), a link a click.

    `links` maps a split name (train, valid) to its `source<TAB>target` file.
    """
    docs = read_corpus(corpus)
    categories = categories or {}
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "pages.jsonl", ({"id": d.id, "text": d.full_text} for d in docs))
    write_jsonl(
        out / "ads.jsonl",
        (
            {
                "id": d.id,
                "title": d.title,
                "text": first_sentence(d),
                "category": categories.get(d.id),
                "advertiser": f"advertiser-{zlib.crc32(d.id.encode()) % 100:02d}",
                "active": True,
                "budget": True,
            }
            for d in docs
        ),
    )
    splits = {}
    for split, path in links.items():
        impressions = [Impression(p.query_id, p.doc_id, 1, True) for p in read_pairs(path)]
        splits[split] = write_split(out, split, impressions)
    summary = {"kind": "links", "corpus": str(corpus), "pages": len(docs), "ads": len(docs), "splits": splits}
    write_jsonl(out / "log.json", [summary])
    return summary


def generate(data: Path, out: Path) -> dict[str, Any]:
    """Write the log folder (training.click_logs layout) from the Wikispeedia folder, read in place."""
    links = {split: data / f"links.{split}.tsv.gz" for split in ("train", "valid")}
    summary = generate_from_links(data / "docs.jsonl.gz", links, out, read_categories(data / "categories.tsv.gz"))
    return {**summary, "kind": "wikispeedia"}
