"""`ssi train --encoder DIR`: a sentence-transformers model folder made into a bundle's `sentence/` part (or a hybrid
bundle's own encoder taken as it is: `encoder_of_bundle`).

The folder is the one a user has (sentence-transformers' layout: config.json, tokenizer.json,
modules.json, 1_Pooling/config.json, sentence_bert_config.json, the weights). Its graph is taken as it
is where the folder holds one (onnx/model.onnx or model.onnx), else exported once here from the
weights with PyTorch and `transformers` (torch.onnx's dynamo exporter; the older TorchScript one
traced MiniLM's attention mask wrongly: cosines of 0.85–0.95 with the model's own output). Either
way the result is checked against a reference forward pass of the same weights in PyTorch on a few
texts, and refused below a cosine of MIN_COSINE for any of them.

Beside it goes an int8 graph (`quantize_encoder`: onnxruntime's dynamic quantization, per channel, its activations then
scaled token by token: training.token_quantization), checked against the fp32 graph on INT8_PROBES: kept, and its
least and mean cosine recorded in the spec (`int8`), only if no text's vector falls below MIN_INT8_COSINE. Quantized
here, once, not at every start of a server.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ssi.bundle import load_bundle, sha256_file
from ssi.sentence import (
    INT8_MODEL_FILE,
    MODEL_FILE,
    QUERY_INT8_MODEL_FILE,
    QUERY_MODEL_FILE,
    SPEC_FILE,
    TOKENIZER_FILE,
    Int8Check,
    Precision,
    QueryAgreement,
    QueryGraph,
    SentenceEncoder,
    SentenceError,
    SentenceSpec,
    files_of,
    pool,
    read_spec,
    write_spec,
)
from training.token_quantization import quantize_by_token

log = logging.getLogger(__name__)

MIN_COSINE = 0.999
Attention = Literal["eager", "sdpa"]  # transformers' attn_implementation the graph is exported from (prepare_encoder)
# The least cosine of a text's int8 vector to its fp32 one. all-MiniLM-L6-v2 quantized per channel: 0.987–0.999 on 150
# SciFact claims and 100 abstracts, 92 % of each claim's top 10 kept, and SciFact validation NDCG@10 within 0.005 of
# fp32 (docs/results/hybrid.md, "int8"); per tensor: 0.93–0.96, 81 % of the top 10 kept. 0.97 lies between the two:
# it refuses a quantization as lossy as the per-tensor one and keeps the per-channel one with room for other texts.
MIN_INT8_COSINE = 0.97
INT8_METHOD = (
    "onnxruntime.quantization.quantize_dynamic, per channel, int8 weights; "
    "uint8 activations, a scale per token row (training.token_quantization)"
)
OUTPUT = "token_states"
# Texts the export is checked on: short and long, punctuation, digits, a word the vocabulary splits.
PROBES = (
    "hello",
    "Vitamin D deficiency raises the risk of multiple sclerosis in adults.",
    "A long text, cut at the maximum length: "
    + "the spindle checkpoint arrests mitosis until every kinetochore is attached. " * 40,
    "antidisestablishmentarianism?! 42 µg/ml",
)
# The int8 graph's check: the probes above, and queries and passages of the lengths served.
INT8_PROBES = (
    *PROBES,
    "what causes tides",
    "best way to proof bread dough overnight in the fridge",
    "Does aspirin reduce the risk of colorectal cancer in people over fifty?",
    "The harbour pilot boarded the container ship two miles offshore and steered it past the breakwater.",
    "Mitochondrial DNA is inherited from the mother; mutations in it cause a range of rare disorders.",
    "The violinist retuned between movements because the hall's humidity had changed during the interval.",
    "Kepler's third law relates a planet's orbital period to the semi-major axis of its orbit around the star. "
    "Measured periods of the moons of Jupiter confirmed it within a few percent, long before Newton explained why.",
    "Protein folding is determined largely by the amino-acid sequence, although chaperones assist many proteins "
    "in the crowded cell, and misfolded ones are tagged for degradation by the proteasome.",
)
# The query graph's check against the document graph: texts of the lengths queries have.
QUERY_PROBES = (
    "hello",
    "what causes tides",
    "cheap flights to lisbon in march",
    "best way to proof bread dough overnight in the fridge",
    "Does aspirin reduce the risk of colorectal cancer in people over fifty?",
    "Vitamin D deficiency raises the risk of multiple sclerosis in adults.",
    "symptoms of iron deficiency",
    "who painted the ceiling of the sistine chapel",
    "python read a csv file into a dataframe",
    "Antibiotic resistance spreads between bacteria through plasmids.",
    "how long do tortoises live",
    "the treaty that ended the thirty years war",
)
# The least mean cosine of the query graph's vectors to the document graph's on QUERY_PROBES. all-MiniLM-L6-v2's first
# two layers: as cut, 0.27; distilled on SciFact's sentences for 10 and 20 minutes (training.shallow_encoder), 0.56 and
# 0.62 on these general queries and 0.76 and 0.83 on SciFact's claims, the texts they were distilled for, keeping
# 93 % and 97 % of the whole model's day-one hybrid gain there (docs/results/shallow-encoder.md). The bound lies
# between the cut and the distilled: it refuses a graph that was not distilled towards this encoder.
MIN_QUERY_AGREEMENT = 0.4
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "onnx/model.onnx", "model.onnx")


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SentenceError(f"{path}: not readable JSON ({exc})") from None


def _modules(folder: Path) -> list[dict[str, Any]]:
    path = folder / "modules.json"
    return _json(path) if path.is_file() else [{"path": "", "type": "sentence_transformers.models.Transformer"}]


def read_pooling(folder: Path) -> tuple[str, bool]:
    """(pooling, normalize) as the folder's modules.json and its Pooling module's config.json say."""
    modules = _modules(folder)
    normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules)
    pooling_dirs = [m.get("path", "") for m in modules if str(m.get("type", "")).endswith("Pooling")]
    if not pooling_dirs:
        return "mean", normalize
    config = _json(folder / pooling_dirs[0] / "config.json")
    if config.get("pooling_mode_cls_token"):
        return "cls", normalize
    if config.get("pooling_mode_max_tokens"):
        return "max", normalize
    if config.get("pooling_mode_mean_tokens", True):
        return "mean", normalize
    raise SentenceError(f"{folder / pooling_dirs[0] / 'config.json'}: a pooling mode this build does not run")


def read_max_length(folder: Path) -> int:
    """Tokens per text: sentence-transformers' max_seq_length, else the tokenizer's, at most BERT's 512."""
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        path = folder / name
        value = _json(path).get(key) if path.is_file() else None
        if isinstance(value, int):
            return min(value, 512)
    return 512


