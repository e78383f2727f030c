"""A static sentence encoder distilled from a transformer one (issue 64, "a static option, measured").

Every token of the source tokenizer's vocabulary goes through the source encoder as a one-token text ("[CLS] t
[SEP]", batched), and the token's own output state (`token`), or the mean of the text's three states, the source's
pooling before its normalisation (`mean`), becomes the token's row of a table. Where asked, the rows are centred and
rotated onto their principal axes (PCA, to fewer dimensions), and each is scaled by a SIF weight a / (a + p(t)), so
that frequent pieces count less in a text's mean (Arora et al. 2017). p(t) is Zipf's law over the vocabulary's order
(`zipf`: BERT's word-piece vocabulary lists its words roughly by frequency) or counted over texts given (`counts`:
a corpus), or every weight is 1 (`none`).

The table is written as an ONNX graph with the exported encoder's inputs and output (training.sentence_export):
input_ids, attention_mask[, token_type_ids] → token states [batch, tokens, dims] = table[input_ids] × mask. The
tokenizer is the source's, and `SentenceEncoder` mean-pools and normalises the states as it does a transformer's, so
a text's vector is the normalised mean of its tokens' rows, and a bundle, the service's sentence cache and hybrid
fusion run it unchanged. [CLS] and [SEP] get zero rows: a text's mean reads its own tokens only (normalised, the
count that divides it does not matter). The spec says `kind` static and what it came from (`StaticInfo`).

    python -m training.static_distil M DIR [--rows token] [--dims 0] [--weighting zipf] [--sif 1e-5]

writes DIR (model.onnx, tokenizer.json, sentence.json), which `ssi train --encoder DIR` takes as it is.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import typer

from ssi.bundle import is_bundle
from ssi.sentence import (
    MODEL_FILE,
    SPEC_FILE,
    TOKENIZER_FILE,
    SentenceEncoder,
    SentenceError,
    SentenceSpec,
    StaticInfo,
    read_spec,
    write_spec,
)
from training.sentence_export import cosines, encoder_of_bundle, prepare_encoder

Weighting = Literal["zipf", "counts", "none"]
WEIGHTINGS: tuple[Weighting, ...] = ("zipf", "counts", "none")
Rows = Literal["token", "mean"]
ROWS: tuple[Rows, ...] = ("token", "mean")
OUTPUT = "token_states"  # the exported transformer's output name (training.sentence_export.OUTPUT)
TABLE = "token_table"
# The SIF constant a of a / (a + p), and the other defaults of `write_static`: the best on SciFact's validation claims
# in the day-one hybrid (docs/results/static-encoder.md).
SIF = 1e-5
BATCH = 512  # one-token texts per run of the source encoder: all of one length, so no padding
# The graph's vectors against the numpy reference (the table's rows, masked mean, normalised): float32 sums only.
MIN_COSINE = 0.9999
PROBES = (
    "hello",
    "Vitamin D deficiency raises the risk of multiple sclerosis in adults.",
    "antidisestablishmentarianism?! 42 µg/ml",
    "what causes tides",
)


@dataclass(frozen=True)
class TokenTable:
    """Each vocabulary token's vectors as the source encoder gives its one-token text: what PCA and weighting start
    from (computed once, `token_table`; the distillation's only costly step)."""

    token: np.ndarray  # float32 [vocabulary, E]: the token's own output state
    mean: np.ndarray  # float32 [vocabulary, E]: the mean of the one-token text's states ([CLS] and [SEP] with it)
    special: np.ndarray  # int64: the ids the tokenizer puts around every text ([CLS], [SEP]): zero rows
    spec: SentenceSpec  # the source's
    tokenizer: str  # the source's tokenizer.json, its text


def source_encoder_folder(source: Path, scratch: Path, threads: int) -> Path:
    """A folder SentenceEncoder runs: `source` itself (an encoder folder, as `ssi train --encoder` writes one into a
    bundle), a hybrid bundle's encoder, or a sentence-transformers model folder exported and checked first."""
    if (source / SPEC_FILE).is_file():
        return source
    out = scratch / "source"
    if is_bundle(source):
        encoder_of_bundle(source, out, "fp32")
    else:
        prepare_encoder(source, out, threads=threads, int8=False)
    return out


def _around(encoder: SentenceEncoder) -> tuple[list[int], list[int]]:
    """The ids the tokenizer adds before and after a text (its post-processor's template)."""
    found = encoder.tokenizer.encode("hello", add_special_tokens=True)
    marks = found.special_tokens_mask
    first = marks.index(0) if 0 in marks else len(marks)
    last = len(marks) - marks[::-1].index(0) if 0 in marks else len(marks)
    return list(found.ids[:first]), list(found.ids[last:])


def token_table(source: Path | str, threads: int = 2) -> TokenTable:
    """Pass every token of `source`'s vocabulary through its fp32 graph as a one-token text."""
    source = Path(source)
    with tempfile.TemporaryDirectory(prefix="ssi-static-") as scratch:
        folder = source_encoder_folder(source, Path(scratch), threads)
        encoder = SentenceEncoder(folder, threads, precision="fp32")
        before, after = _around(encoder)
        size = encoder.tokenizer.get_vocab_size(with_added_tokens=True)
        dims = encoder.spec.dims
        token, mean = np.zeros((size, dims), dtype=np.float32), np.zeros((size, dims), dtype=np.float32)
        for start in range(0, size, BATCH):
            ids = np.asarray([[*before, t, *after] for t in range(start, min(size, start + BATCH))], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            if "token_type_ids" in encoder.spec.inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            (states,) = encoder.session.run([encoder.output], feed)  # [batch, tokens, E]
            token[start : start + len(ids)] = states[:, len(before)]
            mean[start : start + len(ids)] = states.mean(axis=1)
        tokenizer = (folder / TOKENIZER_FILE).read_text(encoding="utf-8")
        special = np.unique(np.asarray(before + after, dtype=np.int64))
        return TokenTable(token, mean, special, encoder.spec, tokenizer)


def principal_axes(vectors: np.ndarray, dims: int, skip: np.ndarray) -> np.ndarray:
    """The rows centred and projected onto their `dims` principal axes (the rows in `skip` left out of the mean and
    the covariance): float32 [rows, dims]."""
    kept = np.ones(len(vectors), dtype=bool)
    kept[skip] = False
    data = vectors.astype(np.float64)
    centre = data[kept].mean(axis=0)
    centred = data - centre
    values, axes = np.linalg.eigh(centred[kept].T @ centred[kept])
    top = axes[:, np.argsort(values)[::-1][:dims]]
    return (centred @ top).astype(np.float32)


def zipf_probabilities(size: int) -> np.ndarray:
    """p(t) ∝ 1/(rank + 1), the rank being the token's id: Zipf's law over a vocabulary listed by frequency."""
    inverse = 1.0 / np.arange(2, size + 2, dtype=np.float64)
    return inverse / inverse.sum()


def counted_probabilities(tokenizer: str, texts: Sequence[str], size: int, max_length: int) -> np.ndarray:
    """p(t): each token's share of the tokens of `texts` (cut as the encoder cuts them); 0 for one never seen."""
    from tokenizers import Tokenizer

    reader = Tokenizer.from_str(tokenizer)
    reader.no_padding()
    reader.enable_truncation(max_length)
    counts = np.zeros(size, dtype=np.float64)
    for start in range(0, len(texts), 1024):
        for found in reader.encode_batch(list(texts[start : start + 1024]), add_special_tokens=False):
            np.add.at(counts, np.asarray(found.ids, dtype=np.int64), 1.0)
    return counts / max(counts.sum(), 1.0)


def sif_weights(probabilities: np.ndarray, a: float = SIF) -> np.ndarray:
    """a / (a + p(t)): near 1 for rare tokens, small for the most frequent."""
    return (a / (a + probabilities)).astype(np.float32)


def static_graph(table: np.ndarray, inputs: Sequence[str]) -> bytes:
    """The serialized ONNX graph: `inputs` (input_ids and attention_mask first; token_type_ids, where listed, taken
    and unused as a static table has no segments) → token states table[input_ids] × attention_mask."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if "input_ids" not in inputs or "attention_mask" not in inputs:
        raise SentenceError(f"a static graph needs input_ids and attention_mask among the inputs, not {list(inputs)}")
    nodes = [
        helper.make_node("Gather", [TABLE, "input_ids"], ["rows"], axis=0),  # [batch, tokens, dims]
        helper.make_node("Cast", ["attention_mask"], ["mask_float"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_float", "last_axis"], ["mask_3d"]),  # [batch, tokens, 1]
        helper.make_node("Mul", ["rows", "mask_3d"], [OUTPUT]),
    ]
    graph = helper.make_graph(
        nodes=nodes,
        name="ssi_static_sentence_encoder",
        inputs=[helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"]) for name in inputs],
        outputs=[helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", "tokens", table.shape[1]])],
        initializer=[
            numpy_helper.from_array(np.ascontiguousarray(table, dtype=np.float32), name=TABLE),
            numpy_helper.from_array(np.asarray([-1], dtype=np.int64), name="last_axis"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ssi-training")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def reference_vectors(encoder: SentenceEncoder, table: np.ndarray, texts: Sequence[str]) -> np.ndarray:
    """What the static graph should give, in numpy: each text's rows of the table, averaged, to unit length."""
    rows = np.stack([table[np.asarray(ids, dtype=np.int64)].mean(axis=0) for ids in encoder.token_ids(texts)])
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def static_table(
    vectors: np.ndarray, special: np.ndarray, dims: int | None, probabilities: np.ndarray | None, sif: float = SIF
) -> np.ndarray:
    """The table: `vectors` through PCA to `dims` (None: as they came), each row times a / (a + p) where
    `probabilities` are given, the `special` rows zero; float32 [rows, dims]."""
    table = vectors if dims is None else principal_axes(vectors, dims, special)
    if probabilities is not None:
        table = table * sif_weights(probabilities, sif)[:, None]
    table = np.array(table, dtype=np.float32)
    table[special] = 0.0
    return table


def write_static(
    tokens: TokenTable,
    out: Path | str,
    *,
    rows: Rows = "token",
    dims: int | None = None,
    weighting: Weighting = "zipf",
    sif: float = SIF,
    texts: Sequence[str] = (),
    max_length: int | None = None,
    name: str | None = None,
    texts_from: str = "",
) -> SentenceSpec:
    """Write `out/` (model.onnx, tokenizer.json, sentence.json) from the token table's `rows`: PCA to `dims` (None:
    none, the vectors as they came), each row times its SIF weight (`counts`: p counted over `texts`), texts cut at
    `max_length` tokens (None: the source's); `texts_from` names the texts in the spec. The graph is checked against
    the numpy reference on PROBES; λ unset."""
    out = Path(out)
    vectors = tokens.token if rows == "token" else tokens.mean
    size, source_dims = vectors.shape
    if dims is not None and not 1 <= dims <= source_dims:
        raise SentenceError(f"--dims {dims}: between 1 and the source's {source_dims}")
    if weighting == "counts" and not texts:
        raise SentenceError("the counts weighting needs texts to count tokens over (a corpus)")
    max_length = max_length or tokens.spec.max_length
    p = None
    where = "none"
    if weighting != "none":
        counted = weighting == "counts"
        p = counted_probabilities(tokens.tokenizer, texts, size, max_length) if counted else zipf_probabilities(size)
        where = f"token counts over {len(texts):,} texts" if counted else "Zipf's law over the vocabulary's order"
        where += f" ({texts_from})" if counted and texts_from else ""
        where = f"SIF a/(a + p(token)), a = {sif:g}, p: {where}"
    table = static_table(vectors, tokens.special, dims, p, sif)
    info = StaticInfo(
        source=tokens.spec.name, source_dims=source_dims, tokens=size, rows=rows, pca=dims is not None, weighting=where
    )
    return write_table(out, table, tokens, info, max_length=max_length, name=name)


def write_table(
    out: Path | str, table: np.ndarray, tokens: TokenTable, info: StaticInfo, *, max_length: int, name: str | None
) -> SentenceSpec:
    """Write `out/` (model.onnx, tokenizer.json, sentence.json): `table` as the static graph with `tokens`' tokenizer
    and inputs, checked against the numpy reference on PROBES; λ unset."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MODEL_FILE).write_bytes(static_graph(table, tokens.spec.inputs))
    (out / TOKENIZER_FILE).write_text(tokens.tokenizer, encoding="utf-8")
    spec = SentenceSpec(
        name=name or f"static, distilled from {tokens.spec.name}",
        pooling="mean",
        normalize=True,
        max_length=max_length,
        dims=int(table.shape[1]),
        weight=0.0,
        weight_rule="unset",
        license=tokens.spec.license,
        source=tokens.spec.source,
        inputs=list(tokens.spec.inputs),
        kind="static",
        static=info,
    )
    write_spec(out, spec)
    encoder = SentenceEncoder(out, 1)
    worst = float(cosines(encoder.encode(list(PROBES)), reference_vectors(encoder, table, PROBES)).min())
    if worst < MIN_COSINE:
        raise SentenceError(f"{out / MODEL_FILE}: its vectors differ from the table's own (cosine {worst:.6f})")
    return read_spec(out)


def main(
    source: Annotated[
        Path, typer.Argument(help="A sentence-transformers model folder, encoder folder or hybrid bundle.")
    ],
    out: Annotated[Path, typer.Argument(help="The static encoder folder to write.")],
    rows: Annotated[str, typer.Option(help="token (the token's own state) or mean (the one-token text's).")] = "token",
    dims: Annotated[int, typer.Option(help="PCA to this many dimensions (0: no PCA).")] = 0,
    weighting: Annotated[str, typer.Option(help="zipf, counts (over --corpus) or none.")] = "zipf",
    sif: Annotated[float, typer.Option(help="The SIF constant a of a / (a + p).")] = SIF,
    corpus: Annotated[Path | None, typer.Option(help="Corpus JSONL whose token counts give p (counts).")] = None,
    max_length: Annotated[int, typer.Option(help="Tokens a text is cut at (0: the source's).")] = 0,
    threads: Annotated[int, typer.Option(help="Threads of the source encoder.")] = 2,
) -> None:
    """Distil SOURCE into the static encoder folder OUT, which `ssi train --encoder OUT` takes as it is."""
    from ssi.corpus import read_corpus

    if weighting not in WEIGHTINGS or rows not in ROWS:
        raise typer.BadParameter(f"--weighting: one of {', '.join(WEIGHTINGS)}; --rows: one of {', '.join(ROWS)}")
    texts = [d.full_text for d in read_corpus(corpus)] if corpus is not None else []
    try:
        spec = write_static(
            token_table(source, threads), out, rows=rows, dims=dims or None, weighting=weighting,  # type: ignore[arg-type]
            sif=sif, texts=texts, max_length=max_length or None, texts_from=corpus.name if corpus else "",
        )  # fmt: skip
    except SentenceError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(f"{out}: {spec.name}, {spec.dims} dimensions, {spec.static.tokens if spec.static else 0:,} tokens")


if __name__ == "__main__":
    typer.run(main)
