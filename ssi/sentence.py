"""The pre-trained sentence encoder e of a hybrid bundle: texts → unit vectors, by onnxruntime.

A hybrid bundle (ssi.hybrid) adds λ e(q)·e(d) to the form's score. Its `sentence/` folder holds what
running e needs and nothing from PyTorch:

    model.onnx      the transformer: input_ids, attention_mask (and token_type_ids where the model has
                    them) → the last hidden state [batch, tokens, E]; or, for a static encoder (spec `kind`
                    static, training.static_distil), one Gather from a table of token vectors distilled from a
                    transformer, with the same inputs and output
    model.int8.onnx the same graph with int8 weights (onnxruntime's dynamic quantization, per channel; activations
                    scaled per token since 2026-12-04, `Int8Check.activations`), where
                    `ssi train` wrote one and it passed its check against model.onnx (spec `int8`); bundles
                    written before it existed have none and serve fp32
    tokenizer.json  the model's tokenizer, run by the `tokenizers` library
    sentence.json   `SentenceSpec`: pooling and normalisation as the model's own configuration says
                    (sentence-transformers' 1_Pooling/config.json and modules.json), the maximum length
                    in tokens, E, the weight λ, and where the weights came from (sha256 of each source
                    file, license)
    query.onnx      optional (spec `query`): a smaller graph that encodes queries into the same space, such as
    query.int8.onnx the model cut to its first layers and distilled towards it (training.shallow_encoder), or a
                    static table distilled towards it (training.static_query; no int8 graph); documents are encoded
                    once by model.onnx, each query by this one (`part`), so a query costs what the small graph costs
                    while every document keeps the whole model's vector
    projection.npy  optional (spec `projection`): the graph's pooled vectors cut to fewer dimensions, both sides
                    alike: their corpus mean taken away, projected onto the corpus's leading principal axes and
                    scaled to unit length (`Projection`; `ssi train --sentence-dims`, training.sentence_projection).
                    [E₀ + 1, E] float32: the axes' rows, then minus the mean's projection; E is then the spec's dims

Which graph serves (`precision`, `served_precision`): the spec's, unless the server asks (SSI_ENCODER_PRECISION); int8
asked of a folder without the int8 graph serves fp32 and logs why, and so does the spec's int8 on a CPU without the
instructions int8 products are fast with.

Pooling runs here, in numpy, over the graph's token states, so a graph exported by `ssi train`
(training.sentence_export) and one a user brings (a model folder's onnx/model.onnx) run alike.
The `tokenizers` package is the optional `encoder` extra: a bundle without a sentence part never
imports it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ssi.forms.base import unit_length
from ssi.sentence_calls import GPU_TOKENS_PER_CALL, TOKENS_PER_CALL, plan_calls, run_calls

log = logging.getLogger(__name__)

SENTENCE_DIR = "sentence"
MODEL_FILE = "model.onnx"
INT8_MODEL_FILE = "model.int8.onnx"
TOKENIZER_FILE = "tokenizer.json"
SPEC_FILE = "sentence.json"
PROJECTION_FILE = "projection.npy"
FILES = (MODEL_FILE, TOKENIZER_FILE, SPEC_FILE)
QUERY_MODEL_FILE = "query.onnx"
QUERY_INT8_MODEL_FILE = "query.int8.onnx"

Pooling = Literal["mean", "cls", "max"]
Precision = Literal["fp32", "int8"]
# Which texts a graph encodes: documents (and queries, where the folder has no query graph) or queries.
Part = Literal["document", "query"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "int8")
# Where documents are encoded (SSI_ENCODE_DEVICE): on the CPU, on a GPU through onnxruntime's CUDA execution provider
# (the onnxruntime-gpu package), or on the GPU where that provider is there, else the CPU.
Device = Literal["cpu", "cuda", "auto"]
CUDA_PROVIDER = "CUDAExecutionProvider"
# CPU flags (/proc/cpuinfo) of the instructions onnxruntime's int8 matrix products are fast with: without any, int8
# may run no faster than fp32.
INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp")
# onnxruntime's fusion of an integer product with its scales into MatMulIntegerToFloat takes the activations' scale for
# one number: with a scale per token row (Int8Check.activations "token") it gives wrong vectors, so such a graph's
# session runs without it (the other fusions stay).
UNFUSED_FOR_TOKEN_SCALES = ["MatMulIntegerToFloatFusion"]


class Int8Check(BaseModel):
    """How the int8 graph was made and how far its vectors are from the fp32 graph's (training.sentence_export)."""

    method: str  # what quantized it (onnxruntime's function, per channel, the weights' type)
    # The activations' scale: one a batch ("tensor": onnxruntime's dynamic quantization as it comes, so a text's vector
    # moved with its batch; bundles written before 2026-12-04) or one a token row (training.token_quantization)
    activations: Literal["tensor", "token"] = "tensor"
    texts: int = Field(ge=1)  # texts compared
    min_cosine: float  # the least cosine of a text's int8 vector to its fp32 one
    mean_cosine: float
    bound: float  # the least cosine a text was allowed (training.sentence_export.MIN_INT8_COSINE)


