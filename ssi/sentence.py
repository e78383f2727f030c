"""The pre-trained sentence encoder e of a hybrid bundle: texts → unit vectors, by onnxruntime.

A hybrid bundle (ssi.hybrid) adds λ e(q)·e(d) to the form's score. Its `sentence/` folder holds what
running e needs and nothing from PyTorch:

    model.onnx      the transformer: input_ids, attention_mask (and token_type_ids where the model has
                    them) → the last hidden state [batch, tokens, E]
    tokenizer.json  the model's tokenizer, run by the `tokenizers` library
    sentence.json   `SentenceSpec`: pooling and normalisation as the model's own configuration says
                    (sentence-transformers' 1_Pooling/config.json and modules.json), the maximum length
                    in tokens, E, the weight λ, and where the weights came from (sha256 of each source
                    file, license)

Pooling runs here, in numpy, over the graph's token states, so a graph exported by `ssi train`
(training.sentence_export) and one a user brings (a model folder's onnx/model.onnx) run alike.
The `tokenizers` package is the optional `encoder` extra: a bundle without a sentence part never
imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ssi.forms.base import unit_length

SENTENCE_DIR = "sentence"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
SPEC_FILE = "sentence.json"
FILES = (MODEL_FILE, TOKENIZER_FILE, SPEC_FILE)

Pooling = Literal["mean", "cls", "max"]
# Texts per onnxruntime call: sorted by length first, so a batch pads to texts of about its own length.
BATCH = 32


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

    def with_weight(self, weight: float, rule: str) -> SentenceSpec:
        return self.model_copy(update={"weight": float(weight), "weight_rule": rule})


class SentenceError(ValueError):
    """The encoder folder cannot be used: which file, and why."""


def read_spec(folder: Path) -> SentenceSpec:
    path = folder / SPEC_FILE
    try:
        return SentenceSpec.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SentenceError(f"{path}: not a readable sentence encoder spec ({exc})") from None


def write_spec(folder: Path, spec: SentenceSpec) -> None:
    (folder / SPEC_FILE).write_text(spec.model_dump_json(indent=2), encoding="utf-8")


def pool(states: np.ndarray, mask: np.ndarray, how: Pooling) -> np.ndarray:
    """float32 [batch, E] from token states [batch, tokens, E] and the attention mask [batch, tokens]."""
    if how == "cls":
        return np.asarray(states[:, 0, :], dtype=np.float32)
    weights = mask.astype(np.float32)[:, :, None]
    if how == "max":
        return np.where(weights > 0, states, np.float32(-1e9)).max(axis=1).astype(np.float32)
    total = (states * weights).sum(axis=1, dtype=np.float32)
    return total / np.maximum(weights.sum(axis=1), np.float32(1e-9))


class SentenceEncoder:
    """e(text): the folder's graph and tokenizer; float32 rows of length E, unit length when the spec says so."""

    def __init__(self, folder: Path | str, threads: int = 1) -> None:
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
        try:
            self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        except Exception as exc:  # tokenizers raises its own exception type
            raise SentenceError(f"{folder / TOKENIZER_FILE}: the tokenizers library cannot read it ({exc})") from None
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.spec.max_length)
        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # No memory arena: it kept what encoding documents' batches needed (1.1 GB after 20,000 passages in the worker
        # that built the index, benchmarks/hybrid_cost.py), where a query needs a few MB.
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(folder / MODEL_FILE), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's own errors for a corrupt graph
            raise SentenceError(f"{folder / MODEL_FILE}: onnxruntime cannot load it ({exc})") from None
        names = [i.name for i in self.session.get_inputs()]
        if sorted(names) != sorted(self.spec.inputs):
            raise SentenceError(f"{folder / MODEL_FILE}: inputs {names}, the spec says {self.spec.inputs}")
        (output,) = self.session.get_outputs()[:1]
        self.output = output.name
        self.dims = self.spec.dims

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, cut to the maximum length ([CLS] … [SEP] kept)."""
        return [enc.ids for enc in self.tokenizer.encode_batch(list(texts), add_special_tokens=True)]

    def encode(self, texts: Sequence[str], batch: int = BATCH) -> np.ndarray:
        """float32 [len(texts), E], in the texts' order."""
        texts = list(texts)
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        if not texts:
            return out
        ids = self.token_ids(texts)
        order = np.argsort([len(row) for row in ids], kind="stable")
        for start in range(0, len(order), batch):
            chosen = order[start : start + batch]
            out[chosen] = self._run([ids[i] for i in chosen])
        return out

    def _run(self, rows: list[list[int]]) -> np.ndarray:
        width = max(len(row) for row in rows)
        input_ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        feed: dict[str, Any] = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self.spec.inputs:
            feed["token_type_ids"] = np.zeros_like(input_ids)
        (states,) = self.session.run([self.output], feed)
        pooled = pool(np.asarray(states, dtype=np.float32), mask, self.spec.pooling)
        return unit_length(pooled) if self.spec.normalize else pooled
