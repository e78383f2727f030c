"""`ssi train --encoder DIR`: the sentence encoder's part of a hybrid bundle, its weight λ and its vectors.

The score is ssi.hybrid's f(q, d) + λ e(q)·e(d). How λ is set:

- **Without pairs** (`ssi train --corpus C --encoder DIR`, nothing else): the form is BM25 alone (the
  diagonal form with every weight 1: exactly the lexical part) and λ = DAY_ONE_WEIGHT = 1. Both parts then
  span the same range: the lexical part is an inner product of unit rows, at most 1, and e(q)·e(d) is a
  cosine, at most 1, so λ = 1 is the equal-weight convex combination of two scores on the same theoretical
  scale (Bruch et al. 2023, "An Analysis of Fusion Functions for Hybrid Retrieval": theoretical min-max
  normalisation, α = 0.5), which needs no data to set.
- **With pairs or clicks**: λ starts there and is learned with U and V, by the same margin ranking loss on
  the same triples (`SentenceTraining`: its gradient is Σ ∂loss/∂S ∘ e(q)·e(d) over the step's block, a
  scalar Adagrad step, kept ≥ 0), so U and V learn what BM25 and the encoder together still miss. The
  bundle keeps the λ of the step validation chose.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ssi.bundle import is_bundle
from ssi.sentence import Precision, SentenceEncoder, bulk_encoder, write_spec
from training.data import TrainingData
from training.sentence_export import (
    add_query_graph,
    encoder_of_bundle,
    encoder_of_folder,
    is_encoder_folder,
    prepare_encoder,
)
from training.sentence_projection import add_projection
from training.sentence_vectors import encode_corpus

SENTENCE_WEIGHT = "sentence_weight"  # λ, beside the validation metrics of each step (training.trainer)
DAY_ONE_WEIGHT = 1.0
DAY_ONE_RULE = "no pairs: 1, both parts at most 1 (equal-weight convex combination)"
LEARNED_RULE = "learned with U and V by the margin ranking loss (the validation-chosen step's)"


class PreparedEncoder:
    """A model folder made ready for a bundle (training.sentence_export) in a scratch folder, and its encoder."""

    def __init__(
        self, folder: Path, threads: int, precision: Precision | None = None, query: Path | None = None
    ) -> None:
        """`precision`: the graph the bundle serves and training encodes with (None: int8 where its graph passed its
        check, else fp32; or a bundle's own). `query`: a model folder distilled towards the encoder, whose graph encodes
        the queries (training.sentence_export.add_query_graph; an encoder or bundle that has a query graph keeps it)."""
        self._scratch = Path(tempfile.mkdtemp(prefix="ssi-sentence-"))
        self.source = folder
        self.threads = threads
        self.precision = precision
        self.folder = self._scratch / "sentence"
        # A hybrid bundle's encoder or an encoder folder (a static one, training.static_distil) as it is (no weights
        # to fine-tune), or a model folder's, exported.
        if is_bundle(folder):
            self.spec = encoder_of_bundle(folder, self.folder, precision)
        elif is_encoder_folder(folder):
            self.spec = encoder_of_folder(folder, self.folder, precision)
        else:
            self.spec = prepare_encoder(folder, self.folder, threads=threads, precision=precision)
        if query is not None:
            self.spec = add_query_graph(self.folder, query, threads=threads)
        self.encoder = bulk_encoder(self.folder, threads)

    @functools.cached_property
    def for_queries(self) -> SentenceEncoder:
        """What encodes queries: the query graph where the folder has one, else the encoder itself."""
        if self.spec.query is None:
            return self.encoder
        return bulk_encoder(self.folder, self.threads, part="query")

    def finetune(self, data: TrainingData, epochs: int, seed: int, device: str = "cpu") -> None:
        """Train the encoder's own weights on the training pairs (training.encoder_finetune), then export and check
        the result in place of the folder's model; the spec's name says so."""
        from training.encoder_finetune import finetune_encoder

        queries, docs = training_query_texts(data), [d.full_text for d in data.docs]
        pairs = [(queries[q], docs[d]) for q, d in zip(data.train.query_rows, data.train.doc_rows, strict=True)]
        tuned = finetune_encoder(
            self.source, pairs, self._scratch / "tuned", epochs=epochs, pooling=self.spec.pooling,
            max_length=self.spec.max_length, seed=seed, threads=self.threads, device=device,
        )  # fmt: skip
        name = f"{self.spec.name}, fine-tuned on {len(pairs)} pairs × {epochs} epochs"
        shutil.rmtree(self.folder)
        self.spec = prepare_encoder(tuned, self.folder, threads=self.threads, name=name, precision=self.precision)
        self.encoder = bulk_encoder(self.folder, self.threads)

    def cut(self, texts: Sequence[str], dims: int | None) -> None:
        """Cut the vectors to `dims` dimensions, fitted on the corpus `texts` (training.sentence_projection; None: as
        they are): after `finetune`, which exports the encoder afresh, and before anything is encoded for training."""
        if dims is None:
            return
        self.spec = add_projection(self.folder, texts, dims, self.threads)
        self.encoder = bulk_encoder(self.folder, self.threads)
        self.__dict__.pop("for_queries", None)  # its cached encoder was made before the cut

    def weighted(self, weight: float, rule: str) -> Path:
        """The folder with λ written into its spec, for `write_bundle(sentence=...)`."""
        self.spec = self.spec.with_weight(weight, rule)
        write_spec(self.folder, self.spec)
        return self.folder

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> PreparedEncoder:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def training_query_texts(data: TrainingData) -> list[str]:
    """The text of each row of data.X_queries: the documents' own texts for document–document pairs."""
    texts = [d.full_text for d in data.docs] if data.doc_doc else [q.text for q in data.queries]
    if len(texts) != data.X_queries.shape[0]:
        raise ValueError(f"{len(texts)} query texts for {data.X_queries.shape[0]} query rows")
    return texts


class SentenceTraining:
    """λ e(q)·e(d) in the trainer: every training query's and document's e, and λ with its Adagrad state."""

    def __init__(self, queries: np.ndarray, docs: np.ndarray, weight: float = DAY_ONE_WEIGHT, lr: float = 0.01):
        self.queries = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
        self.docs = torch.from_numpy(np.ascontiguousarray(docs, dtype=np.float32))
        self.doc_vectors = np.ascontiguousarray(docs, dtype=np.float32)
        self.weight = float(weight)
        self.lr = lr
        self._squares = 0.0

    @classmethod
    def of(cls, prepared: PreparedEncoder, data: TrainingData, lr: float) -> SentenceTraining:
        docs = encode_corpus(prepared.encoder, [d.full_text for d in data.docs])
        if data.doc_doc and prepared.spec.query is None:
            queries = docs
        else:  # a query graph encodes what is asked, documents' texts too where documents are the queries
            queries = encode_corpus(prepared.for_queries, training_query_texts(data))
        return cls(queries, docs, DAY_ONE_WEIGHT, lr)

    def block(self, query_rows: np.ndarray, doc_rows: np.ndarray) -> torch.Tensor:
        """e(q)·e(d) of the step's queries × pool documents (training.models.block.Block's rows)."""
        queries = self.queries[torch.from_numpy(np.asarray(query_rows, dtype=np.int64))]
        return queries @ self.docs[torch.from_numpy(np.asarray(doc_rows, dtype=np.int64))].T

    def step(self, coeff: torch.Tensor, block: torch.Tensor) -> None:
        """One Adagrad step of λ against ∂loss/∂S = `coeff` (∂S/∂λ = the block); λ stays ≥ 0."""
        grad = float((coeff * block).sum())
        self._squares += grad * grad
        if self._squares > 0:
            self.weight = max(0.0, self.weight - self.lr * grad / float(np.sqrt(self._squares)))
