"""A synthetic click log: pages and adverts drawn from shared latent topics, clicks with position bias.

What it models (the content-matching setting of the SSI paper, section 4.3): a page is a long text
about a main topic and a secondary one; an advert is a few words from its topic's *own* advert
vocabulary, disjoint from the page vocabulary but for a rare shared word, so a good match usually
shares no word with the page and tf-idf has little to go on. Each page is shown in `slates` slates
of `slate_size` adverts (half from its topics, half at random, in random order); a slot at position
p is looked at with probability 1/p (position bias) and, when looked at, clicked with a probability
set by the topics (main, secondary, other: the noise). Everything is drawn from one seed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.click_logs import SPLITS, write_jsonl, write_split
from training.clicks import Impression

CONSONANTS = "bcdfgklmnprstvz"
VOWELS = "aeiou"
CATEGORIES = 5  # topics are grouped into this many advert categories (the metadata a filter uses)


@dataclass(frozen=True)
class SyntheticSpec:
    pages: int = 5000
    ads: int = 1000
    topics: int = 50
    page_words: int = 40  # page vocabulary of each topic
    ad_words: int = 12  # advert vocabulary of each topic (disjoint from the pages')
    background_words: int = 400  # page words of no topic
    generic_ad_words: int = 20  # advert words of no topic ("offer", "sale"...)
    page_length: int = 100  # words of a page
    shared_rate: float = 0.02  # share of a page's words drawn from its topic's advert vocabulary
    slates: int = 2  # slates shown per page
    slate_size: int = 4
    click_main: float = 0.7  # click probability of an examined advert of the page's main topic
    click_secondary: float = 0.3
    click_noise: float = 0.03  # ... of any other advert
    valid_share: float = 0.1
    test_share: float = 0.1
    seed: int = 0


def pseudo_words(rng: np.random.Generator, count: int, taken: set[str]) -> list[str]:
    """`count` new pronounceable words (3 syllables), none in `taken` (which they are added to)."""
    words: list[str] = []
    while len(words) < count:
        word = "".join(rng.choice(list(CONSONANTS)) + rng.choice(list(VOWELS)) for _ in range(3))
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


def _zipf(n: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1)
    return weights / weights.sum()


@dataclass(frozen=True)
class _Draw:
    """One word of `words` drawn by probabilities `p`: the draw `rng.choice(words, p=p)` makes (the same single
    uniform number against the normalised cumulative sum, so the same word from the same stream), without
    converting and checking the list and `p` again on each of a log's ~150,000 draws (12 s of CPU for 1,500 pages)."""

    words: list[str]
    cdf: np.ndarray

    @classmethod
    def of(cls, words: list[str], p: np.ndarray) -> _Draw:
        cdf = p.cumsum()
        return cls(words, cdf / cdf[-1])

    def __call__(self, rng: np.random.Generator) -> str:
        return self.words[int(self.cdf.searchsorted(rng.random(), side="right"))]


def generate(spec: SyntheticSpec, out: Path) -> dict[str, Any]:
    """Write the log folder (training.click_logs layout) and return what was written."""
    if spec.topics < 2 or spec.ads < spec.topics or spec.slate_size < 1:
        raise ValueError("need at least 2 topics, an advert per topic and a slate of at least 1")
    rng = np.random.default_rng(spec.seed)
    taken: set[str] = set()
    page_vocab = [pseudo_words(rng, spec.page_words, taken) for _ in range(spec.topics)]
    ad_vocab = [pseudo_words(rng, spec.ad_words, taken) for _ in range(spec.topics)]
    background = pseudo_words(rng, spec.background_words, taken)
    generic = pseudo_words(rng, spec.generic_ad_words, taken)
    p_page, p_ad, p_bg, p_gen = (_zipf(n) for n in (spec.page_words, spec.ad_words, len(background), len(generic)))
    page_word = [_Draw.of(words, p_page) for words in page_vocab]
    ad_word = [_Draw.of(words, p_ad) for words in ad_vocab]
    background_word, generic_word = _Draw.of(background, p_bg), _Draw.of(generic, p_gen)

    ad_topic = rng.permutation(np.arange(spec.ads) % spec.topics)
    ads_of_topic = [np.flatnonzero(ad_topic == t) for t in range(spec.topics)]
    ads: list[dict[str, Any]] = []
    for a in range(spec.ads):
        topic = int(ad_topic[a])
        n = int(rng.integers(4, 9))
        own = rng.random(n) < 0.75
        words = [ad_word[topic](rng) if mine else generic_word(rng) for mine in own]
        ads.append(
            {
                "id": f"ad-{a:05d}",
                "title": " ".join(words[:2]),
                "text": " ".join(words[2:]),
                "topic": topic,
                "category": f"category-{topic % CATEGORIES}",
                "advertiser": f"advertiser-{int(rng.integers(0, 50)):02d}",
                "active": bool(rng.random() < 0.95),
                "budget": bool(rng.random() < 0.9),
            }
        )

    pages: list[dict[str, Any]] = []
    impressions: list[list[Impression]] = []
    for p in range(spec.pages):
        main, secondary = (int(t) for t in rng.choice(spec.topics, size=2, replace=False))
        source = rng.choice(4, size=spec.page_length, p=[0.55, 0.15, 0.28, 0.02])
        draws = (page_word[main], page_word[secondary], background_word, ad_word[main])
        words = [draws[s](rng) for s in source]
        page_id = f"page-{p:05d}"
        pages.append({"id": page_id, "text": " ".join(words), "topic": main, "secondary": secondary})
        shown: list[Impression] = []
        for _ in range(spec.slates):
            slate = []
            for _slot in range(spec.slate_size):
                draw = rng.random()
                pool = ads_of_topic[main] if draw < 0.35 else ads_of_topic[secondary] if draw < 0.5 else None
                slate.append(int(rng.choice(pool)) if pool is not None else int(rng.integers(spec.ads)))
            for position, a in enumerate(rng.permutation(slate), start=1):
                topic = int(ad_topic[a])
                like = spec.click_main if topic == main else spec.click_secondary if topic == secondary else 0.0
                like = max(like, spec.click_noise)
                clicked = bool(rng.random() < 1.0 / position and rng.random() < like)
                shown.append(Impression(page_id, f"ad-{int(a):05d}", position, clicked))
        impressions.append(shown)

    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "ads.jsonl", ads)
    write_jsonl(out / "pages.jsonl", pages)
    order = rng.permutation(spec.pages)
    n_valid, n_test = round(spec.valid_share * spec.pages), round(spec.test_share * spec.pages)
    parts = {"valid": order[:n_valid], "test": order[n_valid : n_valid + n_test], "train": order[n_valid + n_test :]}
    written = {
        split: write_split(out, split, [i for p in sorted(parts[split].tolist()) for i in impressions[p]])
        for split in SPLITS
    }
    summary = {"kind": "synthetic", "spec": asdict(spec), "pages": spec.pages, "ads": spec.ads, "splits": written}
    write_jsonl(out / "log.json", [summary])
    return summary
