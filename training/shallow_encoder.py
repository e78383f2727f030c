"""A shallow sentence encoder: a transformer model folder cut to its first K layers, optionally distilled back towards
the whole model's sentence vectors on unlabelled text, written as a model folder of the same layout.

`transformers` loads the first K layers' weights when asked for `num_hidden_layers=K` (the rest are dropped); the
embeddings, the pooling and the normalisation stay the source's. Such a folder is what `ssi train --encoder` takes:
training.sentence_export exports and checks it as it does any other (the same graph inputs and output, the same
check against the folder's own forward pass, the int8 graph beside it).

With `seconds` > 0 the cut model is trained for that long (CPU or GPU, `device`) to give the whole model's pooled
unit vectors: the loss is 1 − cos(student(t), teacher(t)), the teacher being the source folder's full model, on the
texts given: no queries, no labels (`distil_texts`: sentences of a corpus's documents and runs of a few of them).
`python -m benchmarks.shallow_encoder` measures what it keeps (docs/results/shallow-encoder.md).

    python -m training.shallow_encoder "$M" bundles/minilm-l2 --layers 2
    python -m training.shallow_encoder "$M" bundles/minilm-l2-distilled --layers 2 --seconds 600 \\
        --texts ../shared/data/wikispeedia/docs.jsonl.gz

A cut distilled on query-length texts (`--max-words 40 --max-length 64`) is what `ssi train --encoder "$M"
--query-model DIR` takes: its graph encodes the queries, the whole model the documents.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from ssi.corpus import read_corpus
from ssi.sentence import SentenceError
from training.encoder_finetune import copy_model_files, embed_texts
from training.sentence_export import read_max_length, read_name, read_pooling

INFO_FILE = "shallow.json"  # what the folder was cut and distilled from, beside its weights
BATCH = 32
LR = 1e-4
RUN = 4  # sentences in a run of consecutive sentences (`distil_texts`): texts of a passage's length
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")


def distil_texts(corpora: Sequence[Path], *, limit: int = 200_000, seed: int = 0, max_words: int = 0) -> list[str]:
    """Unlabelled texts of query and passage length from the documents of `corpora` (ssi.corpus's formats): each
    document's sentences, and runs of RUN consecutive sentences; shuffled, at most `limit`; with `max_words` > 0 only
    texts of at most that many words (a model that will encode queries only: `ssi train --query-model`)."""
    texts: list[str] = []
    for path in corpora:
        for doc in read_corpus(path):
            sentences = [s for s in SENTENCE.split(" ".join(doc.text.split())) if len(s.split()) >= 3]
            texts.extend(sentences)
            texts.extend(" ".join(sentences[i : i + RUN]) for i in range(0, max(0, len(sentences) - 1), RUN))
            if doc.title:
                texts.append(doc.title)
    random.Random(seed).shuffle(texts)
    if max_words > 0:
        texts = [t for t in texts if len(t.split()) <= max_words]
    return texts[:limit]


def _batches(texts: Sequence[str], batch: int, seed: int) -> list[list[str]]:
    """The texts in batches of about one length (sorted by length within windows of 64 batches, so that a batch pads
    little), the batches in a random order."""
    window = 64 * batch
    out: list[list[str]] = []
    for start in range(0, len(texts), window):
        part = sorted(texts[start : start + window], key=len)
        out.extend(part[i : i + batch] for i in range(0, len(part), batch))
    random.Random(seed).shuffle(out)
    return out


def _card(folder: Path, out: Path, title: str) -> None:
    """The source's model card (its license's front matter) with `title` as its heading: the name read_name gives."""
    card = folder / "README.md"
    text = card.read_text(encoding="utf-8", errors="replace") if card.is_file() else ""
    if re.search(r"^# \S.*$", text, re.MULTILINE):
        text = re.sub(r"^# \S.*$", lambda _: f"# {title}", text, count=1, flags=re.MULTILINE)
    else:
        text = f"{text}\n# {title}\n"
    (out / "README.md").write_text(text, encoding="utf-8")


def shallow_encoder(
    folder: Path | str,
    out: Path | str,
    layers: int,
    *,
    texts: Sequence[str] = (),
    seconds: float = 0.0,
    batch: int = BATCH,
    lr: float = LR,
    max_length: int | None = None,
    seed: int = 0,
    threads: int = 2,
    device: str = "cpu",
) -> dict[str, Any]:
    """Write `out`, the model of `folder` cut to its first `layers` layers and, where `seconds` > 0 and `texts` are
    given, distilled on them for about that long (batches of `batch` texts cut at `max_length` tokens, the source's
    own by default); returns what `out/shallow.json` records. `SentenceError` for more layers than the source has."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    folder, out = Path(folder), Path(out)
    total = int(AutoConfig.from_pretrained(str(folder)).num_hidden_layers)
    if not 1 <= layers <= total:
        raise SentenceError(f"{folder}: {layers} layers asked of a model of {total}")
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    student = AutoModel.from_pretrained(str(folder), num_hidden_layers=layers).to(device)
    pooling, _ = read_pooling(folder)
    length = max_length or read_max_length(folder)
    info: dict[str, Any] = {"source": read_name(folder), "layers": layers, "of_layers": total, "distilled": False}
    if seconds > 0 and texts:
        teacher = AutoModel.from_pretrained(str(folder)).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        optimizer = torch.optim.AdamW(student.parameters(), lr=lr)
        student.train()
        losses: list[float] = []
        batches = _batches(texts, batch, seed)
        started, step = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            chosen = batches[step % len(batches)]
            with torch.no_grad():
                target = embed_texts(teacher, tokenizer, chosen, pooling=pooling, max_length=length, device=device)
            got = embed_texts(student, tokenizer, chosen, pooling=pooling, max_length=length, device=device)
            loss = (1.0 - (got * target).sum(dim=-1)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
        student.eval()
        head, tail = losses[: min(20, len(losses))], losses[-min(20, len(losses)) :]
        every = [round(sum(losses[i : i + 50]) / len(losses[i : i + 50]), 5) for i in range(0, len(losses), 50)]
        info |= {
            "distilled": True,
            "loss": "1 - cosine to the full model's pooled unit vector",
            "texts_seen": step * batch,
            "steps": step,
            "batch": batch,
            "lr": lr,
            "max_length": length,
            "seconds": round(time.perf_counter() - started, 1),
            "loss_first_20_steps": round(sum(head) / len(head), 5),
            "loss_last_20_steps": round(sum(tail) / len(tail), 5),
            "loss_by_50_steps": every,
        }
    out.mkdir(parents=True, exist_ok=True)
    student.to("cpu").save_pretrained(str(out))
    copy_model_files(folder, out)
    how = ", distilled" if info["distilled"] else ""
    _card(folder, out, f"{info['source']}, first {layers} of {total} layers{how}")
    (out / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return info


def main(
    folder: Annotated[Path, typer.Argument(help="The model folder (sentence-transformers' layout).")],
    out: Annotated[Path, typer.Argument(help="Where the shallow model folder goes.")],
    layers: Annotated[int, typer.Option(help="Layers kept, from the first.")] = 2,
    seconds: Annotated[float, typer.Option(help="Seconds of distillation towards the full model (0: none).")] = 0.0,
    texts: Annotated[list[Path] | None, typer.Option(help="Corpora whose texts it is distilled on.")] = None,
    lr: Annotated[float, typer.Option(help="AdamW's learning rate.")] = LR,
    max_length: Annotated[int, typer.Option(help="Tokens a text is cut at while distilled (0: the source's).")] = 0,
    max_words: Annotated[
        int, typer.Option(help="Distil on texts of at most this many words (0: all): for a query model.")
    ] = 0,
    threads: Annotated[int, typer.Option(help="PyTorch's threads.")] = 2,
) -> None:
    given = distil_texts(texts or [], max_words=max_words) if seconds > 0 else []
    info = shallow_encoder(
        folder, out, layers, texts=given, seconds=seconds, lr=lr, max_length=max_length or None, threads=threads
    )
    typer.echo(json.dumps(info))


if __name__ == "__main__":
    typer.run(main)
