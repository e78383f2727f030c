"""Benchmark inputs: keyword queries cut from corpus documents, and generated corpora of any size.

Keyword queries follow the evaluation protocol (DESIGN.md) with the harness's own sampler
(`ssi.keywords.keyword_query`): n distinct random words of a random document, with a fixed seed,
so two runs ask the same questions. `--query-sampler positions` draws words at random positions
instead, stop words as often as the text has them (the workload of issue 25's measurements).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import numpy as np

from ssi.corpus import iter_corpus
from ssi.keywords import keyword_query, typed_words_query
from ssi.tokenize import tokenize
from ssi.vocab import Vocabulary

QuerySampler = Literal["distinct", "positions"]
SAMPLERS: dict[str, Callable[..., str]] = {"distinct": keyword_query, "positions": typed_words_query}


def keyword_queries(
    corpus: Path, n_queries: int, n_words: int, seed: int = 0, sampler: QuerySampler = "distinct"
) -> list[str]:
    """`n_queries` queries of `n_words` random words, each from a document picked by reservoir sampling:
    distinct words (the evaluation protocol's sampler) or words at random positions, stop words included
    (ssi.keywords.typed_words_query)."""
    sample = SAMPLERS[sampler]
    rng = random.Random(seed)
    picked: list[tuple[str, list[str]]] = []
    for seen, doc in enumerate(iter_corpus(corpus)):
        words = tokenize(doc.full_text)
        if len(set(words)) < n_words:
            continue
        if len(picked) < n_queries:
            picked.append((doc.id, words))
        else:
            slot = rng.randint(0, seen)
            if slot < n_queries:
                picked[slot] = (doc.id, words)
    return [sample("", n_words, seed, doc_id, tokens=words) for doc_id, words in picked]


def generate_corpus(path: Path, vocab: Vocabulary, n_docs: int, words_per_doc: int = 12, seed: int = 0) -> Path:
    """Short documents of Zipf-distributed vocabulary words (word id = frequency rank in a bundle)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, vocab.size + 1) ** 1.1
    weights /= weights.sum()
    words = np.asarray(vocab.words, dtype=object)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for start in range(0, n_docs, 10_000):
            count = min(10_000, n_docs - start)
            lengths = rng.integers(words_per_doc // 2, words_per_doc * 2, size=count)
            ids = rng.choice(vocab.size, size=int(lengths.sum()), p=weights)
            offset = 0
            for i, length in enumerate(lengths.tolist()):
                text = " ".join(words[ids[offset : offset + length]])
                offset += length
                title = " ".join(words[ids[offset - min(3, length) : offset]])
                handle.write(json.dumps({"id": f"g{start + i}", "title": title, "text": text}) + "\n")
    return path


def corpus_texts(corpus: Path) -> Iterator[tuple[str, str]]:
    for doc in iter_corpus(corpus):
        yield doc.id, doc.full_text


def passage_corpus(source: Path, path: Path, words_per_passage: int = 60, limit: int = 100_000) -> Path:
    """Real text cut into passages of `words_per_passage` whitespace words (the last piece of an article
    may be shorter), at most `limit` of them, written as JSONL to `path` (a benchmark input, never data in
    the repo). Ids are `<article id>#<n>`, titles the article's title. Written beside `path` and moved onto
    it at the end: a benchmark that reuses `path` never reads half a file, and `source` may be `path`
    itself (a passages file given back as the corpus, which had been emptied before it was read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    written = 0
    with partial.open("w", encoding="utf-8") as handle:
        for doc in iter_corpus(source):
            words = doc.text.split()
            for n, start in enumerate(range(0, len(words), words_per_passage)):
                if written >= limit:
                    break
                text = " ".join(words[start : start + words_per_passage])
                handle.write(json.dumps({"id": f"{doc.id}#{n}", "title": doc.title, "text": text}) + "\n")
                written += 1
            if written >= limit:
                break
    os.replace(partial, path)
    return path
