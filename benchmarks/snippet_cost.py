"""What a hit list's snippets cost: the service's word search against a regex compiled per query (the rule it
replaced, kept as `service.snippet._regex`), in the same process, on the benchmark workload.

Queries are 5 random words of random 60-word Wikispeedia passages (stop words included); each query's hits are
10 passages, those holding one of its words first (what a ranking returns). Also the worst case the fallback
bounds: 32 single letters and bigrams against an 8 KB window of English.

    python -m benchmarks.snippet_cost --corpus ../shared/data/wikispeedia/docs.jsonl.gz
"""

from __future__ import annotations

import gzip
import json
import random
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from service.snippet import _regex, make_snippet, query_pattern
from ssi.tokenize import tokenize

WIDTH, SCAN = 200, 8192  # the service's defaults (SSI_SNIPPET_CHARS, SSI_SNIPPET_SCAN_CHARS)


def _passages(corpus: Path, count: int, words: int = 60) -> list[str]:
    out: list[str] = []
    with gzip.open(corpus, "rt", encoding="utf-8") as handle:
        for line in handle:
            tokens = json.loads(line)["text"].split()
            out.extend(" ".join(tokens[i : i + words]) for i in range(0, len(tokens) - words, words))
            if len(out) >= count:
                break
    return out[:count]


def _regex_hit(text: str, pattern: re.Pattern[str]) -> str:
    """The replaced rule's work on a hit: search the lowered window, then cut the excerpt (here at the opening:
    the same slicing work as around a match)."""
    pattern.search(text[:SCAN].lower())
    return make_snippet(text, None, WIDTH, SCAN)


def _timed(work: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(
    corpus: Annotated[Path, typer.Option(help="A JSONL(.gz) corpus with 'text'.")] = Path(
        "../shared/data/wikispeedia/docs.jsonl.gz"
    ),
    queries: Annotated[int, typer.Option(help="Queries (each with 10 hits).")] = 1000,
    rounds: Annotated[int, typer.Option(help="Timed rounds; the median is reported.")] = 5,
    seed: Annotated[int, typer.Option(help="Workload seed.")] = 0,
) -> None:
    rng = random.Random(seed)
    texts = _passages(corpus, 20_000)
    cases = []
    for _ in range(queries):
        words = tokenize(" ".join(rng.sample(rng.choice(texts).split(), 5)))
        holding = [t for t in rng.sample(texts, 300) if set(tokenize(t)) & set(words)]
        cases.append((words, (holding + rng.sample(texts, 10))[:10]))

    def service() -> None:
        for words, hits in cases:
            found = query_pattern(words, 32)
            for hit in hits:
                make_snippet(hit, found, WIDTH, SCAN)

    def compiled() -> None:
        for words, hits in cases:
            pattern = _regex.__wrapped__(frozenset(words), False)  # type: ignore[attr-defined]  # no cache
            for hit in hits:
                _regex_hit(hit, pattern)

    baseline = _timed(compiled, rounds)
    ours = _timed(service, rounds)
    long_text = " ".join(texts)[:SCAN]
    letters = list("bcdefghjklmnopqrstuvwxyz") + ["th", "er", "on", "an", "re", "he", "in", "ed"]
    found = query_pattern(letters, 32)
    worst_ours = _timed(lambda: make_snippet(long_text, found, WIDTH, SCAN), 50)
    worst_pattern = _regex.__wrapped__(frozenset(letters), False)  # type: ignore[attr-defined]
    worst_base = _timed(lambda: _regex_hit(long_text, worst_pattern), 50)
    typer.echo(
        f"{queries} queries x 10 hits: regex compiled per query {baseline / queries * 1e3:.3f} ms a query, "
        f"the service {ours / queries * 1e3:.3f} ms ({baseline / ours:.2f}x faster)"
    )
    typer.echo(
        f"worst case (32 letters/bigrams, 8 KB window): regex {worst_base * 1e6:.0f} us a hit, "
        f"the service {worst_ours * 1e6:.0f} us ({worst_ours / worst_base:.2f}x the regex's time)"
    )


if __name__ == "__main__":
    typer.run(main)
