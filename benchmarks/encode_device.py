"""Documents encoded a second on the GPU against the CPU (SSI_ENCODE_DEVICE, ssi.sentence.providers_for), in one
process: all-MiniLM-L6-v2 exported as `ssi train --encoder` exports it, 60-word passages of Wikispeedia text, each
device's graph (fp32, and int8 where asked) timed over the same passages, turn by turn, and their vectors compared.
On a machine whose onnxruntime has no CUDA provider (the onnxruntime package, not onnxruntime-gpu) it says so and
times the CPU alone. The GPU check (scripts/gpu_check.sh) runs it.

    python -m benchmarks.encode_device --out runs/encode-device.json
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from benchmarks.replication_faults import write_figures
from benchmarks.snippet_cost import _passages
from ssi.sentence import PRECISIONS, SentenceEncoder, available_devices
from training.pretrained import NAME, checked_minilm_folder
from training.sentence_export import cosines, prepare_encoder

ROUNDS = 3


def main(
    corpus: Annotated[Path, typer.Option(help="Wikispeedia docs (JSONL.gz with 'text').")] = Path(
        "../shared/data/wikispeedia/docs.jsonl.gz"
    ),
    documents: Annotated[int, typer.Option(help="Passages encoded a round.")] = 4000,
    threads: Annotated[int, typer.Option(help="The CPU encoder's threads (default: every core).")] = 0,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    threads = threads or (os.cpu_count() or 1)
    passages = _passages(corpus, documents)
    figures: dict[str, object] = {"model": NAME, "passages": len(passages), "cpu_threads": threads}
    figures["devices"] = list(available_devices())
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "sentence"
        prepare_encoder(checked_minilm_folder(), folder, name=NAME, threads=min(threads, 4))
        for precision in PRECISIONS:
            encoders = {"cpu": SentenceEncoder(folder, threads, precision)}
            if "cuda" in available_devices():
                encoders["cuda"] = SentenceEncoder(folder, 1, precision, device="cuda")
            encoders = {name: e for name, e in encoders.items() if e.device == name}  # a GPU that failed to start
            vectors = {name: e.encode(passages[:64]) for name, e in encoders.items()}  # warm
            spent = dict.fromkeys(encoders, 0.0)
            for r in range(ROUNDS):
                for name in encoders if r % 2 == 0 else list(encoders)[::-1]:
                    started = time.perf_counter()
                    vectors[name] = encoders[name].encode(passages)
                    spent[name] += time.perf_counter() - started
            rates = {name: round(ROUNDS * len(passages) / spent[name], 1) for name in encoders}
            found: dict[str, object] = {f"{name}_passages_per_second": rate for name, rate in rates.items()}
            if "cuda" in rates:
                found["cuda_over_cpu"] = round(rates["cuda"] / rates["cpu"], 2)
                agree = cosines(vectors["cuda"], vectors["cpu"])
                found["cuda_cpu_cosine_min"] = round(float(agree.min()), 6)
                found["cuda_cpu_max_abs_difference"] = float(np.abs(vectors["cuda"] - vectors["cpu"]).max())
                found["minutes_for_100k_passages_cuda"] = round(100_000 / rates["cuda"] / 60.0, 1)
            found["minutes_for_100k_passages_cpu"] = round(100_000 / rates["cpu"] / 60.0, 1)
            figures[precision] = found
    if "cuda" not in available_devices():
        figures["note"] = "this onnxruntime has no CUDA provider (pip install onnxruntime-gpu): the CPU alone was timed"
    write_figures(figures, out)


if __name__ == "__main__":
    typer.run(main)
