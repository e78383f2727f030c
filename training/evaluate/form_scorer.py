"""A bundle's model in the evaluation harness: it ranks by the form's reference score.

The form (ssi.forms) defines f(q, d) once; this scorer only featurizes the query texts and hands
blocks of them to `form.reference_scores`, with the documents' tf-idf matrix prepared once
(`DocMatrix`), so `ssi eval`, `ssi rank` and the trainer's validation rank with the same function
the service's oracle tests check against.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ssi.bundle import Bundle, load_bundle
from ssi.forms import Form
from ssi.hybrid import hybrid_scores
from ssi.open_vocab import (
    CollectionStatistics,
    OpenPostings,
    OpenRule,
    QueryWords,
    Statistics,
    build_postings,
    collection_statistics,
    open_scores,
)
from ssi.products import DocMatrix
from ssi.records import Document
from ssi.sentence import SentenceEncoder, bulk_encoder
from ssi.vocab import Vocabulary
from training.evaluate.features import TextFeatures
from training.evaluate.scorer import DEFAULT_BLOCK, VectorScorer
from training.sentence_vectors import encode_corpus


class SentencePart:
    """A hybrid bundle's third part over a fixed corpus: the encoder, λ and every document's e(d) (ssi.hybrid).

    `cache_queries`: query vectors through training.sentence_vectors' cache too, for `ssi eval` and `ssi rank`,
    which ask for the same queries run after run (a document–document task's queries are whole documents); not
    for a long-lived ranker (`ssi.load`), whose every call would leave a file.
    """

    def __init__(
        self,
        encoder: SentenceEncoder,
        doc_vectors: np.ndarray,
        weight: float,
        *,
        cache_queries: bool = False,
        queries: SentenceEncoder | None = None,
    ) -> None:
        """`queries`: what encodes the queries (the bundle's query graph, ssi.sentence), None: `encoder`."""
        self.encoder = encoder
        self.doc_vectors = doc_vectors
        self.weight = weight
        self.cache_queries = cache_queries
        self.queries = queries or encoder

    @classmethod
    def of(
        cls, bundle: Bundle, docs: Sequence[Document], *, cache_queries: bool = False, threads: int = 2
    ) -> SentencePart | None:
        """The part of a hybrid bundle over `docs` (their vectors from training.sentence_vectors), else None."""
        if bundle.sentence is None:
            return None
        encoder = bulk_encoder(bundle.sentence_path, threads)
        queries = bulk_encoder(bundle.sentence_path, threads, part="query") if bundle.sentence.query else None
        texts = [d.full_text for d in docs]
        vectors = encode_corpus(encoder, texts) if texts else encoder.encode(texts)
        return cls(encoder, vectors, bundle.sentence.weight, cache_queries=cache_queries, queries=queries)

    def over(self, texts: Sequence[str]) -> SentencePart:
        """The same encoder and λ over other documents (`texts`, encoded here, not cached)."""
        return SentencePart(self.encoder, self.encoder.encode(texts), self.weight, queries=self.queries)

    def add_to(self, scores: np.ndarray, query_texts: Sequence[str]) -> np.ndarray:
        """`scores` (the form's, queries × documents) + λ e(q)·e(d)."""
        texts = list(query_texts)
        queries = encode_corpus(self.queries, texts) if self.cache_queries else self.queries.encode(texts)
        return hybrid_scores(scores, queries, self.doc_vectors, self.weight)


def same_vocabulary(a: Vocabulary, b: Vocabulary) -> bool:
    """Same words in the same order with the same idf and weighting: the same rows."""
    return a is b or (
        a.words == b.words and np.array_equal(a.idf, b.idf) and a.hashing is b.hashing is None and a.bm25 == b.bm25
    )


class FormScorer(VectorScorer):
    """Exact scores of a model form over a fixed corpus."""

    def __init__(
        self,
        vocab: Vocabulary,
        form: Form,
        docs: Sequence[Document] | None = None,
        *,
        features: TextFeatures | None = None,
        doc_matrix: sp.csr_matrix | DocMatrix | None = None,
        block_size: int = DEFAULT_BLOCK,
        open_vocab: bool = False,
        open_postings: OpenPostings | None = None,
        statistics: Statistics | CollectionStatistics = "bundle",
        sentence: SentencePart | None = None,
    ) -> None:
        """Give `docs` (featurized here) or their tf-idf `doc_matrix` (reused as is). `sentence`: a hybrid
        bundle's third part (ssi.hybrid), added to every score.

        With `docs`, the form also gets their ids: a form with per-document vectors (halftrans) uses
        them for the documents it was trained on and the functional map for any other. With `open_vocab`
        (off by default) and `docs` (or `open_postings`, the documents' new words), a BM25 bundle's lexical
        part covers the words it does not know as well (ssi.open_vocab); otherwise only its own words count,
        and the scores are the form's reference scores, bit for bit.

        `statistics` (with `open_vocab` only): "bundle" keeps the bundle's idf and avg_len for its words;
        "collection" takes them from `docs` (ssi.open_vocab.CollectionStatistics: the lexical part is then BM25 over
        these documents); or give them (`CollectionStatistics`: the service's brute force, whose avg_len is the
        one its index was computed with) with `docs`, or with a `doc_matrix` whose lexical rows were weighed by them.
        """
        if form.vocab_size != vocab.size:
            raise ValueError(f"the form's arrays have D = {form.vocab_size}, the vocabulary {vocab.size} words")
        self.vocab = vocab
        self.form = form
        self.sentence = sentence
        self.features = features if features is not None else TextFeatures(vocab)
        if not same_vocabulary(self.features.vocab, vocab):
            raise ValueError("the features' vocabulary is not the model's vocabulary")
        if statistics not in ("bundle", "collection") and not isinstance(statistics, CollectionStatistics):
            raise ValueError(f"statistics must be 'bundle' or 'collection', got {statistics!r}")
        opens = open_vocab and OpenRule.of(vocab, form) is not None
        # The served collection's statistics ("collection"; None: the bundle's, or a vocabulary that stays closed).
        self.collection = statistics if opens and isinstance(statistics, CollectionStatistics) else None
        if doc_matrix is None:
            if docs is None:
                raise ValueError("give the documents or their tf-idf matrix")
            texts = [d.full_text for d in docs]
            doc_matrix = self.features.documents(texts)
            if opens and statistics == "collection":
                lengths = np.asarray([ids.shape[0] for ids in self.features.tokens.ids(texts)], dtype=np.int64)
                self.collection = collection_statistics(vocab, doc_matrix, lengths)
            if self.collection is not None:
                weighed = self.collection.vocabulary(vocab)
                if weighed is not vocab:  # lexical rows at the collection's avg_len, semantic rows the bundle's
                    lexical = TextFeatures(weighed, self.features.tokens).documents(texts)
                    doc_matrix = DocMatrix(lexical, semantic=vocab.semantic_rows(doc_matrix))
        elif opens and statistics == "collection":
            raise ValueError("collection statistics are computed from the documents: give `docs`, not a matrix")
        self.docs = vocab.doc_matrix(doc_matrix) if not isinstance(doc_matrix, DocMatrix) else doc_matrix
        if docs is not None and self.docs.ids is None:
            self.docs = self.docs.with_ids([d.id for d in docs])
        if self.docs.n_features != vocab.size:
            raise ValueError(f"document matrix has {self.docs.n_features} features, vocabulary {vocab.size}")
        self.block_size = block_size
        self.open_rule = (
            OpenRule.of(vocab, form, None if self.collection is None else self.collection.bm25) if open_vocab else None
        )
        self.open = open_postings if self.open_rule is not None else None
        if self.open_rule is not None and self.open is None and docs is not None:
            token_lists = self.features.tokens.ids([d.full_text for d in docs])
            words = self.features.tokens.words
            self.open = build_postings(self.open_rule, [[words[i] for i in ids.tolist()] for ids in token_lists])

    @classmethod
    def from_bundle(
        cls,
        bundle: Bundle | Path | str,
        docs: Sequence[Document] | None = None,
        *,
        features: TextFeatures | None = None,
        doc_matrix: sp.csr_matrix | DocMatrix | None = None,
        block_size: int = DEFAULT_BLOCK,
        open_vocab: bool = False,
        statistics: Statistics = "bundle",
    ) -> FormScorer:
        """A scorer for a saved bundle (a path is loaded and verified: `BundleError` if unusable)."""
        if not isinstance(bundle, Bundle):
            bundle = load_bundle(bundle)
        if bundle.sentence is not None and docs is None:
            raise ValueError(f"{bundle.path}: a hybrid bundle encodes its documents' texts: give `docs`")
        return cls(
            bundle.vocab,
            bundle.form,
            docs,
            features=features,
            doc_matrix=doc_matrix,
            block_size=block_size,
            open_vocab=open_vocab,
            statistics=statistics,
            sentence=SentencePart.of(bundle, docs, cache_queries=True) if docs is not None else None,
        )

    @property
    def n_docs(self) -> int:
        return self.docs.n_docs

    def params(self) -> dict[str, Any]:
        """The form and its sizes as its arrays declare them (no N for hash kernels, H, F or T where they exist)."""
        return {"form": self.form.name, **{k: v for k, v in self.form.sizes.items() if k != "D"}, "D": self.vocab.size}

    def score_vectors(self, Q: sp.csr_matrix) -> np.ndarray:
        """The form's reference scores; with collection statistics, over the documents' lexical rows at the
        collection's avg_len, plus Σ w_i Δq_i d_i where a query word's collection idf differs from the bundle's
        (ssi.open_vocab.CollectionStatistics.lexical_change: the query's lexical row idf_c ∘ qtf / Z(q))."""
        scores = self.form.reference_scores(Q, self.docs)
        if self.collection is None:
            return scores
        extra = self.collection.lexical_scores_change(self.vocab, self.form, Q, self.docs)
        return scores if extra is None else (scores.astype(np.float64) + extra).astype(np.float32)

    def score(self, query_texts: Sequence[str]) -> np.ndarray:
        """The form's reference scores plus the open vocabulary's term o(q, d) (ssi.open_vocab), added only to
        queries with a new word that some document holds: every other score is the reference's, bit for bit."""
        texts = list(query_texts)
        scores = super().score(texts)
        if self.sentence is not None:
            scores = self.sentence.add_to(scores, texts)
        if self.open_rule is None or self.open is None or self.open.n_words == 0:
            return scores
        tokens = self.features.tokens
        words = tokens.words
        token_lists = [[words[i] for i in ids.tolist()] for ids in tokens.ids(texts)]
        extra = open_scores(self.open_rule, self.open, token_lists, self.n_docs, self.n_docs)
        if extra is not None:
            touched = np.flatnonzero(extra.any(axis=1))
            scores[touched] = (scores[touched].astype(np.float64) + extra[touched]).astype(np.float32)
        return scores

    def has_terms(self, query_texts: Sequence[str]) -> np.ndarray:
        """Whether each query has a word to rank by: a bundle word, or a new word some document holds."""
        texts = list(query_texts)
        if self.sentence is not None:  # a hybrid bundle ranks every text by its sentence vector at least
            return np.ones(len(texts), dtype=bool)
        known = np.diff(self.features(texts).indptr) > 0
        if self.open_rule is None or self.open is None or self.open.n_words == 0 or known.all():
            return known
        df = self.open.df()
        words = self.features.tokens.words
        for i, ids in enumerate(self.features.tokens.ids(texts)):
            if not known[i]:
                tokens = [words[j] for j in ids.tolist()]
                known[i] = bool(
                    self.open_rule.query_weights(QueryWords.of_tokens(self.open_rule.vocab, tokens), df, self.n_docs)
                )
        return known