class StaticInfo(BaseModel):
    """What a static encoder was distilled from and how (training.static_distil): its graph is a table of token vectors,
    one Gather, no transformer."""

    source: str  # the encoder whose vectors of one-token texts the table holds (its spec's name)
    source_dims: int = Field(ge=1)  # the source's E, before PCA
    tokens: int = Field(ge=1)  # rows of the table: the source tokenizer's vocabulary
    rows: str  # each token's row: its own output state in the one-token text ("token"), or the text's mean ("mean")
    pca: bool  # centred and rotated onto its principal axes (dims ≤ source_dims kept), or the vectors as they came
    weighting: str  # how each token's row was scaled (a SIF weight a/(a + p(token)) and where p came from, or none)
    # Distilled further towards the source's vectors of whole texts (training.static_query, a query graph): how; None
    # for a table of one-token texts as it came.
    distilled: str | None = None


class Projection(BaseModel):
    """The pooled vectors cut to the spec's `dims` (PROJECTION_FILE): why and how in training.sentence_projection."""

    source_dims: int = Field(ge=2)  # the graph's own E, before the cut
    documents: int = Field(ge=1)  # corpus documents the mean and axes were fitted on
    kept_variance: float  # the share of those documents' variance (about their mean) the kept axes hold
    sha256: str  # PROJECTION_FILE's


class QueryAgreement(BaseModel):
    """How close the query graph's vectors are to the document graph's for the same texts (training.sentence_export):
    its queries are scored against the document graph's vectors, so this is what the query graph keeps."""

    texts: int = Field(ge=1)  # query-length texts compared (training.sentence_export.QUERY_PROBES)
    min_cosine: float
    mean_cosine: float
    bound: float  # the least mean cosine allowed (training.sentence_export.MIN_QUERY_AGREEMENT)


class QueryGraph(BaseModel):
    """A query graph beside the document graph (QUERY_MODEL_FILE): same tokenizer, inputs, pooling and E."""

    name: str  # its model folder's name (training.sentence_export.read_name), e.g. "…, first 2 of 6 layers, distilled"
    source: dict[str, str] = Field(default_factory=dict)  # its folder's files -> sha256
    agreement: QueryAgreement
    int8: Int8Check | None = None  # its int8 graph's check against its fp32 one (QUERY_INT8_MODEL_FILE)
    # "static": a token table (training.static_query), one Gather: nothing to quantize, so no int8 graph, and its
    # fp32 graph serves queries whatever the document graph's precision.
    kind: Literal["transformer", "static"] = "transformer"


class SentenceSpec(BaseModel):
    """How to run and weigh the encoder: what `sentence.json` holds, copied into the manifest."""

    name: str  # where it came from, as the user named it (a folder's name, or a package's)
    pooling: Pooling
    normalize: bool  # the model's own configuration ends with an L2 normalisation
    max_length: int = Field(ge=2)  # tokens per text, [CLS] and [SEP] included; longer texts are cut
    dims: int = Field(ge=1)  # E
    weight: float = Field(ge=0)  # λ of λ e(q)·e(d)
    weight_rule: str  # how λ was set (ssi.hybrid / training.hybrid)
    license: str | None = None
    source: dict[str, str] = Field(default_factory=dict)  # source file -> sha256 (weights, tokenizer, config)
    inputs: list[str]  # the graph's inputs, in the order fed
    # Which graph serves unless the server asks for another (`ssi train --encoder-precision`); fp32 in every bundle
    # written before there was a choice.
    precision: Precision = "fp32"
    int8: Int8Check | None = None  # the int8 graph's check, where the folder holds one (INT8_MODEL_FILE)
    # "transformer": the model's own graph; "static": a token table distilled from one (`static` says how). Both run
    # alike: the graph gives token states, pooled here.
    kind: Literal["transformer", "static"] = "transformer"
    static: StaticInfo | None = None
    query: QueryGraph | None = None  # a smaller graph for queries (QUERY_MODEL_FILE), None: model.onnx encodes both
    projection: Projection | None = None  # the vectors cut to `dims` (PROJECTION_FILE), None: the graph's own E

    def with_weight(self, weight: float, rule: str) -> SentenceSpec:
        return self.model_copy(update={"weight": float(weight), "weight_rule": rule})


