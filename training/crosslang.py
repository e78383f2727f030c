"""A cross-language retrieval task from any corpus with links (PSI paper, 000 section 4.2).

Every document gets a "mate" in the pseudo-language (training.pseudo_language): its text translated
word by word with a seeded random dictionary. A query is a mate; its relevant documents are the
source-language documents its original links to, in the split evaluated — the paper's task, where a
Japanese article is the query and the English articles linked from its English mate are relevant.
The original is left out of the query's ranking (the "filtered" setting drops it with the training
links), as the paper removes it.

`ssi crosslang` writes one folder that `ssi train --queries` and `ssi eval --queries` read:

- `queries.jsonl`: the mates (`_id` = the original's id, `text` in the pseudo-language);
- `queries.translated.jsonl`: the mates translated back word by word with the inverse dictionary
  ("translate, then tf-idf": the comparison row, which a real system gets from a translation tool);
- `qrels.{train,valid}.tsv`: the links of each split as (query, document) qrels;
- `qrels.filter.tsv`: the training links plus each query's original, left out of validation rankings;
- `dictionary.tsv`: the dictionary (source word, its invented words; none = dropped);
- `crosslang.json`: the settings and counts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ssi.corpus import read_corpus, read_pairs
from ssi.tokenize import tokenize
from training.click_logs import write_jsonl
from training.pseudo_language import PseudoLanguage, PseudoLanguageSpec


def write_qrels(path: Path, pairs: list[tuple[str, str]]) -> int:
    """BEIR qrels (`query-id<TAB>corpus-id<TAB>score`, with its header), relevance 1, pairs sorted and unique."""
    unique = sorted(set(pairs))
    with path.open("w", encoding="utf-8") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        handle.writelines(f"{q}\t{d}\t1\n" for q, d in unique)
    return len(unique)


def generate(corpus: Path, links: dict[str, Path], out: Path, spec: PseudoLanguageSpec) -> dict[str, Any]:
    """Write the task folder for `corpus` and its `links` (split name → `source<TAB>target` file)."""
    docs = read_corpus(corpus)
    tokens = [tokenize(d.full_text) for d in docs]
    language = PseudoLanguage.build(tokens, spec)
    rng = np.random.default_rng(spec.seed + 1)  # the synonym drawn at each occurrence
    out.mkdir(parents=True, exist_ok=True)
    mates = [language.translate(t, rng) for t in tokens]
    write_jsonl(out / "queries.jsonl", ({"_id": d.id, "text": " ".join(m)} for d, m in zip(docs, mates, strict=True)))
    write_jsonl(
        out / "queries.translated.jsonl",
        ({"_id": d.id, "text": " ".join(language.back_translate(m))} for d, m in zip(docs, mates, strict=True)),
    )
    with (out / "dictionary.tsv").open("w", encoding="utf-8") as handle:
        handle.writelines(f"{word}\t{' '.join(targets)}\n" for word, targets in language.forward.items())
    splits: dict[str, int] = {}
    split_pairs: dict[str, list[tuple[str, str]]] = {}
    for split, path in links.items():
        split_pairs[split] = [(p.query_id, p.doc_id) for p in read_pairs(path)]
        splits[split] = write_qrels(out / f"qrels.{split}.tsv", split_pairs[split])
    originals = [(d.id, d.id) for d in docs]
    splits["filter"] = write_qrels(out / "qrels.filter.tsv", split_pairs.get("train", []) + originals)
    summary: dict[str, Any] = {
        "corpus": str(corpus),
        "documents": len(docs),
        "spec": {"merged": spec.merged, "dropped": spec.dropped, "synonyms": spec.synonyms, "seed": spec.seed},
        "dictionary": language.summary(),
        "qrels": splits,
        "words_kept": round(sum(len(m) for m in mates) / max(1, sum(len(t) for t in tokens)), 4),
    }
    (out / "crosslang.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary
