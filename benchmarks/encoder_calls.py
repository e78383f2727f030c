"""How many padded tokens an onnxruntime call of the sentence encoder should hold (ssi.sentence_calls.TOKENS_PER_CALL),
measured in one process against the way before 2026-12-04 (32 texts a call, whatever their length).

all-MiniLM-L6-v2 exported as `ssi train --encoder` exports it, fp32 and int8, one session of one thread each (a
first start runs one such session a core, ssi.sentence.bulk_encoder), encodes three workloads of Wikispeedia text:
20-word texts of random words drawn from the passages (stop words included, like queries and titles), 60-word
passages, and 250-word pages (cut at the encoder's 256 tokens). Each workload is encoded with calls planned for each
token bound in `--tokens` (at most 64 texts a call) and with 32 texts a call, the parts taking turns in each of
`--rounds`; texts are tokenized beforehand, so only the graph's calls are timed.

    python -m benchmarks.encoder_calls --out runs/encoder-calls.json   # about 19 minutes
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from benchmarks.encoder_peak import _by_before, interleaved_seconds
from benchmarks.replication_faults import write_figures
from benchmarks.snippet_cost import _passages
from ssi.sentence import SentenceEncoder, int8_instructions
from training.pretrained import NAME, checked_minilm_folder
from training.sentence_export import prepare_encoder


def _workloads(corpus: Path, documents: int) -> dict[str, list[str]]:
    passages = _passages(corpus, documents)
    rng = random.Random(0)
    words = " ".join(passages).split()
    return {
        "random_20_words": [" ".join(rng.choice(words) for _ in range(20)) for _ in range(3 * documents)],
        "passages_60_words": passages,
        "pages_250_words": _passages(corpus, max(1, documents // 3), 250),
    }


def main(
    corpus: Annotated[Path, typer.Option(help="Wikispeedia docs (JSONL.gz with 'text').")] = Path(
        "../shared/data/wikispeedia/docs.jsonl.gz"
    ),
    documents: Annotated[
        int, typer.Option(help="60-word passages a round (3× as many short texts, ⅓ as many pages).")
    ] = 300,
    tokens: Annotated[str, typer.Option(help="Token bounds to try, comma-separated.")] = "128,256,384,512,1024,2048",
    rounds: Annotated[int, typer.Option(help="Rounds, the parts taking turns.")] = 3,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    bounds = [int(t) for t in tokens.split(",")]
    workloads = _workloads(corpus, documents)
    figures: dict[str, Any] = {"model": NAME, "cpu_int8_instructions": int8_instructions(), "threads": 1}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "sentence"
        prepare_encoder(checked_minilm_folder(), folder, name=NAME, threads=2)
        for precision in ("fp32", "int8"):
            encoder = SentenceEncoder(folder, 1, precision)  # type: ignore[arg-type]
            for workload, texts in workloads.items():
                ids = encoder.token_ids(texts)
                parts: dict[str, Callable[[], Any]] = {"32_texts_a_call": _by_before(encoder, ids)}
                parts.update({f"{bound}_tokens": _planned(encoder, ids, bound) for bound in bounds})
                rates = _rates(parts, len(texts), rounds)
                figures[f"{precision}_{workload}"] = {
                    "mean_tokens": round(float(np.mean([len(row) for row in ids])), 1),
                    "texts_per_second": rates,
                    "over_32_texts_a_call": {
                        name: round(rate / rates["32_texts_a_call"], 3) for name, rate in rates.items()
                    },
                }
    write_figures(figures, out)


def _planned(encoder: SentenceEncoder, ids: list[list[int]], bound: int) -> Callable[[], np.ndarray]:
    return lambda: encoder.encode_ids(ids, tokens=bound)


def _rates(parts: dict[str, Callable[[], Any]], texts: int, rounds: int) -> dict[str, float]:
    """Texts a second of each part, every part warmed first and then taking its turn in each round (reversed every
    other round)."""
    for run in parts.values():
        run()
    spent = interleaved_seconds(parts, rounds)
    return {name: round(rounds * texts / took, 1) for name, took in spent.items()}


if __name__ == "__main__":
    typer.run(main)