def read_license(folder: Path) -> str | None:
    """The model card's `license:` line (its README's front matter), if there is one."""
    card = folder / "README.md"
    if not card.is_file():
        return None
    found = re.search(r"^license:\s*(\S+)\s*$", card.read_text(encoding="utf-8", errors="replace"), re.MULTILINE)
    return found.group(1) if found else None


def read_name(folder: Path) -> str:
    """The model card's title (its README's first `# ` heading), else the folder's name."""
    card = folder / "README.md"
    if card.is_file():
        found = re.search(r"^# (\S.*)$", card.read_text(encoding="utf-8", errors="replace"), re.MULTILINE)
        if found:
            return found.group(1).strip()
    return folder.name


def _given_graph(folder: Path) -> Path | None:
    for name in ("onnx/model.onnx", "model.onnx"):
        if (folder / name).is_file():
            return folder / name
    return None


def _reference_model(folder: Path, attention: Attention = "eager") -> Any:
    """The folder's transformer in PyTorch, its attention written out as `attention` says: the graph exported from it
    takes that form (`prepare_encoder`)."""
    try:
        from transformers import AutoModel
    except ImportError as exc:
        raise SentenceError(
            f"{folder}: exporting or checking a sentence encoder needs the `encoder-export` extra ({exc})"
        ) from None
    return AutoModel.from_pretrained(str(folder), attn_implementation=attention).eval()


def _export(model: Any, out: Path) -> list[str]:
    """The transformer as an ONNX graph of token states; returns its inputs."""
    import torch

    class States(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    ids = torch.ones((2, 8), dtype=torch.long)
    mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
    inputs = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {name: {0: "batch", 1: "tokens"} for name in inputs}
    torch.onnx.export(
        States(model),
        (ids, mask, torch.zeros_like(ids)),
        str(out),
        input_names=inputs,
        output_names=[OUTPUT],
        dynamic_axes={**axes, OUTPUT: {0: "batch", 1: "tokens"}},
        dynamo=True,
        external_data=False,
        verbose=False,
    )
    return inputs


def reference_vectors(model: Any, encoder: SentenceEncoder, texts: tuple[str, ...] | list[str]) -> np.ndarray:
    """e(text) by PyTorch on the folder's own weights, tokenized as the encoder tokenizes."""
    import torch

    out = []
    with torch.no_grad():
        for ids in encoder.token_ids(texts):
            tensor = torch.tensor([ids], dtype=torch.long)
            mask = torch.ones_like(tensor)
            states = model(input_ids=tensor, attention_mask=mask, token_type_ids=torch.zeros_like(tensor))
            out.append(pool(states.last_hidden_state.numpy(), mask.numpy(), encoder.spec.pooling)[0])
    rows = np.asarray(out, dtype=np.float32)
    if encoder.spec.normalize:
        rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    return rows


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(axis=1) / np.maximum(norms, 1e-12)


class _NoPreprocessingAdvice(logging.Filter):
    """Drops onnxruntime's root-logger advice to optimize the graph before quantizing it, printed on every quantization:
    tried here (onnxruntime.transformers' BERT optimizer fused LayerNorm and GELU in the exported graph, not attention),
    it left a 20-word query's int8 CPU time as it was (3.18 against 3.21 ms p50, one run of 150 queries)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing" not in record.getMessage()


def quantize_encoder(out: Path, texts: Sequence[str] = INT8_PROBES, threads: int = 1) -> Int8Check | None:
    """Write `out/model.int8.onnx` from `out/model.onnx` (per channel, activations per token) and check it against it
    on `texts`; the check, or None (and no file) where some text's cosine is below MIN_INT8_COSINE, or where the graph
    cannot be quantized so or run (a graph of another shape, an onnxruntime without opset 21): logged, fp32 serves."""
    target = out / INT8_MODEL_FILE
    quiet = _NoPreprocessingAdvice()
    logging.getLogger().addFilter(quiet)
    try:
        quantize_by_token(out / MODEL_FILE, target)
        int8 = SentenceEncoder(out, threads, graph=target).encode(list(texts))  # not yet in the spec: run by path
    except (ValueError, SentenceError) as exc:
        log.warning("%s: no int8 graph (%s)", out, exc)
        target.unlink(missing_ok=True)
        return None
    finally:
        logging.getLogger().removeFilter(quiet)
    fp32 = SentenceEncoder(out, threads, precision="fp32").encode(list(texts))
    found = cosines(int8, fp32)
    if float(found.min()) < MIN_INT8_COSINE:
        target.unlink()
        return None
    return Int8Check(
        method=INT8_METHOD,
        activations="token",
        texts=len(found),
        min_cosine=round(float(found.min()), 6),
        mean_cosine=round(float(found.mean()), 6),
        bound=MIN_INT8_COSINE,
    )


def prepare_encoder(
    folder: Path | str,
    out: Path | str,
    *,
    threads: int = 1,
    name: str | None = None,
    precision: Precision | None = None,
    int8: bool = True,
    attention: Attention = "eager",
) -> SentenceSpec:
    """Write `out/` (model.onnx, model.int8.onnx, tokenizer.json, sentence.json) from a model folder; λ is 0 until set,
    and `precision` is the graph that serves unless the server asks for the other (None: int8 where its graph passed
    its check, else fp32: SciFact validation NDCG@10 with all-MiniLM-L6-v2's int8 graph was within 0.003 of fp32's,
    docs/results/hybrid.md). `int8=False` writes no int8 graph (a caller that checks only the fp32 export).
    `attention`: how the exported graph computes attention. "eager" (the default) is the textbook mask, softmax and
    product; "sdpa", PyTorch's fused attention, which the exporter writes out with an IsNaN and a Where over every
    head's scores (for rows with nothing to attend to): on 60-word passages its int8 graph encoded ×1.87 as fast as
    the sdpa fp32 graph, the eager one's ×2.03 (benchmarks/encoder_peak.py, docs/results/hybrid.md, "The graph's
    attention"). Same vectors either way.

    Raises `SentenceError` naming the file for a folder it cannot use, when the graph's vectors differ
    from the reference forward pass (cosine below MIN_COSINE on any probe text), or when int8 is asked and its graph
    failed its check (an int8 graph that fails is left out otherwise, and the bundle serves fp32).
    """
    folder, out = Path(folder), Path(out)
    if not folder.is_dir():
        raise SentenceError(f"{folder}: no such model folder")
    if not (folder / TOKENIZER_FILE).is_file():
        raise SentenceError(f"{folder}: no {TOKENIZER_FILE} (a sentence-transformers model folder has one)")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / TOKENIZER_FILE, out / TOKENIZER_FILE)
    pooling, normalize = read_pooling(folder)
    model = _reference_model(folder, attention)
    given = _given_graph(folder)
    if given is not None:
        shutil.copyfile(given, out / MODEL_FILE)
        import onnxruntime as ort

        inputs = [i.name for i in ort.InferenceSession(str(given), providers=["CPUExecutionProvider"]).get_inputs()]
    else:
        with tempfile.TemporaryDirectory() as scratch:
            exported = Path(scratch) / MODEL_FILE
            inputs = _export(model, exported)
            shutil.move(str(exported), out / MODEL_FILE)
    names = (*WEIGHT_FILES, TOKENIZER_FILE, "config.json")
    source = {name: sha256_file(folder / name) for name in names if (folder / name).is_file()}
    spec = SentenceSpec(
        name=name or read_name(folder),
        pooling=pooling,  # type: ignore[arg-type]
        normalize=normalize,
        max_length=read_max_length(folder),
        dims=int(model.config.hidden_size),
        weight=0.0,
        weight_rule="unset",
        license=read_license(folder),
        source=source,
        inputs=inputs,
    )
    write_spec(out, spec)
    encoder = SentenceEncoder(out, threads)
    got = encoder.encode(list(PROBES))
    want = reference_vectors(model, encoder, PROBES)
    worst = float(cosines(got, want).min())
    if worst < MIN_COSINE:
        raise SentenceError(
            f"{folder}: the ONNX graph's vectors differ from the model's own (cosine {worst:.4f} < {MIN_COSINE})"
        )
    spec = spec.model_copy(update={"int8": quantize_encoder(out, threads=threads) if int8 else None})
    write_spec(out, spec)
    return served_as(out, precision or ("int8" if spec.int8 is not None else "fp32"))


def served_as(out: Path, precision: Precision) -> SentenceSpec:
    """`out/`'s spec with `precision` as the graph that serves (written); `SentenceError` for int8 without its graph."""
    spec = read_spec(out)
    if precision == "int8" and spec.int8 is None:
        raise SentenceError(
            f"{out}: no int8 graph (its vectors were further than a cosine of {MIN_INT8_COSINE} from the fp32 graph's, "
            "or the encoder is a bundle's written before int8 graphs were): use --encoder-precision fp32"
        )
    spec = spec.model_copy(update={"precision": precision})
    write_spec(out, spec)
    return spec


def add_query_graph(out: Path | str, folder: Path | str, *, threads: int = 1) -> SentenceSpec:
    """Put a query graph into the encoder folder `out/` (prepare_encoder's) from a model folder distilled towards its
    encoder, such as training.shallow_encoder writes: exported and checked against its own forward pass as the
    document graph is (its int8 graph likewise), and refused where its tokenizer, inputs, pooling or E differ from the
    document graph's, or where its vectors of QUERY_PROBES are on average further than MIN_QUERY_AGREEMENT from the
    document graph's (a cosine): queries are scored against documents the other graph encoded."""
    out, folder = Path(out), Path(folder)
    spec = read_spec(out)
    if not (folder / TOKENIZER_FILE).is_file():
        raise SentenceError(f"{folder}: no {TOKENIZER_FILE} (a sentence-transformers model folder has one)")
    if sha256_file(folder / TOKENIZER_FILE) != sha256_file(out / TOKENIZER_FILE):
        raise SentenceError(f"{folder}: its tokenizer is not the encoder's ({spec.name}): a query graph shares it")
    encoder = SentenceEncoder(out, threads, precision="fp32")
    # Before any cut (`ssi train --sentence-dims`): a bundle's projection is applied to either graph's pooled vectors.
    document = encoder.encode(list(QUERY_PROBES), cut=False)
    if is_encoder_folder(folder):
        return _add_static_query_graph(out, folder, spec, document, encoder.pooled_dims, threads)
    # First by the folder's own forward pass, before the export (tens of seconds) is paid for.
    _check_agreement(
        folder, spec, cosines(reference_vectors(_reference_model(folder), encoder, QUERY_PROBES), document)
    )
    with tempfile.TemporaryDirectory() as scratch:
        made = prepare_encoder(folder, Path(scratch), threads=threads, precision="fp32")
        mine = spec.model_dump(include={"pooling", "normalize", "max_length", "dims", "inputs"}) | {
            "dims": encoder.pooled_dims
        }
        theirs = made.model_dump(include=set(mine))
        if mine != theirs:
            differ = ", ".join(f"{k} {theirs[k]} against {mine[k]}" for k in mine if mine[k] != theirs[k])
            raise SentenceError(f"{folder}: a query graph must encode as the encoder does ({differ})")
        query = SentenceEncoder(Path(scratch), threads, precision="fp32").encode(list(QUERY_PROBES))
        found = _check_agreement(folder, spec, cosines(query, document))
        shutil.copyfile(Path(scratch) / MODEL_FILE, out / QUERY_MODEL_FILE)
        if made.int8 is not None:
            shutil.copyfile(Path(scratch) / INT8_MODEL_FILE, out / QUERY_INT8_MODEL_FILE)
    agreement = _agreement(found)
    names = (*WEIGHT_FILES, "config.json")
    source = {name: sha256_file(folder / name) for name in names if (folder / name).is_file()}
    graph = QueryGraph(name=made.name, source=source, agreement=agreement, int8=made.int8)
    spec = spec.model_copy(update={"query": graph})
    write_spec(out, spec)
    return spec


def _add_static_query_graph(
    out: Path, folder: Path, spec: SentenceSpec, document: np.ndarray, dims: int, threads: int
) -> SentenceSpec:
    """add_query_graph for a static encoder folder (training.static_query): its one-Gather graph copied as it is (it
    has no weights to export, nothing to quantize), refused unless it encodes as the encoder does and agrees with it."""
    theirs = read_spec(folder)
    if theirs.kind != "static":
        raise SentenceError(
            f"{folder}: an encoder folder of kind {theirs.kind}; a query graph is a model folder to export, or a "
            "static one (python -m training.static_query)"
        )
    mine = spec.model_dump(include={"pooling", "normalize", "dims", "inputs"}) | {"dims": dims}
    found_spec = theirs.model_dump(include=set(mine))
    if mine != found_spec:
        differ = ", ".join(f"{k} {found_spec[k]} against {mine[k]}" for k in mine if mine[k] != found_spec[k])
        raise SentenceError(f"{folder}: a query graph must encode as the encoder does ({differ})")
    query = SentenceEncoder(folder, threads, precision="fp32").encode(list(QUERY_PROBES))
    found = _check_agreement(folder, spec, cosines(query, document))
    shutil.copyfile(folder / MODEL_FILE, out / QUERY_MODEL_FILE)
    agreement = _agreement(found)
    source = {name: sha256_file(folder / name) for name in (MODEL_FILE, SPEC_FILE)}
    graph = QueryGraph(name=theirs.name, source=source, agreement=agreement, kind="static")
    spec = spec.model_copy(update={"query": graph})
    write_spec(out, spec)
    return spec


def _agreement(found: np.ndarray) -> QueryAgreement:
    """What the spec records of the probes' cosines to the encoder's vectors (`_check_agreement`'s)."""
    return QueryAgreement(
        texts=len(found),
        min_cosine=round(float(found.min()), 6),
        mean_cosine=round(float(found.mean()), 6),
        bound=MIN_QUERY_AGREEMENT,
    )


def _check_agreement(folder: Path, spec: SentenceSpec, found: np.ndarray) -> np.ndarray:
    """`found` (each probe's cosine to the encoder's vector) as it is; SentenceError where its mean is below
    MIN_QUERY_AGREEMENT."""
    if float(found.mean()) < MIN_QUERY_AGREEMENT:
        raise SentenceError(
            f"{folder}: its query vectors are far from those of the encoder, {spec.name} (mean cosine "
            f"{found.mean():.3f} < {MIN_QUERY_AGREEMENT} on {len(found)} queries): distil it towards that "
            "encoder first (python -m training.shallow_encoder)"
        )
    return found


def encoder_of_bundle(bundle_dir: Path | str, out: Path | str, precision: Precision | None = None) -> SentenceSpec:
    """Write `out/` from a hybrid bundle's own encoder (its `sentence/` part), λ unset: what a click-learning round
    trains its candidates with, so that they keep the served bundle's encoder.

    The bundle is loaded first, which checks every file against its manifest's sha256; a bundle holds the graph, not
    the weights, so nothing here can be fine-tuned. `precision`: the graph that serves (None: the bundle's). Raises
    `SentenceError` for a bundle without an encoder, or int8 asked of one without an int8 graph.
    """
    bundle = load_bundle(Path(bundle_dir))
    if bundle.sentence is None:
        raise SentenceError(f"{bundle_dir}: a bundle without a sentence encoder (not a hybrid bundle)")
    return encoder_of_folder(bundle.sentence_path, out, precision)


def is_encoder_folder(folder: Path) -> bool:
    """Whether `folder` is an encoder folder as a bundle's `sentence/` holds one (its spec, sentence.json), such as
    training.static_distil writes, rather than a model folder."""
    return (folder / SPEC_FILE).is_file()


def encoder_of_folder(folder: Path | str, out: Path | str, precision: Precision | None = None) -> SentenceSpec:
    """Copy an encoder folder (`is_encoder_folder`) to `out/` as it is, λ unset; `precision` as `encoder_of_bundle`.
    Its graph is run once on PROBES, so one onnxruntime cannot load, or whose inputs differ from its spec's, is refused
    here rather than after training."""
    folder, out = Path(folder), Path(out)
    spec = read_spec(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name in files_of(spec):
        if not (folder / name).is_file():
            raise SentenceError(f"{folder}: no {name} beside its {SPEC_FILE}")
        shutil.copyfile(folder / name, out / name)
    write_spec(out, spec.model_copy(update={"weight": 0.0, "weight_rule": "unset"}))
    spec = served_as(out, precision or spec.precision)
    SentenceEncoder(out).encode(list(PROBES[:2]))
    return spec
