"""How near the sentence encoder's document encoding runs to this CPU's own rate of matrix products, and what the
graph's form of attention changes, in one process: what is left for software to win on the same model before only
fewer operations or more cores (a GPU, a cluster's nodes) can make documents faster.

The encoder is all-MiniLM-L6-v2 exported as `ssi train --encoder` exports it, twice: with PyTorch's fused attention
("sdpa", which the exporter writes out with an IsNaN and a Where over every head's scores: the graph exported before
2026-12-04, "today's fp32") and written out plainly ("eager", the default since), each fp32 and int8 (activations scaled
token by token, training.token_quantization), encoding passages of `--words` words of Wikispeedia text on `--threads`
threads with the service's session options (no memory arena, no spinning), 32 texts a call as before 2026-12-04; beside
them the eager graph's int8 as onnxruntime's dynamic quantization makes it (one activation scale a batch, as bundles
before 2026-12-04 hold it) and its fp32 graph with onnxruntime's memory arena on; and the eager graphs with calls
planned by tokens (ssi.sentence_calls), on one session of `--threads` threads and on a one-thread session a core
(ssi.sentence.bulk_encoder: how a first start encodes its documents since). The first ALONE passages are also encoded
one at a time, to show whether a text's vector depends on its batch. Useful work is counted from the model's shape: per
layer and per token 2·(4h² + 2hi) floating-point operations in the dense products and 4nh in attention over a text of n
tokens (padding not counted). The references are one onnxruntime MatMul of the model's widest shape ([tokens of a batch,
h] × [h, i]) on the same threads, fp32 and quantized as onnxruntime's dynamic quantization does: what this CPU's kernels
give the encoder's largest products, its best case. Every part takes its turn in each of `--rounds`.

    python -m benchmarks.encoder_peak --out runs/encoder-peak.json
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from benchmarks.replication_faults import write_figures
from benchmarks.snippet_cost import _passages
from ssi.sentence import (
    INT8_MODEL_FILE,
    MODEL_FILE,
    SentenceEncoder,
    int8_instructions,
    read_spec,
    session_options,
    write_spec,
)
from training.pretrained import NAME, checked_minilm_folder
from training.sentence_export import Attention, cosines, prepare_encoder

ALONE = 200  # passages also encoded one at a time: does a text's vector depend on its batch?
BEFORE = 32  # texts an onnxruntime call held before 2026-12-04 (ssi.sentence_calls plans calls by tokens since)


def useful_flops(lengths: list[int], layers: int, hidden: int, intermediate: int) -> float:
    """Floating-point operations a BERT encoder's dense products and attention spend on texts of these token
    lengths, padding left out (multiply-add counted as two)."""
    tokens = float(sum(lengths))
    dense = 2.0 * (4 * hidden * hidden + 2 * hidden * intermediate) * tokens
    attention = sum(4.0 * n * n * hidden for n in lengths)
    return layers * (dense + attention)


def _matmul_graph(path: Path, rows: int, inner: int, cols: int) -> dict[str, np.ndarray]:
    """One MatMul [rows, inner] × [inner, cols] written to `path` as an ONNX graph; returns its feed."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((inner, cols)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, inner])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return {"x": rng.standard_normal((rows, inner)).astype(np.float32)}


def _session(graph: Path, threads: int, arena: bool) -> Any:
    """An onnxruntime session with the encoder's own settings (ssi.sentence.session_options), the arena as asked."""
    import onnxruntime as ort

    options = session_options(threads, arena=arena)
    return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


