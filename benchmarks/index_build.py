"""Index build, stage by stage: how many documents per second each step of a from-scratch build takes.

    python -m benchmarks.index_build --bundle B --corpus $W/docs.jsonl.gz --passages 100000

The corpus is cut into 60-word passages (as `ssi bench --passages` does) and taken through the
service's own steps in one process: tokenize, tf-idf rows (`Vocabulary.featurize_tokens`), the
form's index vectors (`Embedder.embed_documents`) and the FAISS add (`VectorIndex.build`). Each
stage is reported in documents per second and as a share of the whole, so the slowest step is named;
the V d product and the FAISS add are the floor a build cannot go under.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from service.embedding import Embedder
from service.index import IndexConfig, VectorIndex
from ssi.bundle import load_bundle
from ssi.corpus import iter_corpus
from ssi.tokenize import tokenize

PASSAGE_WORDS = 60


def passages(corpus: Path, limit: int) -> list[str]:
    """The corpus's texts cut into PASSAGE_WORDS-word passages, the first `limit` of them."""
    out: list[str] = []
    for doc in iter_corpus(corpus):
        words = doc.full_text.split()
        out.extend(" ".join(words[i : i + PASSAGE_WORDS]) for i in range(0, len(words), PASSAGE_WORDS))
        if len(out) >= limit:
            break
    return out[:limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=4096, help="documents per featurize/embed call")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()

    texts = passages(args.corpus, args.passages)
    bundle = load_bundle(args.bundle)
    embedder = Embedder(bundle, threads=2)
    seconds = dict.fromkeys(("tokenize", "featurize", "embed", "faiss add"), 0.0)
    embeddings = np.empty((len(texts), bundle.manifest.index_dims), dtype=np.float32)
    for start in range(0, len(texts), args.batch):
        batch = texts[start : start + args.batch]
        t0 = time.perf_counter()
        tokens = [tokenize(text) for text in batch]
        t1 = time.perf_counter()
        tfidf = bundle.vocab.featurize_tokens(tokens)
        t2 = time.perf_counter()
        embeddings[start : start + len(batch)] = embedder.embed_documents(tfidf)
        t3 = time.perf_counter()
        seconds["tokenize"] += t1 - t0
        seconds["featurize"] += t2 - t1
        seconds["embed"] += t3 - t2
    t0 = time.perf_counter()
    VectorIndex.build(IndexConfig(), embeddings.shape[1], embeddings, np.arange(len(texts), dtype=np.int64))
    seconds["faiss add"] = time.perf_counter() - t0
    total = sum(seconds.values())
    report = {
        "documents": len(texts),
        "form": bundle.manifest.form,
        "index_dims": bundle.manifest.index_dims,
        "total_seconds": round(total, 3),
        "docs_per_second": round(len(texts) / total),
        "stages": {
            name: {
                "seconds": round(s, 3),
                "docs_per_second": round(len(texts) / s) if s else None,
                "share": round(s / total, 3),
            }
            for name, s in seconds.items()
        },  # fmt: skip
    }
    print(json.dumps(report, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
