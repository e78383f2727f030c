"""A tiny random sentence encoder in sentence-transformers' folder layout, for tests: BERT with 2 layers of
width 32 over a word-piece vocabulary of a few hundred pieces, made with `transformers` and `tokenizers`
(the `encoder-export` extra), so `ssi train --encoder` exports and checks it as it does a real model.

`exported_tiny_encoder` makes and exports it once per pytest run, shared by every pytest-xdist worker: an export is
the slow part of the hybrid tests, and most of them only read its result."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ssi.sentence import MODEL_FILE
from training.sentence_export import prepare_encoder

WORDS = (
    "the a of and to in is for on with star planet moon orbit telescope lens light bread oven dough flour "
    "yeast bake cell protein gene dna river sea boat ship sail harbour music song piano violin note"
).split()


def make_tiny_encoder(folder: Path, *, pooling: str = "mean", normalize: bool = True, seed: int = 0) -> Path:
    """Write the folder and return it: config.json, model.safetensors, tokenizer.json, modules.json, pooling."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel

    folder.mkdir(parents=True, exist_ok=True)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    pieces = special + list(WORDS) + letters + ["##" + c for c in letters]
    vocab = {piece: i for i, piece in enumerate(dict.fromkeys(pieces))}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).eval().save_pretrained(str(folder))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (folder / "1_Pooling").mkdir(exist_ok=True)
    modes = {f"pooling_mode_{m}": False for m in ("cls_token", "mean_tokens", "max_tokens")}
    modes[
        {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens"}[pooling]
    ] = True
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **modes}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48}))
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a tiny random encoder for tests\n")
    return folder


@dataclass(frozen=True)
class ExportedEncoder:
    """The tiny encoder of one seed, made and exported once per pytest run (`exported_tiny_encoder`); read only."""

    model: Path  # its model folder, with the checked graph beside the weights (onnx/model.onnx), as a user's may have
    sentence: Path  # prepare_encoder's output from the folder without the graph: the full export path, λ unset


def run_temp(factory: pytest.TempPathFactory) -> Path:
    """This run's temporary folder: under pytest-xdist the one every worker of the run shares (each worker's own is a
    folder in it); without xdist the process's own (its parent holds earlier runs' folders)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def exported_tiny_encoder(factory: pytest.TempPathFactory, *, seed: int = 0) -> ExportedEncoder:
    """The tiny encoder (mean pooling, normalised) made and exported by training.sentence_export once per run, for
    every worker: the first to ask builds it under a lock, the others wait for it, then all read it.

    An export with PyTorch's dynamo exporter takes tens of seconds on 2 busy cores; `ssi train --encoder` given the
    model folder takes its graph as it is and only checks it against the model's forward pass."""
    root = run_temp(factory)
    final = root / f"tiny-encoder-{seed}"
    with (root / f"tiny-encoder-{seed}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when its process dies
        if not final.is_dir():
            scratch = Path(tempfile.mkdtemp(prefix=f"{final.name}-", dir=root))
            model = make_tiny_encoder(scratch / "model", seed=seed)
            prepare_encoder(model, scratch / "sentence")
            (model / "onnx").mkdir()
            shutil.copyfile(scratch / "sentence" / MODEL_FILE, model / "onnx" / MODEL_FILE)
            for path in scratch.rglob("*"):  # shared: a test that writes into it fails instead of changing the others'
                if path.is_file():
                    path.chmod(0o444)
            scratch.rename(final)  # whole or not there: a build that failed leaves only its scratch folder
    return ExportedEncoder(final / "model", final / "sentence")


def make_query_model(source: Path, out: Path, *, noise: float = 2.0, seed: int = 0) -> Path:
    """A query model for `source` (`ssi train --query-model`): its first layer (training.shallow_encoder's cut) with
    noise added to its word-piece embeddings, so that its vectors are near the whole model's (a mean cosine of 0.91 on
    training.sentence_export.QUERY_PROBES) but not the same: a random model's cut alone gives the whole model's vectors
    to a cosine of 0.9998, which would let a test pass whichever graph encoded its queries."""
    import torch
    from transformers import AutoModel

    from training.shallow_encoder import shallow_encoder

    shallow_encoder(source, out, 1)
    model = AutoModel.from_pretrained(str(out))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if name == "embeddings.word_embeddings.weight":
                weight.add_(noise * weight.std() * torch.randn(weight.shape, generator=generator))
    model.save_pretrained(str(out))
    return out


def exported_query_model(factory: pytest.TempPathFactory) -> Path:
    """`make_query_model` of the run's tiny encoder, made once per run for every worker as `exported_tiny_encoder` is,
    with its checked graph beside its weights (onnx/model.onnx), so that `--query-model` takes that graph after the
    check instead of exporting it again (read only)."""
    root = run_temp(factory)
    final = root / "tiny-query-model"
    with (root / "tiny-query-model.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not final.is_dir():
            scratch = Path(tempfile.mkdtemp(prefix=f"{final.name}-", dir=root))
            model = make_query_model(exported_tiny_encoder(factory).model, scratch / "model")
            prepare_encoder(model, scratch / "sentence", int8=False)
            (model / "onnx").mkdir()
            shutil.copyfile(scratch / "sentence" / MODEL_FILE, model / "onnx" / MODEL_FILE)
            for path in scratch.rglob("*"):
                if path.is_file():
                    path.chmod(0o444)
            scratch.rename(final)
    return final / "model"


def write_word_corpus(path: Path, *, seed: int = 3, documents: int = 40) -> Path:
    """A JSONL corpus of `documents` texts of 12 words drawn from WORDS (the tiny encoder's vocabulary)."""
    rng = np.random.default_rng(seed)
    lines = [{"id": f"d{i}", "title": "", "text": " ".join(rng.choice(WORDS, size=12))} for i in range(documents)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path