def main(
    corpus: Annotated[Path, typer.Option(help="Wikispeedia docs (JSONL.gz with 'text').")] = Path(
        "../shared/data/wikispeedia/docs.jsonl.gz"
    ),
    documents: Annotated[int, typer.Option(help="Passages encoded a round.")] = 1000,
    words: Annotated[int, typer.Option(help="Words a passage (250: cut at the encoder's 256 tokens).")] = 60,
    threads: Annotated[int, typer.Option(help="Threads for every part (default: every core).")] = 0,
    rounds: Annotated[int, typer.Option(help="Rounds, the parts taking turns.")] = 4,
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    threads = threads or (os.cpu_count() or 1)
    passages = _passages(corpus, documents, words)
    source = checked_minilm_folder()
    with tempfile.TemporaryDirectory() as scratch:
        folders: dict[Attention, Path] = {"sdpa": Path(scratch) / "sdpa", "eager": Path(scratch) / "eager"}
        for attention, folder in folders.items():
            prepare_encoder(source, folder, name=NAME, threads=min(threads, 4), attention=attention)
        tensor = _scaled_by_tensor(folders["eager"], Path(scratch) / "eager-tensor")
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
        layers, hidden, inner = config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]
        # Calls of BEFORE texts on one session of `threads` threads, as documents were encoded before 2026-12-04
        before = {
            f"encoder_{precision}_{attention}": SentenceEncoder(folder, threads, precision)
            for attention, folder in folders.items()
            for precision in ("fp32", "int8")
        }
        before["encoder_int8_eager_scaled_by_tensor"] = SentenceEncoder(tensor, threads, "int8")
        arena = SentenceEncoder(folders["eager"], threads, "fp32")
        arena.sessions = [_session(folders["eager"] / arena.graph_file, threads, arena=True)]
        before["encoder_fp32_eager_with_arena"] = arena
        # Calls planned by tokens (ssi.sentence_calls): on that one session, and on a one-thread session a core
        # (ssi.sentence.bulk_encoder: how a first start and a training corpus are encoded since)
        planned = {
            f"encoder_{precision}_eager_{how}": SentenceEncoder(folders["eager"], each, precision, sessions=sessions)
            for precision in ("fp32", "int8")
            for how, each, sessions in (("calls_by_tokens", threads, 1), ("sessions_a_core", 1, threads))
        }
        ids = arena.token_ids(passages)
        lengths = [len(row) for row in ids]
        flops = useful_flops(lengths, layers, hidden, inner)
        mean_tokens = float(np.mean(lengths))
        rows = int(BEFORE * mean_tokens)  # a call's tokens before, as the encoder's widest product saw them
        fp32_graph, int8_graph = Path(scratch) / "matmul.onnx", Path(scratch) / "matmul.int8.onnx"
        feed = _matmul_graph(fp32_graph, rows, hidden, inner)
        quantize_dynamic(fp32_graph, int8_graph, per_channel=True, weight_type=QuantType.QInt8)  # as the encoder's
        products = {"fp32": _session(fp32_graph, threads, False), "int8": _session(int8_graph, threads, False)}
        matmul_flops = 2.0 * rows * hidden * inner
        reps = max(1, int(round(flops / matmul_flops)))  # as much work as one round of the encoder
        parts: dict[str, Callable[[], Any]] = {name: _by_before(encoder, ids) for name, encoder in before.items()}
        parts.update({name: _encoding(encoder, ids) for name, encoder in planned.items()})
        for precision, session in products.items():
            parts[f"matmul_{precision}"] = _products(session, feed, reps)
        vectors = {name: run() for name, run in parts.items()}  # warm, and the vectors compared below
        alone = {  # a text's vector encoded by itself, against within the run's batches
            name: np.vstack([before[name].encode([text]) for text in passages[:ALONE]])
            for name in ("encoder_int8_eager", "encoder_int8_eager_scaled_by_tensor", "encoder_fp32_eager")
        }
        spent = interleaved_seconds(parts, rounds)
    work = {name: rounds * (flops if name.startswith("encoder") else reps * matmul_flops) for name in parts}
    rate = {name: work[name] / spent[name] / 1e9 for name in parts}
    today = rate["encoder_fp32_sdpa"]  # the graph `ssi train --encoder` exported before the eager attention
    agree = {
        "eager_fp32_to_sdpa_fp32": cosines(vectors["encoder_fp32_eager"], vectors["encoder_fp32_sdpa"]),
        "eager_int8_to_eager_fp32": cosines(vectors["encoder_int8_eager"], vectors["encoder_fp32_eager"]),
        "int8_sessions_a_core_to_calls_of_32": cosines(
            vectors["encoder_int8_eager_sessions_a_core"], vectors["encoder_int8_eager"]
        ),
        "sdpa_int8_to_sdpa_fp32": cosines(vectors["encoder_int8_sdpa"], vectors["encoder_fp32_sdpa"]),
        "eager_int8_scaled_by_tensor_to_eager_fp32": cosines(
            vectors["encoder_int8_eager_scaled_by_tensor"], vectors["encoder_fp32_eager"]
        ),
        **{
            f"{name.removeprefix('encoder_')}_alone_to_batched": cosines(rows, vectors[name][:ALONE])
            for name, rows in alone.items()
        },
    }
    figures: dict[str, object] = {
        "model": NAME,
        "threads": threads,
        "words": words,
        "cpu_int8_instructions": int8_instructions(),
        "passages": len(passages),
        "mean_tokens": round(mean_tokens, 1),
        "gflop_per_passage": round(flops / len(passages) / 1e9, 4),
        "matmul_shape": [rows, hidden, inner],
        "passages_per_second": {
            name: round(rounds * len(passages) / spent[name], 1) for name in parts if name.startswith("encoder")
        },
        "gflops": {name: round(value, 1) for name, value in rate.items()},
        "over_todays_fp32": {name: round(value / today, 3) for name, value in rate.items()},
        "share_of_its_matmul": {
            name: round(value / rate["matmul_int8" if "int8" in name else "matmul_fp32"], 3)
            for name, value in rate.items()
            if name.startswith("encoder")
        },
        "cosines_least_mean": {
            name: [round(float(found.min()), 6), round(float(found.mean()), 6)] for name, found in agree.items()
        },
    }
    write_figures(figures, out)


