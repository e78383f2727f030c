"""Click logs as training pairs: (page, clicked advert), the content-matching task of the SSI paper.

A click log has one impression per line: the page the advert was shown on, the advert, its position
in the slate (1 = top) and whether it was clicked. Two formats:

- JSONL: `{"page": "<page id>", "ad": "<ad id>", "position": 1, "clicked": true}`; `page_id`/`ad_id`
  are accepted too, and `page_text` instead of a page id gives the page inline (its id is then
  `text:<sha1 of the text>`, so the same text on several lines is one page). The service's exported
  traffic log (ssi.traffic, one line per shown result) is this format too: `query` is read as
  `page_text`, `doc` as `ad`, and `impression`, `randomized` and `dwell_ms` are kept; a line that names
  its text only by hash (`query_hash`/`page_hash`: the service kept no text) cannot be featurized and is
  skipped, and counted;
- TSV: `page_id<TAB>ad_id<TAB>position<TAB>clicked` (clicked 0/1), header optional;
- the service's SQLite event store itself (ssi.traffic.is_event_store), read with ssi.traffic.read_events.

Adverts are the documents (`--corpus`) and pages the queries (`--pages`, a JSONL of `id`, optional
`title`, `text`). Only clicked impressions become pairs; `clicked_position=1` keeps only clicks at
the top of the slate, as the paper does against position bias (a lower slot is seen less, so its
clicks say more about attention than about the match); `debias` "naive" and "ips" keep every click
and weigh each pair instead (training.debias). Every other advert is a negative, sampled by the trainer
like any other document.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from ssi.corpus import DataFileError, iter_corpus, numbered_lines
from ssi.records import Pair, Query
from ssi.traffic import is_event_store, read_events
from training.data import file_fingerprint
from training.debias import (
    DEFAULT_CLIP,
    DEFAULT_RELEVANCE_FLOOR,
    WEIGHTED_MODES,
    DebiasMode,
    Propensities,
    click_weights,
    estimate_propensities,
)
from training.splits import split_by_query


@dataclass(frozen=True, slots=True)
class Impression:
    """One advert shown on one page: where, whether it was clicked (and, from the service's log, more)."""

    page_id: str
    ad_id: str
    position: int
    clicked: bool
    randomized: bool = False  # shown in a deliberately shuffled top (training.debias estimates p(r) on these)
    impression: str | None = None
    dwell_ms: float | None = None


@dataclass
class ClickLog:
    """The impressions of a log and the pages it gave inline (`page_text`)."""

    impressions: list[Impression]
    inline_pages: dict[str, str] = field(default_factory=dict)
    hashed_only: int = 0  # lines skipped: their text is a hash only (the service kept no text)

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


def _flag(path: Path, number: int, value: object, name: str = "clicked") -> bool:
    if isinstance(value, bool):
        return value
    if value in (0, 1, "0", "1", "true", "false"):
        return value in (1, "1", "true")
    raise DataFileError(path, number, f"'{name}' must be true/false or 0/1, got {value!r}")


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
    """A JSONL or TSV click log (told apart by its first character) or the service's event store.

    A malformed line names itself; lines naming their text by hash only are skipped and counted
    (`hashed_only`), and a log left with no impression at all is an error that says why.
    """
    path = Path(path)
    if is_event_store(path):
        return _store_log(path)
    log = ClickLog([])
    for number, line in numbered_lines(path):
        if line.lstrip().startswith("{"):
            impression = _json_impression(path, number, line, log.inline_pages)
            if impression is None:
                log.hashed_only += 1
            else:
                log.impressions.append(impression)
            continue
        parts = line.split("\t")
        if number == 1 and parts[0].strip().lower() in {"page", "page_id"}:
            continue
        if len(parts) != 4 or not parts[0] or not parts[1]:
            raise DataFileError(path, number, "expected 'page_id<TAB>ad_id<TAB>position<TAB>clicked' or JSON")
        log.impressions.append(
            Impression(parts[0], parts[1], _position(path, number, parts[2]), _flag(path, number, parts[3].strip()))
        )
    _check_not_empty(path, log)
    return log


def _check_not_empty(path: Path, log: ClickLog) -> None:
    if log.impressions:
        return
    if log.hashed_only:
        raise DataFileError(
            path,
            None,
            f"all {log.hashed_only} lines of the click log name their query by hash only (the service kept no "
            "text): nothing to train on; set the service to keep query texts",
        )
    raise DataFileError(path, None, "the click log holds no impressions")


def _store_log(path: Path) -> ClickLog:
    """The event store's shown results (ssi.traffic.read_events) as impressions; text-less ones counted."""
    try:
        results = list(read_events(path))
    except (ValueError, sqlite3.Error) as exc:
        raise DataFileError(path, None, f"cannot read the event store: {exc}") from None
    log = ClickLog([])
    for result in results:
        if result.text is None or not result.text.strip():
            log.hashed_only += 1
            continue
        page = _text_id(result.text)
        log.inline_pages[page] = result.text
        log.impressions.append(
            Impression(
                page, result.doc, result.position, result.clicked, result.randomized, result.impression,
                result.dwell_ms,
            )
        )  # fmt: skip
    _check_not_empty(path, log)
    return log


def _one_of(record: dict[str, object], *keys: str) -> object:
    """The value of the first key present (aliases: the service's names beside the click log's)."""
    for key in keys:
        if key in record:
            return record[key]
    return None


def _json_impression(path: Path, number: int, line: str, inline: dict[str, str]) -> Impression | None:
    """The line's impression; None where its text is a hash only (the caller counts those)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataFileError(path, number, f"not valid JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise DataFileError(path, number, "expected a JSON object")
    page = _one_of(record, "page", "page_id")
    text = _one_of(record, "page_text", "query")
    if page is None and text is None and ("query_hash" in record or "page_hash" in record):
        return None
    if (page is None) == (text is None) or ("page_text" in record and "query" in record):
        raise DataFileError(path, number, "give exactly one of 'page' (an id) and 'page_text' (or 'query')")
    if text is not None:
        if not isinstance(text, str) or not text.strip():
            raise DataFileError(path, number, "'page_text' ('query') must be a non-blank string")
        page = _text_id(text)
        inline[page] = text
    ad = _one_of(record, "ad", "ad_id", "doc")
    if not isinstance(page, str) or not page or not isinstance(ad, str) or not ad:
        raise DataFileError(path, number, "'page' and 'ad' ('doc') must be non-empty strings")
    impression = record.get("impression")
    if impression is not None and not isinstance(impression, str):
        raise DataFileError(path, number, f"'impression' must be a string, got {impression!r}")
    dwell = record.get("dwell_ms")
    if dwell is not None and (isinstance(dwell, bool) or not isinstance(dwell, int | float)):
        raise DataFileError(path, number, f"'dwell_ms' must be a number or null, got {dwell!r}")
    return Impression(
        page,
        ad,
        _position(path, number, record.get("position", 1)),
        _flag(path, number, record.get("clicked", True)),
        _flag(path, number, record.get("randomized", False), "randomized"),
        impression,
        None if dwell is None else float(dwell),
    )


@dataclass
class ClickPairs:
    """What the trainer takes from click logs: the pages (queries) and the train/validation pairs.

    `train_weights` (with debias "naive" or "ips"): one weight per training pair, in order; None: unweighted.
    `notes`: what the training output prints of it (skipped lines, propensities, weights).
    """

    pages: list[Query]
    train: list[Pair]
    valid: list[Pair]
    fingerprint: dict[str, str]
    counts: dict[str, dict[str, int]]
    train_weights: list[float] | None = None
    propensities: Propensities | None = None
    notes: list[str] = field(default_factory=list)


def load_click_pairs(
    clicks: Path,
    *,
    pages: Path | None,
    valid_clicks: Path | None = None,
    clicked_position: int | None = None,
    valid_share: float = 0.1,
    split_seed: int = 0,
    debias: DebiasMode | None = None,
    propensity_clip: float = DEFAULT_CLIP,
    require_texts: bool = True,
    relevance_floor: float = DEFAULT_RELEVANCE_FLOOR,
) -> ClickPairs:
    """Pages and pairs from click logs; without `valid_clicks`, `valid_share` of the pages are held out.

    The position restriction applies to training pairs only: validation counts every click.
    `debias` None or "top": one unweighted pair per (kept) click, as before; "naive"/"ips": each clicked pair
    once, weighted (training.debias). `require_texts=False`: the pages may be named by ids another source
    (BEIR --queries) gives texts for.
    """
    if debias in WEIGHTED_MODES and clicked_position is not None:
        raise ValueError(
            f"--clicked-position keeps the clicks of one position: it goes with --debias top, not {debias}"
        )
    if debias == "top" and clicked_position is None:
        clicked_position = 1
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
    if not texts and require_texts:
        raise DataFileError(clicks, None, "no page texts: give --pages or 'page_text' in the click log")
    notes = [
        f"{path}: {log.hashed_only} lines skipped, their query named by hash only (the service kept no text)"
        for path, log in ((clicks, train_log), (valid_clicks, valid_log))
        if log is not None and log.hashed_only
    ]
    propensities = None
    weights: list[float] | None = None
    if debias in WEIGHTED_MODES:
        if debias in ("ips", "pbm"):
            propensities = estimate_propensities(train_log.impressions)
            notes.append(propensities.describe())
        weighted = click_weights(train_log.impressions, debias, propensities, propensity_clip, relevance_floor)
        notes.append(weighted.describe(debias, propensity_clip))
        train, weights = weighted.pairs, weighted.weights
    else:
        train = train_log.pairs(clicked_position)
    n_pairs = len(train)
    if valid_log is not None:
        valid = valid_log.pairs()
    elif valid_share > 0:
        kept, valid = split_by_query(train, valid_share, split_seed)
        if weights is not None:
            held = {p.query_id for p in valid}
            weights = [w for p, w in zip(train, weights, strict=True) if p.query_id not in held]
        train = kept
    else:
        valid = []
    fingerprint = {"clicks": file_fingerprint(clicks)}
    if pages is not None:
        fingerprint["pages"] = file_fingerprint(pages)
    if valid_clicks is not None:
        fingerprint["valid_clicks"] = file_fingerprint(valid_clicks)
    counts = {"train": {**train_log.counts(clicked_position), "hashed_only": train_log.hashed_only}}
    counts["train"]["pairs"] = n_pairs  # distinct clicked pairs where weighted (duplicates merged)
    if valid_log is not None:
        counts["valid"] = {**valid_log.counts(), "hashed_only": valid_log.hashed_only}
    return ClickPairs(
        pages=[Query(page_id, text) for page_id, text in texts.items()],
        train=train,
        valid=valid,
        fingerprint=fingerprint,
        counts=counts,
        train_weights=weights,
        propensities=propensities,
        notes=notes,
    )