def files_of(spec: SentenceSpec) -> tuple[str, ...]:
    """The folder's files: FILES, and the int8 graph and the query graphs where the spec records them."""
    files = (*FILES, INT8_MODEL_FILE) if spec.int8 is not None else FILES
    if spec.query is not None:
        files += (QUERY_MODEL_FILE, QUERY_INT8_MODEL_FILE) if spec.query.int8 is not None else (QUERY_MODEL_FILE,)
    if spec.projection is not None:
        files += (PROJECTION_FILE,)
    return files


def model_file(precision: Precision, part: Part = "document") -> str:
    if part == "query":
        return QUERY_INT8_MODEL_FILE if precision == "int8" else QUERY_MODEL_FILE
    return INT8_MODEL_FILE if precision == "int8" else MODEL_FILE


@functools.cache
def int8_instructions() -> str | None:
    """The first of INT8_FLAGS this CPU has (/proc/cpuinfo), None where it has none or the file is not there."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.partition(":")[2].split())
    return next((flag for flag in INT8_FLAGS if flag in flags), None)


class SentenceError(ValueError):
    """The encoder folder cannot be used: which file, and why."""


def available_devices() -> tuple[str, ...]:
    """Where this onnxruntime can encode: ("cuda", "cpu") with its CUDA provider, else ("cpu",)."""
    import onnxruntime as ort

    return ("cuda", "cpu") if CUDA_PROVIDER in ort.get_available_providers() else ("cpu",)


def providers_for(device: Device) -> list[str]:
    """onnxruntime's execution providers for `device`, the CPU's last (onnxruntime runs there what the GPU's lacks);
    SentenceError for `cuda` where this onnxruntime has no CUDA provider."""
    has_cuda = "cuda" in available_devices()
    if device == "cuda" and not has_cuda:
        raise SentenceError(
            "SSI_ENCODE_DEVICE=cuda: this onnxruntime has no CUDA execution provider (install onnxruntime-gpu in "
            "place of onnxruntime, on a machine with an NVIDIA GPU and its driver), or use auto or cpu"
        )
    return [CUDA_PROVIDER, "CPUExecutionProvider"] if device != "cpu" and has_cuda else ["CPUExecutionProvider"]


def read_spec(folder: Path) -> SentenceSpec:
    path = folder / SPEC_FILE
    try:
        return SentenceSpec.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SentenceError(f"{path}: not a readable sentence encoder spec ({exc})") from None


def write_spec(folder: Path, spec: SentenceSpec) -> None:
    (folder / SPEC_FILE).write_text(spec.model_dump_json(indent=2), encoding="utf-8")


def served_precision(folder: Path, spec: SentenceSpec, asked: Precision | None) -> Precision:
    """The precision that serves: `asked`, else the spec's; int8 only where the folder has its checked graph (else fp32,
    logged). The spec's int8 on a CPU without INT8_FLAGS serves fp32, logged: there onnxruntime's int8 products run
    about as slow as fp32 (AVX2 alone: a query's encoding 0.79-0.92 of fp32's CPU, docs/results/hybrid.md) while its
    vectors move from fp32's (cosine 0.98). Int8 asked (SSI_ENCODER_PRECISION) is served there too, with a warning."""
    wanted = asked or spec.precision
    if wanted == "fp32":
        return "fp32"
    if spec.int8 is None or not (folder / INT8_MODEL_FILE).is_file():
        log.warning(
            "%s: int8 asked, but this encoder has no int8 graph (a bundle written before `ssi train` made one, or its "
            "check failed): serving fp32",
            folder,
        )
        return "fp32"
    if int8_instructions() is None:
        if asked is None:
            log.warning(
                "%s: this CPU has none of %s, without which int8 is about as slow as fp32: serving the fp32 graph "
                "(SSI_ENCODER_PRECISION=int8 serves the int8 graph anyway)",
                folder,
                "/".join(INT8_FLAGS),
            )
            return "fp32"
        log.warning(
            "%s: serving the int8 encoder on a CPU without %s: int8 may be no faster than fp32 here "
            "(SSI_ENCODER_PRECISION=fp32 serves the fp32 graph)",
            folder,
            "/".join(INT8_FLAGS),
        )
    return "int8"


