"""A static query graph: a table of token vectors distilled towards an encoder's own vectors of query-length texts, so
that a query costs a lookup a token while every document keeps the encoder's vector (issue 64).

Why a table can do here what it cannot as a whole encoder: a static encoder built from one-token texts keeps 43 % of
MiniLM's day-one hybrid gain on SciFact (docs/results/static-encoder.md), since a document's meaning lies in its
context; a query graph only has to land where the encoder lands for a short text (`ssi train --query-model`), and a
bag of token rows trained for exactly that learns it. The two-layer query graph (training.shallow_encoder) does the
same at ~2.9 ms a query on the AVX2 CPU, about BM25's whole search; through a table a query took 0.4–0.5 ms, most
of it the tokenizer and the onnxruntime call (docs/results/static-encoder.md#as-a-query-graph).

The model: v(text) = W · mean(T[t] for t in its tokens), normalised, [CLS] and [SEP] left out (zero rows). T starts
from training.static_distil's table (each token's own state in its one-token text, SIF-weighted by its counts over the
texts), W from the identity, and both are trained by Adam on 1 − cos(v(text), e(text)), e the encoder's pooled vector
before any cut (`SentenceEncoder.encode(..., cut=False)`: a bundle's projection is applied after pooling to either
graph), over a corpus's sentences and titles of at most MAX_WORDS words (training.shallow_encoder.distil_texts), a
held-out thousand of them measuring it. W is linear, so it is folded into the table (mean then W is W then mean) and
the graph is training.static_distil's one Gather: `ssi train --encoder M --query-model DIR` takes DIR as it takes a
distilled transformer, checked against M by the same agreement bound.

    python -m training.static_query "$M" models/minilm-static-queries --texts ../shared/data/scifact/corpus.jsonl.gz

The cost is mostly the encoder's pass over the texts: SciFact's 47,722 took 17 minutes in all on two cores, the ten
epochs about 4 of them.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from ssi.sentence import SentenceEncoder, SentenceError, SentenceSpec, StaticInfo
from training.shallow_encoder import distil_texts
from training.static_distil import (
    SIF,
    counted_probabilities,
    source_encoder_folder,
    static_table,
    token_table,
    write_table,
)

EPOCHS = 10
LR = 3e-3
BATCH = 256
MAX_WORDS = 40  # the length of a query: longer texts teach what queries never ask
LIMIT = 50_000  # texts at most (the encoder's pass over them is the distillation's cost)
HELD_OUT = 1_000  # texts kept out of training, whose mean cosine to the encoder's vectors the info records


def distil_table(
    start: np.ndarray,
    special: np.ndarray,
    ids: Sequence[Sequence[int]],
    target: np.ndarray,
    *,
    epochs: int = EPOCHS,
    lr: float = LR,
    batch: int = BATCH,
    seed: int = 0,
    threads: int = 2,
) -> tuple[np.ndarray, dict[str, Any]]:
    """The table [vocabulary, E] trained from `start` so that each text's mean row (its token `ids`, `special` ones
    left out) lands on its `target` unit vector; W folded in, the special rows zero. Returns it and what was measured:
    the held-out texts' mean cosine before and after, and each epoch's training loss."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    skip = set(special.tolist())
    bags = [[t for t in row if t not in skip] for row in ids]
    kept = np.asarray([i for i, bag in enumerate(bags) if bag], dtype=np.int64)  # a text of special tokens only: none
    if len(kept) < 2:
        raise SentenceError("a static query graph needs texts with words to distil on")
    rng = np.random.default_rng(seed)
    rng.shuffle(kept)
    cut = min(HELD_OUT, len(kept) // 10 or 1)
    held, train = kept[:cut], kept[cut:]
    table = torch.nn.Parameter(torch.from_numpy(np.array(start, dtype=np.float32)))
    linear = torch.nn.Parameter(torch.eye(start.shape[1]))
    wanted = torch.from_numpy(np.asarray(target, dtype=np.float32))
    optimizer = torch.optim.Adam([table, linear], lr=lr)

    def vectors(chosen: np.ndarray) -> torch.Tensor:
        flat = torch.tensor([t for i in chosen for t in bags[i]], dtype=torch.int64)
        offsets = torch.tensor(np.cumsum([0] + [len(bags[i]) for i in chosen[:-1]]), dtype=torch.int64)
        return F.normalize(F.embedding_bag(flat, table, offsets, mode="mean") @ linear, dim=-1)

    def held_cosine() -> float:
        with torch.no_grad():
            return round(float((vectors(held) * wanted[held]).sum(-1).mean()), 4)

    before, losses, started = held_cosine(), [], time.perf_counter()
    for _ in range(epochs):
        rng.shuffle(train)
        total = 0.0
        for first in range(0, len(train), batch):
            chosen = train[first : first + batch]
            loss = (1.0 - (vectors(chosen) * wanted[chosen]).sum(-1)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(chosen)
        losses.append(round(total / len(train), 5))
    with torch.no_grad():
        out = (table @ linear).numpy().astype(np.float32)
    out[special] = 0.0
    info = {
        "texts": len(train),
        "held_out": len(held),
        "held_out_cosine_before": before,
        "held_out_cosine_after": held_cosine(),
        "epochs": epochs,
        "lr": lr,
        "batch": batch,
        "loss_by_epoch": losses,
        "seconds": round(time.perf_counter() - started, 1),
    }
    return out, info


def static_query_model(
    source: Path | str,
    out: Path | str,
    texts: Sequence[str],
    *,
    epochs: int = EPOCHS,
    lr: float = LR,
    threads: int = 2,
    texts_from: str = "",
) -> tuple[SentenceSpec, dict[str, Any]]:
    """Write `out/`, a static encoder folder distilled towards `source` (a model folder, an encoder folder or a hybrid
    bundle, as training.static_distil takes) on `texts`, for `ssi train --encoder source --query-model out`."""
    if not texts:
        raise SentenceError("a static query graph needs texts to distil on (--texts: a corpus)")
    with tempfile.TemporaryDirectory(prefix="ssi-static-query-") as scratch:
        folder = source_encoder_folder(Path(source), Path(scratch), threads)
        tokens = token_table(folder, threads)
        encoder = SentenceEncoder(folder, threads, precision="fp32")
        ids = encoder.token_ids(texts)
        target = encoder.encode_ids(ids, cut=False)  # before any projection: the query graph's pooled vectors'
    size, dims = tokens.token.shape
    counts = counted_probabilities(tokens.tokenizer, texts, size, tokens.spec.max_length)
    start = static_table(tokens.token, tokens.special, None, counts, SIF)
    table, info = distil_table(start, tokens.special, ids, target, epochs=epochs, lr=lr, threads=threads)
    where = f" of {texts_from}" if texts_from else ""
    how = (
        f"{epochs} epochs of Adam (lr {lr:g}) on 1 - cos to {tokens.spec.name}'s vectors of {info['texts']:,} texts"
        f"{where} of at most {MAX_WORDS} words, a linear map folded in; held-out texts' mean cosine "
        f"{info['held_out_cosine_before']} -> {info['held_out_cosine_after']}"
    )
    static = StaticInfo(
        source=tokens.spec.name,
        source_dims=dims,
        tokens=size,
        rows="token",
        pca=False,
        weighting=f"SIF a/(a + p(token)), a = {SIF:g}, p: token counts over the distillation's texts (the start)",
        distilled=how,
    )
    name = f"static query graph, distilled towards {tokens.spec.name}"
    spec = write_table(out, table, tokens, static, max_length=tokens.spec.max_length, name=name)
    return spec, info


def main(
    source: Annotated[
        Path, typer.Argument(help="The encoder: a sentence-transformers model folder, encoder folder or hybrid bundle.")
    ],
    out: Annotated[Path, typer.Argument(help="The static query graph's folder to write.")],
    texts: Annotated[list[Path], typer.Option(help="Corpora whose sentences and titles it is distilled on.")],
    epochs: Annotated[int, typer.Option(min=1, help="Passes over the texts.")] = EPOCHS,
    lr: Annotated[float, typer.Option(min=0.0, help="Adam's learning rate.")] = LR,
    limit: Annotated[int, typer.Option(min=2, help="Texts at most (the encoder encodes each once).")] = LIMIT,
    threads: Annotated[int, typer.Option(min=1, help="Threads of the encoder and of PyTorch.")] = 2,
) -> None:
    """Distil OUT, a static query graph for SOURCE, which `ssi train --encoder SOURCE --query-model OUT` takes."""
    for path in texts:
        if not path.is_file():
            raise typer.BadParameter(f"{path}: no such corpus file", param_hint="--texts")
    given = distil_texts(texts, limit=limit, max_words=MAX_WORDS)
    try:
        spec, info = static_query_model(
            source, out, given, epochs=epochs, lr=lr, threads=threads, texts_from=", ".join(p.name for p in texts)
        )
    except SentenceError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(f"{out}: {spec.name}, {spec.dims} dimensions; held-out cosine {info['held_out_cosine_after']}")


if __name__ == "__main__":
    typer.run(main)
