"""Click logs as training pairs: (page, clicked advert), the content-matching task of the SSI paper.

A click log has one impression per line: the page the advert was shown on, the advert, its position
in the slate (1 = top) and whether it was clicked. Two formats:

- JSONL: `{"page": "<page id>", "ad": "<ad id>", "position": 1, "clicked": true}`; `page_id`/`ad_id`
  are accepted too, and `page_text` instead of a page id gives the page inline (its id is then
  `text:<sha1 of the text>`, so the same text on several lines is one page);
- TSV: `page_id<TAB>ad_id<TAB>position<TAB>clicked` (clicked 0/1), header optional.

Adverts are the documents (`--corpus`) and pages the queries (`--pages`, a JSONL of `id`, optional
`title`, `text`). Only clicked impressions become pairs; `clicked_position=1` keeps only clicks at
the top of the slate, as the paper does against position bias (a lower slot is seen less, so its
clicks say more about attention than about the match). Every other advert is a negative, sampled by
the trainer like any other document.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ssi.corpus import DataFileError, iter_corpus, numbered_lines
from ssi.records import Pair, Query
from training.data import file_fingerprint
from training.splits import split_by_query


@dataclass(frozen=True, slots=True)
class Impression:
    """One advert shown on one page: where, whether it was clicked."""

    page_id: str
    ad_id: str
    position: int
    clicked: bool


@dataclass
class ClickLog:
    """The impressions of a log and the pages it gave inline (`page_text`)."""

    impressions: list[Impression]
    inline_pages: dict[str, str] = field(default_factory=dict)

    def pairs(self, clicked_position: int | None = None) -> list[Pair]:
        """(page, clicked ad) pairs, in log order, optionally only clicks at `clicked_position`."""
        return [
            Pair(i.page_id, i.ad_id)
            for i in self.impressions
            if i.clicked and (clicked_position is None or i.position == clicked_position)
        ]

    def counts(self, clicked_position: int | None = None) -> dict[str, int]:
        clicks = sum(i.clicked for i in self.impressions)
        return {"impressions": len(self.impressions), "clicks": clicks, "pairs": len(self.pairs(clicked_position))}


def _flag(path: Path, number: int, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if value in (0, 1, "0", "1", "true", "false"):
        return value in (1, "1", "true")
    raise DataFileError(path, number, f"'clicked' must be true/false or 0/1, got {value!r}")


def _position(path: Path, number: int, value: object) -> int:
    try:
        position = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise DataFileError(path, number, f"'position' must be a positive integer, got {value!r}") from None
    if position < 1 or str(position) != str(value).strip():
        raise DataFileError(path, number, f"'position' must be a positive integer, got {value!r}")
    return position


def _text_id(text: str) -> str:
    return "text:" + hashlib.sha1(text.encode("utf-8")).hexdigest()


def read_click_log(path: Path | str) -> ClickLog:
    """A JSONL or TSV click log (told apart by its first character); a malformed line names itself."""
    path = Path(path)
    log = ClickLog([])
    for number, line in numbered_lines(path):
        if line.lstrip().startswith("{"):
            log.impressions.append(_json_impression(path, number, line, log.inline_pages))
            continue
        parts = line.split("\t")
        if number == 1 and parts[0].strip().lower() in {"page", "page_id"}:
            continue
        if len(parts) != 4 or not parts[0] or not parts[1]:
            raise DataFileError(path, number, "expected 'page_id<TAB>ad_id<TAB>position<TAB>clicked' or JSON")
        log.impressions.append(
            Impression(parts[0], parts[1], _position(path, number, parts[2]), _flag(path, number, parts[3].strip()))
        )
    if not log.impressions:
        raise DataFileError(path, None, "the click log holds no impressions")
    return log


def _json_impression(path: Path, number: int, line: str, inline: dict[str, str]) -> Impression:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataFileError(path, number, f"not valid JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise DataFileError(path, number, "expected a JSON object")
    page = record.get("page", record.get("page_id"))
    text = record.get("page_text")
    if (page is None) == (text is None):
        raise DataFileError(path, number, "give exactly one of 'page' (an id) and 'page_text'")
    if text is not None:
        if not isinstance(text, str) or not text.strip():
            raise DataFileError(path, number, "'page_text' must be a non-blank string")
        page = _text_id(text)
        inline[page] = text
    ad = record.get("ad", record.get("ad_id"))
    if not isinstance(page, str) or not page or not isinstance(ad, str) or not ad:
        raise DataFileError(path, number, "'page' and 'ad' must be non-empty strings")
    return Impression(
        page,
        ad,
        _position(path, number, record.get("position", 1)),
        _flag(path, number, record.get("clicked", True)),
    )


@dataclass
class ClickPairs:
    """What the trainer takes from click logs: the pages (queries) and the train/validation pairs."""

    pages: list[Query]
    train: list[Pair]
    valid: list[Pair]
    fingerprint: dict[str, str]
    counts: dict[str, dict[str, int]]


def load_click_pairs(
    clicks: Path,
    *,
    pages: Path | None,
    valid_clicks: Path | None = None,
    clicked_position: int | None = None,
    valid_share: float = 0.1,
    split_seed: int = 0,
) -> ClickPairs:
    """Pages and pairs from click logs; without `valid_clicks`, `valid_share` of the pages are held out.

    The position restriction applies to training pairs only: validation counts every click.
    """
    train_log = read_click_log(clicks)
    valid_log = read_click_log(valid_clicks) if valid_clicks is not None else None
    texts: dict[str, str] = {}
    if pages is not None:
        for doc in iter_corpus(pages):
            if doc.id in texts:
                raise DataFileError(pages, None, f"duplicate page id '{doc.id}'")
            texts[doc.id] = doc.full_text
    for log in (train_log, valid_log):
        if log is not None:
            texts.update(log.inline_pages)
    if not texts:
        raise DataFileError(clicks, None, "no page texts: give --pages or 'page_text' in the click log")
    train = train_log.pairs(clicked_position)
    if valid_log is not None:
        valid = valid_log.pairs()
    elif valid_share > 0:
        train, valid = split_by_query(train, valid_share, split_seed)
    else:
        valid = []
    fingerprint = {"clicks": file_fingerprint(clicks)}
    if pages is not None:
        fingerprint["pages"] = file_fingerprint(pages)
    if valid_clicks is not None:
        fingerprint["valid_clicks"] = file_fingerprint(valid_clicks)
    counts = {"train": train_log.counts(clicked_position)}
    if valid_log is not None:
        counts["valid"] = valid_log.counts()
    return ClickPairs(
        pages=[Query(page_id, text) for page_id, text in texts.items()],
        train=train,
        valid=valid,
        fingerprint=fingerprint,
        counts=counts,
    )
