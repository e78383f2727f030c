"""`ssi.load`: a bundle ranking a corpus in this process, exactly, by its form's own score.

What ranks here is what `ssi rank` and `ssi eval` rank with: the evaluation harness's `FormScorer`, which
featurizes the query texts and hands them to the form's numpy reference score
(`Form.reference_scores`, ssi.forms: the one definition of f(q, d) that the service's oracle tests check
against), and its `top_k` (score descending, ties by corpus position). Every document is scored, so the
top k is exact, with no index in between.

A bundle's ONNX query encoder is not needed: it is the service's way to embed a query for its FAISS
index, and the reference score computes the same embedding in numpy. So this module needs neither
PyTorch nor onnxruntime, only the base install (a notebook, or a process beside the service); a hybrid
bundle's sentence encoder (ssi.hybrid) is the exception: it runs on onnxruntime (the `encoder` extra).

In the examples, `bundle` is a trained bundle folder, `corpus` the JSONL corpus it should rank, `query` a text.

Examples:
    >>> import ssi
    >>> model = ssi.load(bundle, corpus=corpus)
    >>> hits = model.search(query, k=3)
    >>> [type(hit).__name__ for hit in hits]
    ['Hit', 'Hit', 'Hit']
    >>> hits[0].score >= hits[1].score >= hits[2].score
    True
    >>> model.search("words it never saw", k=3)
    []
    >>> model.score([query], ["a sweet red apple", "a car engine"]).shape
    (1, 2)

Documents may carry `fields` (a corpus line's `fields` object, or `Document(..., fields={...})`), and a search may be
restricted to those matching a filter, the service's filter language (ssi.fields.filters, docs/guides/fields.md):
the hits are exactly the top k among the matching documents, as the service's filtered search is.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from ssi.bundle import Bundle, load_bundle
from ssi.corpus import read_corpus
from ssi.fields.corpus import CorpusFields, top_k_among
from ssi.open_vocab import CollectionStatistics, OpenPostings, OpenRule, Statistics, build_postings
from ssi.products import DocMatrix
from ssi.records import Document
from ssi.tokenize import tokenize
from training.evaluate.features import TextFeatures
from training.evaluate.form_scorer import FormScorer, SentencePart
from training.evaluate.rank import top_k

StrPath = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked document of the corpus: its id, its exact score f(q, d) and its position in the corpus."""

    id: str
    score: float
    position: int


