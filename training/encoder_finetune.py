"""`ssi train --encoder DIR --finetune-encoder EPOCHS`: the sentence encoder itself trained on the training pairs.

Before λ, U and V are learned (training.hybrid), the encoder's weights take a few epochs of the in-batch
softmax loss sentence-transformers calls MultipleNegativesRankingLoss (a query's own document against the other
documents of its batch, cosines scaled by SCALE), with AdamW, in PyTorch, on the GPU where there is one. The
result is written as a model folder of the same layout (weights, tokenizer, pooling, the model card for its
license), which training.sentence_export then exports and checks like any other.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

SCALE = 20.0  # the cosines' scale in the softmax (sentence-transformers' default for this loss)
BATCH = 32
LR = 2e-5
COPIED = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "modules.json",
          "sentence_bert_config.json", "README.md", "1_Pooling")  # fmt: skip


def finetune_encoder(
    folder: Path,
    pairs: Sequence[tuple[str, str]],
    out: Path,
    *,
    epochs: int,
    pooling: str,
    max_length: int,
    seed: int = 0,
    threads: int = 2,
    device: str = "cpu",
) -> Path:
    """Write `out`, the model of `folder` trained on (query, document) text pairs; returns `out`."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    model = AutoModel.from_pretrained(str(folder)).to(device)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    rng = np.random.default_rng(seed)

    def embed(texts: list[str]) -> torch.Tensor:
        return embed_texts(model, tokenizer, texts, pooling=pooling, max_length=max_length, device=device)

    model.train()
    for _ in range(epochs):
        order = rng.permutation(len(pairs))
        for start in range(0, len(order) - 1, BATCH):
            chosen = [pairs[i] for i in order[start : start + BATCH]]
            if len(chosen) < 2:
                continue
            queries = embed([q for q, _ in chosen])
            docs = embed([d for _, d in chosen])
            scores = SCALE * queries @ docs.T
            loss = torch.nn.functional.cross_entropy(scores, torch.arange(len(chosen), device=device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(str(out))
    copy_model_files(folder, out)
    return out


def embed_texts(model: Any, tokenizer: Any, texts: list[str], *, pooling: str, max_length: int, device: str) -> Any:
    """The texts' unit vectors by the model in PyTorch (gradients kept), pooled as the folder's Pooling module says."""
    import torch

    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt").to(device)
    states = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
    if pooling == "cls":
        pooled = states[:, 0]
    elif pooling == "max":
        pooled = states.masked_fill(mask == 0, -1e9).max(dim=1).values
    else:
        pooled = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1)


def copy_model_files(folder: Path, out: Path) -> None:
    """COPIED from `folder` to `out` where there: what makes weights saved by `save_pretrained` a model folder."""
    for name in COPIED:
        source = folder / name
        if source.is_dir():
            shutil.copytree(source, out / name, dirs_exist_ok=True)
        elif source.is_file():
            shutil.copyfile(source, out / name)
