"""How the day-one hybrid (BM25 on stems + λ · all-MiniLM-L6-v2's cosine) moves with λ on SciFact's validation claims,
beside each part alone and z-scores per query averaged, all in one process on the same claims and documents.

It shows where the rule `ssi train --encoder` uses without pairs (λ = 1, training/hybrid.py) lands among the
weights; it tunes nothing. The BM25 part is the day-one bundle's own (the default vocabulary: stems, every word).

    python -m benchmarks.hybrid_weight --out runs/hybrid-weight.json

`--learned B` adds a bundle trained without labels in the BM25 part's place (`ssi train --self-pairs title`: its
BM25 plus what it learned from titles and their abstracts), alone and with λ · the cosine: whether the two
label-free gains add up.

`--variants` adds what else could fuse without labels, each at the same weights: reciprocal rank fusion (k = 60)
and min-max per query (each part scaled to [0, 1] over the collection, then added); the abstracts encoded as
windows of 100 words behind their title, scored by the best window (MaxP) or by the windows' mean as one vector;
the titles encoded apart, scored by the better of title and text. `--titles-epochs N` fine-tunes the encoder N
epochs on the corpus's own (title, abstract) pairs (training.encoder_finetune, no labels) and fuses that.

`--pca 64,128,192` adds the encoder's vectors cut to fewer dimensions (a flat index's scan reads every document's
sentence part: a third of the dimensions, a third of the bytes): both sides projected onto the leading principal
axes of the documents' vectors (fitted on the corpus alone, no labels, after taking their mean away) and scaled back
to unit length, alone and at the same weights as the whole vectors.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

import ssi
from benchmarks.replication_faults import write_figures
from ssi.corpus import read_beir_queries, read_corpus, read_qrels
from ssi.forms.diagonal import Diagonal
from ssi.records import Document
from ssi.sentence import SentenceEncoder, SentenceSpec, project
from ssi.vocab import Vocabulary
from ssi.weighting import Bm25
from training.evaluate.form_scorer import FormScorer
from training.evaluate.metrics import NDCG10, quick_metrics
from training.evaluate.tasks import RetrievalTask, beir_task
from training.pretrained import NAME, checked_minilm_folder
from training.sentence_export import prepare_encoder
from training.sentence_projection import fitted_projection
from training.sentence_vectors import encode_corpus
from training.splits import split_by_query

WEIGHTS = (0.1, 0.2, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
VARIANT_WEIGHTS = (0.5, 1.0, 1.5, 2.0)
WINDOW_WORDS, WINDOW_STEP = 100, 80  # a window fits the 256 tokens with its title; windows overlap by 20 words
RRF_K = 60  # reciprocal rank fusion's constant (Cormack et al. 2009; Elasticsearch's default)


def _windows(doc: Document) -> list[str]:
    """The body in overlapping windows of WINDOW_WORDS words, each behind the title."""
    words = doc.text.split()
    head = f"{doc.title}\n" if doc.title else ""
    starts = range(0, max(1, len(words) - WINDOW_WORDS + WINDOW_STEP), WINDOW_STEP)
    return [head + " ".join(words[s : s + WINDOW_WORDS]) for s in starts]


def _reciprocal_rank(*parts: np.ndarray) -> np.ndarray:
    ranks = [np.argsort(np.argsort(-p, axis=1), axis=1) + 1 for p in parts]
    return sum(1.0 / (RRF_K + r) for r in ranks)


def _min_max(scores: np.ndarray) -> np.ndarray:
    low, high = scores.min(axis=1, keepdims=True), scores.max(axis=1, keepdims=True)
    return (scores - low) / np.maximum(high - low, 1e-9)


def _tuned_on_titles(docs: list[Document], spec: SentenceSpec, epochs: int, scratch: Path) -> SentenceEncoder:
    """all-MiniLM-L6-v2 fine-tuned on the corpus's own (title, abstract) pairs, exported: a label-free tuning."""
    from training.encoder_finetune import finetune_encoder

    pairs = [(d.title, d.text) for d in docs if d.title and d.text]
    tuned = finetune_encoder(
        checked_minilm_folder(), pairs, scratch / "tuned", epochs=epochs, pooling=spec.pooling,
        max_length=spec.max_length, threads=2,
    )  # fmt: skip
    prepare_encoder(tuned, scratch / "tuned-sentence", name=f"{NAME}, tuned on {len(pairs)} titles", threads=2)
    return SentenceEncoder(scratch / "tuned-sentence", threads=2)


def _best_per_document(cosines: np.ndarray, owner: np.ndarray, n_docs: int) -> np.ndarray:
    """[queries, n_docs]: for each document the largest of its windows' columns (`owner` maps a column to it)."""
    best = np.full((cosines.shape[0], n_docs), -np.inf, dtype=np.float32)
    np.maximum.at(best.T, owner, cosines.T)
    return best


def _window_cosines(encoder: SentenceEncoder, docs: list[Document], queries: np.ndarray) -> dict[str, np.ndarray]:
    """Per query and document: the best window's cosine (MaxP), and the cosine with the windows' normalised mean."""
    windows = [_windows(d) for d in docs]
    owner = np.repeat(np.arange(len(docs)), [len(w) for w in windows])
    vectors = encode_corpus(encoder, [w for group in windows for w in group])
    mean = np.zeros((len(docs), vectors.shape[1]), dtype=np.float32)
    np.add.at(mean, owner, vectors)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    return {"windows_best": _best_per_document(queries @ vectors.T, owner, len(docs)), "windows_mean": queries @ mean.T}