class Model:
    """A loaded bundle and the corpus it ranks (documents featurized once, when loaded).

    `open_vocab` (on by default): a BM25 bundle's lexical part also covers the documents' words it does not
    know (ssi.open_vocab, docs/guides/open-vocabulary.md); off, it ranks by the bundle's words only. `statistics`
    (with `open_vocab`): "bundle" keeps the bundle's idf and avg_len for its words, "collection" takes every
    word's from the documents ranked (the corpus; for `score`, the documents given).
    """

    def __init__(
        self,
        bundle: Bundle,
        documents: Sequence[Document] | None = None,
        *,
        open_vocab: bool = True,
        statistics: Statistics = "bundle",
        fields: dict[str, str] | None = None,
    ) -> None:
        if statistics != "bundle" and not open_vocab:
            raise ValueError("statistics='collection' is a rule of the open vocabulary: not with open_vocab=False")
        self.bundle = bundle
        self.open_vocab = open_vocab
        self.statistics: Statistics = statistics
        self.documents: list[Document] = list(documents) if documents is not None else []
        self.ids = [d.id for d in self.documents]
        # The documents' fields, checked and indexed once (ssi.fields.corpus): a bad value fails the load, naming it.
        self._fields = CorpusFields(self.documents, fields) if fields or any(d.fields for d in self.documents) else None
        self._doc_matrix: DocMatrix | None = None
        self._open: OpenPostings | None = None
        self._collection: CollectionStatistics | None = None
        # A hybrid bundle's third part over the corpus (ssi.hybrid: its encoder, λ and every document's e(d)).
        # Loaded once: `score` reuses its encoder for the documents it is given.
        self._sentence = SentencePart.of(bundle, self.documents)
        if self.documents:
            # The rows carry their ids: a keyed form (halftrans) uses its own vector for a document it was trained on.
            scorer = FormScorer(bundle.vocab, bundle.form, self.documents, open_vocab=open_vocab, statistics=statistics)
            self._doc_matrix, self._open, self._collection = scorer.docs, scorer.open, scorer.collection

    @property
    def form(self) -> str:
        """The model form's name (ssi.forms), as the bundle's manifest gives it."""
        return self.bundle.manifest.form

    def __repr__(self) -> str:
        return f"Model(form={self.form!r}, bundle={str(self.bundle.path)!r}, documents={len(self.documents)})"

    def _scorer(
        self,
        doc_matrix: DocMatrix,
        open_postings: OpenPostings | None = None,
        collection: CollectionStatistics | None = None,
        sentence: SentencePart | None = None,
    ) -> FormScorer:
        # Fresh features per call: TextFeatures memoizes every text it sees, which a long-lived model must not.
        vocab, form = self.bundle.vocab, self.bundle.form
        return FormScorer(
            vocab,
            form,
            features=TextFeatures(vocab),
            doc_matrix=doc_matrix,
            open_vocab=self.open_vocab,
            open_postings=open_postings,
            statistics=collection if collection is not None else "bundle",
            sentence=sentence,
        )

    def _corpus_scorer(self) -> FormScorer:
        if self._doc_matrix is None:
            raise ValueError("this model has no corpus to rank: load it with corpus=... (or use score())")
        return self._scorer(self._doc_matrix, self._open, self._collection, self._sentence)

    def scores(self, texts: Sequence[str]) -> np.ndarray:
        """f(q, d) of each query text against every corpus document: float32 [len(texts), len(documents)]."""
        return self._corpus_scorer().score(list(texts))

    @property
    def field_types(self) -> dict[str, str]:
        """The corpus's field types (declared, or fixed by the first document using the name)."""
        return dict(self._fields.types) if self._fields is not None else {}

    def matching(self, filter: dict[str, Any]) -> list[str]:
        """The ids of the corpus documents matching `filter`, in corpus order (a `FieldError` naming a problem)."""
        return [self.ids[row] for row in self._rows(filter).tolist()]

    def _rows(self, filter: dict[str, Any]) -> np.ndarray:
        if self._fields is None:  # no document has fields: a filter names fields the corpus lacks
            return CorpusFields([]).rows(filter)
        return self._fields.rows(filter)

    @overload
    def search(self, texts: str, k: int = 10, *, filter: dict[str, Any] | None = None) -> list[Hit]: ...

    @overload
    def search(self, texts: Sequence[str], k: int = 10, *, filter: dict[str, Any] | None = None) -> list[list[Hit]]: ...

    def search(
        self, texts: str | Sequence[str], k: int = 10, *, filter: dict[str, Any] | None = None
    ) -> list[Hit] | list[list[Hit]]:
        """The k best corpus documents for a query text (a list of hits), or for each of several (a list of lists).

        Exact: every document is scored; ties are broken by corpus position, as `ssi rank` and the service do.
        A query with no word to rank by (none the model knows, nor, with `open_vocab`, a new word a document
        holds: ssi.open_vocab) gets no hits, as from the service. `filter` (the service's filter language,
        docs/guides/fields.md): only the documents matching it are ranked, the exact top k among them; an unknown
        field, a value of another type than the field's or a malformed clause is a `FieldError` (a ValueError).
        """
        if k < 1:
            raise ValueError(f"k must be positive, got {k}")
        queries = [texts] if isinstance(texts, str) else list(texts)
        if not queries:
            return []
        rows = self._rows(filter) if filter is not None else None  # checked before any query is scored
        scorer = self._corpus_scorer()
        known = scorer.has_terms(queries)  # memoized: score() featurizes them once
        scores = scorer.score(queries)
        if rows is None:
            cols, values = top_k(scores, k)
        else:
            among = [top_k_among(row_scores, rows, k) for row_scores in scores]
            cols, values = [c for c, _ in among], [v for _, v in among]
        ranked = [
            [Hit(self.ids[c], float(v), c) for c, v in zip(row_cols.tolist(), row_values.tolist(), strict=True)]
            if asked
            else []
            for row_cols, row_values, asked in zip(cols, values, known.tolist(), strict=True)
        ]
        return ranked[0] if isinstance(texts, str) else ranked

    def score(self, queries: Sequence[str], documents: Sequence[str | Document]) -> np.ndarray:
        """f(q, d) for every query text and every given document: float32 [len(queries), len(documents)].

        Documents may be texts or `Document`s; a keyed form (halftrans) recognises a `Document` it was trained
        on by its id and text when every document given is one, and scores any other through its functional map.
        """
        docs = list(documents)
        if not docs:
            return np.zeros((len(queries), 0), dtype=np.float32)
        vocab, form = self.bundle.vocab, self.bundle.form
        if all(isinstance(d, Document) for d in docs) or self.statistics != "bundle":
            # Collection statistics are those of the documents given: texts become documents named by position.
            given = [d if isinstance(d, Document) else Document(str(i), "", d) for i, d in enumerate(docs)]
            scorer = FormScorer(vocab, form, given, open_vocab=self.open_vocab, statistics=self.statistics)
            sentence = self._sentence.over([d.full_text for d in given]) if self._sentence is not None else None
            return self._scorer(scorer.docs, scorer.open, scorer.collection, sentence).score(list(queries))
        texts = [d.full_text if isinstance(d, Document) else d for d in docs]
        matrix = vocab.doc_matrix(TextFeatures(vocab).documents(texts))
        rule = OpenRule.of(vocab, form) if self.open_vocab else None
        postings = None if rule is None else build_postings(rule, [tokenize(t) for t in texts])
        sentence = self._sentence.over(texts) if self._sentence is not None else None
        return self._scorer(matrix, postings, sentence=sentence).score(list(queries))