def served_query_precision(folder: Path, spec: SentenceSpec, document: Precision) -> Precision:
    """The query graph's precision where the document graph serves at `document`: the same, but fp32 (logged) where
    the query graph has no int8 graph that passed its check."""
    if document == "int8" and spec.query is not None and spec.query.kind == "static":
        return "fp32"
    if document == "int8" and (spec.query is None or spec.query.int8 is None):
        log.warning("%s: the query graph has no int8 graph: queries are encoded by its fp32 graph", folder)
        return "fp32"
    return document


def pool(states: np.ndarray, mask: np.ndarray, how: Pooling) -> np.ndarray:
    """float32 [batch, E] from token states [batch, tokens, E] and the attention mask [batch, tokens]."""
    if how == "cls":
        return np.asarray(states[:, 0, :], dtype=np.float32)
    weights = mask.astype(np.float32)[:, :, None]
    if how == "max":
        return np.where(weights > 0, states, np.float32(-1e9)).max(axis=1).astype(np.float32)
    total = (states * weights).sum(axis=1, dtype=np.float32)
    return total / np.maximum(weights.sum(axis=1), np.float32(1e-9))


def session_options(threads: int, arena: bool = False) -> Any:
    """onnxruntime's options for an encoder's session: `threads` threads, no spinning between calls (a worker's other
    core serves the lexical part), and no memory arena unless asked: it kept what encoding documents' batches needed
    (1.1 GB after 20,000 passages in the worker that built the index, benchmarks/hybrid_cost.py), where a query needs
    a few MB."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_cpu_mem_arena = arena
    options.log_severity_level = 3
    return options


class SentenceEncoder:
    """e(text): the folder's graph and tokenizer; float32 rows of length E, unit length when the spec says so.

    `precision`: the graph to run (None: the spec's); int8 asked of a folder without an int8 graph runs fp32, with a
    warning, and so does `self.precision` say. `graph`: a graph file run in place of the folder's, for checking one
    before the spec records it (training.sentence_export.quantize_encoder). `device`: where it runs
    (`providers_for`); `self.device` says where it does ("cuda" or "cpu"). `part`: "query" runs the folder's query
    graph (spec `query`; SentenceError where it has none) at the precision the document graph would serve at.
    `sessions`: the graph loaded that many times, `threads` threads each, and a batch's calls run on them at once
    (ssi.sentence_calls): a first start's documents on one-thread sessions, one a core; a server's queries on one.
    Each session holds its own copy of the graph (about 23 MB int8, 90 MB fp32 for all-MiniLM-L6-v2)."""

    def __init__(
        self,
        folder: Path | str,
        threads: int = 1,
        precision: Precision | None = None,
        *,
        graph: Path | None = None,
        device: Device = "cpu",
        part: Part = "document",
        sessions: int = 1,
    ) -> None:
        folder = Path(folder)
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:  # the `encoder` extra
            raise SentenceError(
                f"{folder}: a hybrid bundle needs the `encoder` extra (pip install 'ssi-search[encoder]'): {exc}"
            ) from None
        self.folder = folder
        self.spec = read_spec(folder)
        self.part = part
        self.precision = served_precision(folder, self.spec, precision)
        if part == "query":
            if self.spec.query is None:
                raise SentenceError(f"{folder}: no query graph ({QUERY_MODEL_FILE}) in this encoder")
            self.precision = served_query_precision(folder, self.spec, self.precision)
        try:
            self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        except Exception as exc:  # tokenizers raises its own exception type
            raise SentenceError(f"{folder / TOKENIZER_FILE}: the tokenizers library cannot read it ({exc})") from None
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.spec.max_length)
        options = session_options(threads)
        graph = graph or folder / model_file(self.precision, part)
        check = self.spec.query.int8 if part == "query" and self.spec.query is not None else self.spec.int8
        self.int8: Int8Check | None = check  # the record of its part's int8 graph, where it has one
        # A graph not yet recorded (`graph`: the check of a new int8 graph) is a new one: a scale per token row.
        unfused = UNFUSED_FOR_TOKEN_SCALES if check is None or check.activations == "token" else []
        try:
            self.sessions = [
                ort.InferenceSession(str(graph), options, providers=providers_for(device), disabled_optimizers=unfused)
                for _ in range(max(1, sessions))
            ]
        except SentenceError:
            raise
        except Exception as exc:  # onnxruntime's own errors for a corrupt graph
            raise SentenceError(f"{graph}: onnxruntime cannot load it ({exc})") from None
        self.device = "cuda" if CUDA_PROVIDER in self.session.get_providers() else "cpu"
        # Padded tokens a call holds at most (ssi.sentence_calls): a few hundred on a CPU, more on a GPU.
        self.call_tokens = TOKENS_PER_CALL if self.device == "cpu" else GPU_TOKENS_PER_CALL
        names = [i.name for i in self.session.get_inputs()]
        if sorted(names) != sorted(self.spec.inputs):
            raise SentenceError(f"{graph}: inputs {names}, the spec says {self.spec.inputs}")
        (output,) = self.session.get_outputs()[:1]
        self.output = output.name
        self.dims = self.spec.dims
        self.projection = read_projection(folder, self.spec)

    @property
    def session(self) -> Any:
        """The first of the encoder's onnxruntime sessions (the only one unless `sessions` asked more)."""
        return self.sessions[0]

    @property
    def graph_file(self) -> str:
        """The file name of the graph this encoder runs (MODEL_FILE, INT8_MODEL_FILE or their query graphs')."""
        return model_file(self.precision, self.part)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, cut to the maximum length ([CLS] … [SEP] kept)."""
        return [enc.ids for enc in self.tokenizer.encode_batch(list(texts), add_special_tokens=True)]

    @property
    def pooled_dims(self) -> int:
        """E of the pooled vectors before the projection (`encode(..., cut=False)`): the graph's own."""
        return self.spec.dims if self.spec.projection is None else self.spec.projection.source_dims

    def encode(self, texts: Sequence[str], cut: bool = True, tokens: int | None = None) -> np.ndarray:
        """float32 [len(texts), E], in the texts' order; `cut=False`: before the projection (`pooled_dims`), which
        `project(encoder.projection, ...)` then gives the same vectors of. `tokens`: padded tokens a call holds at
        most (ssi.sentence_calls; None: `call_tokens`; a text's vector does not depend on it)."""
        return self.encode_ids(self.token_ids(texts), cut, tokens)

    def encode_ids(self, ids: Sequence[list[int]], cut: bool = True, tokens: int | None = None) -> np.ndarray:
        """float32 [len(ids), E] of texts already tokenized (`token_ids`), in their order (`cut`, `tokens`: as
        `encode`)."""
        out = np.zeros((len(ids), self.dims if cut else self.pooled_dims), dtype=np.float32)

        def run(call: np.ndarray, session: Any) -> None:
            out[call] = self._run([ids[i] for i in call], session, cut)

        run_calls(plan_calls([len(row) for row in ids], tokens or self.call_tokens), self.sessions, run)
        return out

    def _run(self, rows: list[list[int]], session: Any, cut: bool = True) -> np.ndarray:
        width = max(len(row) for row in rows)
        input_ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        feed: dict[str, Any] = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self.spec.inputs:
            feed["token_type_ids"] = np.zeros_like(input_ids)
        (states,) = session.run([self.output], feed)
        pooled = pool(np.asarray(states, dtype=np.float32), mask, self.spec.pooling)
        pooled = unit_length(pooled) if self.spec.normalize else pooled
        return pooled if self.projection is None or not cut else project(self.projection, pooled)


def bulk_encoder(
    folder: Path | str,
    cores: int,
    precision: Precision | None = None,
    *,
    device: Device = "cpu",
    part: Part = "document",
) -> SentenceEncoder:
    """An encoder for texts in bulk (a first start's documents, a training corpus): on the CPU one session of one
    thread a core, taking the calls in turn (ssi.sentence_calls; two such sessions encoded 60-word passages half
    as fast again as one session of two threads in int8); on a GPU (`device` cuda, or auto where it has one) one
    session with `cores` threads for what the GPU leaves to the CPU."""
    if device == "cpu" or (device == "auto" and "cuda" not in available_devices()):
        return SentenceEncoder(folder, 1, precision, part=part, sessions=max(1, cores))
    return SentenceEncoder(folder, cores, precision, device=device, part=part)


def project(projection: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Pooled vectors [n, E₀] cut to [n, E] by a PROJECTION_FILE's array: (x − mean) · axes, to unit length."""
    cut = vectors @ projection[:-1] + projection[-1]
    return unit_length(cut).astype(np.float32)


def read_projection(folder: Path, spec: SentenceSpec) -> np.ndarray | None:
    """The folder's PROJECTION_FILE where the spec records one (None otherwise), checked against it."""
    if spec.projection is None:
        return None
    path = folder / PROJECTION_FILE
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise SentenceError(f"{path}: not a readable projection ({exc})") from None
    shape = (spec.projection.source_dims + 1, spec.dims)
    if array.shape != shape or array.dtype != np.float32:
        raise SentenceError(f"{path}: {array.dtype} {array.shape}, the spec says float32 {shape}")
    return array