def _scaled_by_tensor(folder: Path, out: Path) -> Path:
    """A copy of the encoder `folder` with its int8 graph as onnxruntime's dynamic quantization makes it (one scale for
    a batch's activations: what `ssi train --encoder` wrote before 2026-12-04), recorded so."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    shutil.copytree(folder, out, copy_function=shutil.copyfile)
    quantize_dynamic(out / MODEL_FILE, out / INT8_MODEL_FILE, per_channel=True, weight_type=QuantType.QInt8)
    spec = read_spec(out)
    assert spec.int8 is not None
    write_spec(out, spec.model_copy(update={"int8": spec.int8.model_copy(update={"activations": "tensor"})}))
    return out


def interleaved_seconds(parts: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Seconds each part took in all, every part taking its turn in each of `rounds` (reversed every other round, so
    that no part always runs after the same one)."""
    spent = dict.fromkeys(parts, 0.0)
    for r in range(rounds):
        for name in parts if r % 2 == 0 else list(parts)[::-1]:
            started = time.perf_counter()
            parts[name]()
            spent[name] += time.perf_counter() - started
    return spent


def _encoding(encoder: SentenceEncoder, ids: list[list[int]]) -> Callable[[], np.ndarray]:
    """Tokenized passages encoded as `encoder` plans its calls (and runs them on its sessions)."""
    return lambda: encoder.encode_ids(ids)


def _by_before(encoder: SentenceEncoder, ids: list[list[int]]) -> Callable[[], np.ndarray]:
    """Tokenized passages encoded BEFORE to a call, shortest first, as before 2026-12-04."""
    order = np.argsort([len(row) for row in ids], kind="stable")
    calls = [order[start : start + BEFORE] for start in range(0, len(order), BEFORE)]

    def run() -> np.ndarray:
        out = np.zeros((len(ids), encoder.dims), dtype=np.float32)
        for call in calls:
            out[call] = encoder.encode_ids([ids[i] for i in call], tokens=1 << 30)  # the call as it is
        return out

    return run


def _products(session: Any, feed: dict[str, np.ndarray], reps: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(reps):
            session.run(None, feed)

    return run


if __name__ == "__main__":
    typer.run(main)