def _documents(corpus: StrPath | Sequence[Document] | Sequence[str]) -> list[Document]:
    if isinstance(corpus, str | os.PathLike):
        return read_corpus(Path(corpus))
    # Plain texts get their position as id.
    return [d if isinstance(d, Document) else Document(str(i), "", d) for i, d in enumerate(corpus)]


def load(
    bundle: StrPath | Bundle,
    corpus: StrPath | Sequence[Document] | Sequence[str] | None = None,
    *,
    verify_hashes: bool = True,
    open_vocab: bool = True,
    statistics: Statistics = "bundle",
    fields: dict[str, str] | None = None,
) -> Model:
    """Load a bundle (verified: `ssi.bundle.BundleError` names what is wrong) to rank `corpus` in process.

    `corpus`: a JSONL file as `ssi train` reads (id, title, text), a list of `Document`s, or a list of texts
    (their ids are their positions, "0", "1", ...); None for a model that only scores given pairs
    (`Model.score`). `bundle` may be what `ssi.train` returned. `open_vocab` (on by default) lets a BM25
    bundle's lexical part count the corpus's words it never saw (ssi.open_vocab, docs/guides/open-vocabulary.md);
    with it, `statistics="collection"` weighs every word with the corpus's own idf and avg_len (BM25 over the corpus)
    instead of the bundle's. Documents may carry `fields` (a JSONL line's `fields` object); `fields` here declares
    field types (name → keyword, keyword_list, integer, float, boolean or date) as a schema file does for
    `ssi serve`; other names take the type of their first value. A value of another type is a `FieldTypeMismatch`
    naming the document, the field and both types. `Model.search(..., filter=...)` ranks the matching documents.
    """
    loaded = bundle if isinstance(bundle, Bundle) else load_bundle(Path(bundle), verify_hashes=verify_hashes)
    corpus_docs = _documents(corpus) if corpus is not None else None
    return Model(loaded, corpus_docs, open_vocab=open_vocab, statistics=statistics, fields=fields)