def _cut(queries: np.ndarray, documents: np.ndarray, dims: int) -> np.ndarray:
    """Cosines [queries, documents] of both sides' vectors cut to `dims` as `ssi train --sentence-dims` cuts them
    (training.sentence_projection), fitted on every document here (`--pca`)."""
    projection, _ = fitted_projection(documents, dims)
    return project(projection, queries) @ project(projection, documents).T


def scifact_validation(data: Path) -> tuple[list[Document], RetrievalTask, np.ndarray]:
    """SciFact's documents, its validation claims (a fifth of the train split's, seed 0: `ssi eval --split valid
    --valid-share 0.2`) and BM25's scores on stems for them, [claims, documents]: what a hybrid's lexical part is."""
    docs = read_corpus(data / "corpus.jsonl.gz")
    _, valid = split_by_query(read_qrels(data / "qrels" / "train.tsv"), 0.2, 0)
    task = beir_task(docs, read_beir_queries(data / "queries.jsonl.gz"), valid, name="valid")
    vocab = Vocabulary.build(
        [d.full_text for d in docs], max_words=10_000_000, min_df=1, bm25=Bm25(), stemmer="english"
    )
    lexical = FormScorer(vocab, Diagonal({"w": np.ones(vocab.size, dtype=np.float32)}), docs).score(task.query_texts)
    return docs, task, lexical


def main(
    data: Annotated[Path, typer.Option(help="SciFact's folder (BEIR layout).")] = Path("../shared/data/scifact"),
    out: Annotated[Path | None, typer.Option(help="Write the figures here as JSON.")] = None,
    learned: Annotated[Path | None, typer.Option(help="A label-free bundle to fuse in BM25's place.")] = None,
    variants: Annotated[bool, typer.Option(help="Other label-free fusions and document vectors (above).")] = False,
    titles_epochs: Annotated[int, typer.Option(help="Fine-tune on the corpus's titles this many epochs.")] = 0,
    pca: Annotated[str, typer.Option(help="Comma-separated dimensions to cut the vectors to (above).")] = "",
) -> None:
    docs, task, lexical = scifact_validation(data)
    texts = [d.full_text for d in docs]
    with tempfile.TemporaryDirectory() as scratch:
        spec = prepare_encoder(checked_minilm_folder(), Path(scratch) / "sentence", name=NAME, threads=2)
        encoder = SentenceEncoder(Path(scratch) / "sentence", threads=2)
        queries = encoder.encode(list(task.query_texts))
        documents = encode_corpus(encoder, texts)
        cosine = queries @ documents.T
        others: dict[str, np.ndarray] = {}
        for dims in [int(d) for d in pca.split(",") if d]:
            others[f"pca_{dims}_dimensions"] = _cut(queries, documents, dims)
        if variants:
            others = _window_cosines(encoder, docs, queries)
            titles = encode_corpus(encoder, [d.title or d.text for d in docs])
            others["best_of_text_and_title"] = np.maximum(cosine, queries @ titles.T)
        if titles_epochs:
            tuned = _tuned_on_titles(docs, spec, titles_epochs, Path(scratch))
            others[f"tuned_on_titles_{titles_epochs}_epochs"] = tuned.encode(list(task.query_texts)) @ (
                encode_corpus(tuned, texts).T
            )

    def ndcg(scores: np.ndarray) -> dict[str, float]:
        values = quick_metrics(scores, task.relevant_matrix, task.excluded_matrix)[NDCG10]
        return {"ndcg@10": round(float(values.mean()), 4), "se": round(float(values.std() / np.sqrt(values.size)), 4)}

    def z(scores: np.ndarray) -> np.ndarray:
        return (scores - scores.mean(axis=1, keepdims=True)) / scores.std(axis=1, keepdims=True)

    figures = {
        "claims": task.n_queries,
        "documents": task.n_docs,
        "bm25_on_stems": ndcg(lexical),
        "encoder_alone": ndcg(cosine),
        "bm25_plus_weight_times_cosine": {str(w): ndcg(lexical + np.float32(w) * cosine) for w in WEIGHTS},
        "z_scores_averaged": ndcg(z(lexical) + z(cosine)),
    }
    if variants:
        figures["reciprocal_rank_fusion"] = ndcg(_reciprocal_rank(lexical, cosine))
        figures["min_max_per_query_added"] = ndcg(_min_max(lexical) + _min_max(cosine))
    for name, other in others.items():
        figures[name] = {"alone": ndcg(other)}
        figures[name] |= {f"bm25 plus {w} times it": ndcg(lexical + np.float32(w) * other) for w in VARIANT_WEIGHTS}
    if learned is not None:
        own = ssi.load(learned, corpus=data / "corpus.jsonl.gz").scores(list(task.query_texts))
        figures["learned"] = {"bundle": str(learned), "alone": ndcg(own)}
        figures["learned"] |= {f"plus {w} times cosine": ndcg(own + np.float32(w) * cosine) for w in (0.5, 1.0, 1.5)}
    write_figures(figures, out)


if __name__ == "__main__":
    typer.run(main)
