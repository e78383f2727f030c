"""Texts to vectors for one bundle: tf-idf with its vocabulary, queries through its ONNX encoder, documents
through its form.

The service never computes a score's parts itself: a query's index embedding is the encoder's
output (the trainer's export of the form's query map, scaled to unit length for a cosine form,
checked against it here at load), and a document's is `form.embed_documents` (V d for SSI,
V d + (V₃ d)∘(Y₃ d) for PSI-3, d for full W, B d/‖B d‖ for a projection).
Writes are embedded before the store commits them (`prepare`), so a text the model cannot take is
refused before anything changes. A hybrid bundle (ssi.hybrid) adds its sentence encoder's part: a query is
embedded as [A q, e(q)] and a document as [v(d), λ e(d)], from their texts (`embed_queries(rows, texts)`); a
document's e(d) comes from the collection's sentence cache (service.sentence_cache) where the state builder gave
one, so a text another bundle with the same encoder has seen is not encoded again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from service.bulk_featurize import BulkFeaturizer, TextWords, words_of_tokens
from service.encoder import QueryEncoder
from service.query_vectors import QueryVectorCache
from service.sentence_cache import SentenceCache, encoder_key
from ssi.bundle import Bundle, BundleError
from ssi.hybrid import join_documents, join_queries
from ssi.open_vocab import DocEntries, OpenRule, QueryWords, Statistics, at_avg_len
from ssi.records import Document
from ssi.sentence import Device, Part, Precision, SentenceEncoder, SentenceError, available_devices, bulk_encoder
from ssi.tokenize import tokenize
from ssi.vocab import TermCounts

BULK_QUERY_CHARS = 4096  # texts at least this long in all are featurized with arrays (service.bulk_featurize)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Prepared:
    """Documents featurized and embedded, ready to apply after the store has committed them."""

    ids: list[str]
    tfidf: sp.csr_matrix  # the lexical index's rows (weighed with the collection's avg_len where it has its own)
    embeddings: np.ndarray
    open_entries: list[DocEntries] | None = None  # each document's new words (ssi.open_vocab); None: closed


def keep_top_words(tfidf: sp.csr_matrix, max_words: int) -> sp.csr_matrix:
    """Each query row restricted to its `max_words` largest entries (ties: the lower word id), back to unit length.

    The result is exactly the query row of the text with every other word removed, since a word's
    weight does not depend on the others until the final scaling (tf-idf and BM25's query rows alike).
    Rows within the cap are returned as they are.
    """
    counts = np.diff(tfidf.indptr)
    if counts.max(initial=0) <= max_words:
        return tfidf
    rows = []
    for row in range(tfidf.shape[0]):
        start, end = int(tfidf.indptr[row]), int(tfidf.indptr[row + 1])
        ids, values = tfidf.indices[start:end], tfidf.data[start:end]
        if end - start > max_words:
            keep = np.sort(np.lexsort((ids, -values))[:max_words])
            ids, values = ids[keep], values[keep] / np.linalg.norm(values[keep])
        rows.append(sp.csr_matrix((values, ids, [0, ids.shape[0]]), shape=(1, tfidf.shape[1]), dtype=np.float32))
    return sp.vstack(rows, format="csr")


class Embedder:
    """The bundle's text pipeline, query encoder and document embedding, in one place."""

    def __init__(
        self,
        bundle: Bundle,
        threads: int,
        *,
        open_vocab: bool = False,
        statistics: Statistics = "bundle",
        precision: Precision | None = None,
        query_cache: QueryVectorCache | None = None,
        query_graph: Part = "query",
    ) -> None:
        """`precision`: the sentence encoder's graph (SSI_ENCODER_PRECISION; None: the bundle's). `query_cache`: where
        e(q) of repeated queries is kept (service.query_vectors; None: every query encoded). `query_graph`: "query"
        encodes queries by the bundle's query graph where it has one (SSI_QUERY_GRAPH), "document" by the encoder."""
        if not bundle.form.served_exactly:
            raise BundleError(
                f"{bundle.path}: form '{bundle.form.name}' cannot be ranked from an inner-product index "
                "(it is a rerank stage); this service does not serve it"
            )
        self.bundle = bundle
        self.form = bundle.form
        self.threads = threads
        self.index_dims = bundle.manifest.index_dims
        form_dims = self.index_dims - bundle.manifest.sentence_dims
        self.encoder = QueryEncoder(bundle.encoder_path, bundle.manifest.vocab_size, form_dims, threads)
        # A hybrid bundle's e (ssi.sentence); None: the form's parts alone. `query_sentence` encodes the queries: the
        # bundle's query graph, or `sentence` itself.
        self.sentence: SentenceEncoder | None = None
        self.query_sentence: SentenceEncoder | None = None
        self.query_cache = query_cache
        self.sentence_key = ""  # the encoder's key (service.sentence_cache.encoder_key), for a hybrid bundle
        self.query_key = ""  # the query encoder's
        if bundle.sentence is not None:
            try:
                self.sentence = SentenceEncoder(bundle.sentence_path, threads, precision)
                self.query_sentence = self.sentence
                if bundle.sentence.query is not None and query_graph == "query":
                    self.query_sentence = SentenceEncoder(bundle.sentence_path, threads, precision, part="query")
                    log.info("queries are encoded by the bundle's query graph (%s)", bundle.sentence.query.name)
            except SentenceError as exc:
                raise BundleError(str(exc)) from None
            self.sentence_key = encoder_key(bundle, self.sentence.precision)
            self.query_key = encoder_key(bundle, self.query_sentence.precision, self.query_sentence.part)
        # Documents' e(d) kept across bundles with this encoder (service.sentence_cache), set by the state builder;
        # None: every document's text is encoded (a bundle without an encoder, or an embedder without a collection).
        self.sentence_cache: SentenceCache | None = None
        self.encoder.check_against(self.form.query_map(), normalize=self.form.normalizes_query)
        # None (always, unless `open_vocab`: SSI_OPEN_VOCAB): the lexical part stays on the bundle's words.
        self.open_vocab = open_vocab
        self.open_rule = OpenRule.of(bundle.vocab, self.form) if open_vocab else None
        # SSI_OPEN_VOCAB_STATISTICS=collection (with the open vocabulary on; ssi.open_vocab): the lexical rows are
        # weighed with the collection's avg_len (`use_avg_len`, once the state knows it), the query's lexical values
        # with the collection's live idf (ModelState); U q and V d keep the bundle's rows.
        self.collection_statistics = statistics == "collection" and self.open_rule is not None
        self.lexical_vocab = bundle.vocab  # weighs the rows of the lexical index
        self._avg_len_set = False

    def use_avg_len(self, avg_len: float) -> None:
        """Weigh the lexical rows (and new words' d_t) with the collection's `avg_len` from now on (collection
        statistics only): the documents' the index was computed from, or the snapshot's."""
        if not self.collection_statistics:
            raise RuntimeError("the collection's avg_len weighs rows only with SSI_OPEN_VOCAB_STATISTICS=collection")
        vocab = self.bundle.vocab
        self.lexical_vocab = at_avg_len(vocab, avg_len)
        self.open_rule = OpenRule.of(vocab, self.form, self.lexical_vocab.bm25)
        self._avg_len_set = True

    @property
    def avg_len(self) -> float | None:
        """The collection's avg_len the lexical rows are weighed with (collection statistics), else None."""
        if not self.collection_statistics:
            return None
        assert self.lexical_vocab.bm25 is not None
        return self.lexical_vocab.bm25.avg_len

    def featurize_queries(self, texts: Sequence[str], max_words: int | None = None) -> sp.csr_matrix:
        """Query rows (unit length); with `max_words`, a long text keeps only its most heavily weighted words.

        Texts of BULK_QUERY_CHARS or more in all (web pages) take the array featurizer (the same rows, byte for
        byte): a 20 kB page in 0.8 ms against 1.5 ms word by word; below that its fixed cost does not pay."""
        texts = list(texts)
        if _long(texts):
            rows = self._bulk.featurize(texts, documents=False)
        else:
            rows = self.bundle.vocab.featurize_queries(texts)
        return rows if max_words is None else keep_top_words(rows, max_words)

    def featurize_with_words(
        self, texts: Sequence[str], max_words: int | None = None
    ) -> tuple[sp.csr_matrix, list[QueryWords]]:
        """`featurize_queries` and each text's words for the open vocabulary's term, from one pass over the texts:
        their words are found and looked up once, for the rows and the new words alike (a 20 kB page tokenized and
        looked up again for them took 4.4 ms of its /match under cProfile, a fifth of it). A text cut to
        `max_words` keeps the bundle words its row kept and every new word (`QueryWords.keeping`): the text with
        every other word removed."""
        words = self._words(texts)
        counts = self.bundle.vocab.term_counts(words.ids, words.counts)
        full = self.bundle.vocab.rows_from_counts(counts, words.counts, documents=False)
        rows = full if max_words is None else keep_top_words(full, max_words)
        out = self._query_words(words, counts)
        if rows is not full:  # some text was cut (keep_top_words returns the rows themselves where none is)
            for i in range(rows.shape[0]):
                kept = rows.indices[rows.indptr[i] : rows.indptr[i + 1]]
                if kept.shape[0] >= max_words:  # perhaps cut (one within the cap keeps all its words either way)
                    out[i] = out[i].keeping(kept)
        return rows, out

    def query_words(self, texts: Sequence[str]) -> list[QueryWords] | None:
        """Each text's words for the open term (not cut), or None for a closed vocabulary."""
        if self.open_rule is None:
            return None
        words = self._words(texts)
        return self._query_words(words, self.bundle.vocab.term_counts(words.ids, words.counts))

    def _words(self, texts: Sequence[str]) -> TextWords:
        """The texts' words with their ids and unknown words, found as `featurize_queries` finds them. Only with an
        open rule: a BM25 vocabulary without hashing, whose rows are made from these ids alone."""
        if self.open_rule is None:
            raise RuntimeError("a text's new words are asked for with the open vocabulary on only")
        texts = list(texts)
        if _long(texts):
            return self._bulk.words(texts, unknown=True)
        return words_of_tokens(self.bundle.vocab, [tokenize(t) for t in texts])

    def _query_words(self, words: TextWords, counts: TermCounts) -> list[QueryWords]:
        """Each text's `QueryWords` from its words and their term counts (`Vocabulary.term_counts`), which its row is
        weighed from: the bundle words are counted once for both."""
        vocab, at = self.bundle.vocab, counts.indptr.tolist()
        return [
            QueryWords.of(vocab, counts.indices[at[i] : at[i + 1]], counts.data[at[i] : at[i + 1]], unknown)
            for i, (_, unknown) in enumerate(words.per_text())
        ]

    def warm_page_featurizer(self) -> None:
        """Build what a web page's featurizing makes on first use (the word table, and the word-character table of
        every code point that a text outside ASCII needs): tens of ms that an adverts collection spends as it loads
        rather than inside its first /match (service.routes.match.warm_adverts)."""
        self._bulk.featurize(["warm é"], documents=False)

    @functools.cached_property
    def _bulk(self) -> BulkFeaturizer:
        """Made on the first long text (its word table: ~16 MB for 244k words), so /search alone never builds it."""
        return BulkFeaturizer(self.bundle.vocab)

    def featurize_documents(self, texts: Sequence[str]) -> sp.csr_matrix:
        """Document rows: what the index embeds and the exact rerank's lexical part reads."""
        return self.bundle.vocab.featurize_documents(list(texts))

    def embed_queries(self, tfidf: sp.csr_matrix, texts: Sequence[str] | None = None) -> np.ndarray:
        """float32 [queries, M]: (query map) q by the exported ONNX graph (to unit length for a cosine form); for
        a hybrid bundle [A q, e(q)], e from the query `texts` (one encoder call for them all)."""
        embedded = self.encoder.encode(tfidf)
        if self.query_sentence is None:
            return embedded
        texts = self._texts_of(texts, tfidf.shape[0])
        if self.query_cache is not None:
            return join_queries(embedded, self.query_cache.vectors(self.query_key, self.query_sentence, texts))
        return join_queries(embedded, self.query_sentence.encode(texts))

    def embed_documents(
        self,
        tfidf: sp.csr_matrix,
        doc_ids: Sequence[str] | None = None,
        texts: Sequence[str] | None = None,
        sentence: np.ndarray | None = None,
    ) -> np.ndarray:
        """float32 [documents, M], C order: what the index stores for each document row, as the form defines it
        (from the row's semantic row, ssi.vocab.Vocabulary.semantic_rows); for a hybrid bundle [v(d), λ e(d)],
        e from the documents' full `texts` (`document_sentences`), or `sentence`, e(d) unscaled, where the caller
        has them (a build: service.sentence_cache.SentenceBuild).

        `doc_ids` reach a form with per-document vectors (half-transductive: a training document with
        its text unchanged keeps its free vector, any other falls back to the functional map).
        """
        semantic = self.bundle.vocab.semantic_rows(tfidf)  # the rows themselves under tf-idf
        embedded = np.ascontiguousarray(self.form.embed_documents_of(semantic, doc_ids), dtype=np.float32)
        if self.sentence is None:
            return embedded
        if sentence is None:
            sentence = self.document_sentences(self._texts_of(texts, tfidf.shape[0]))
        return join_documents(embedded, sentence, self.sentence.spec.weight)

    def start_up_encoder(self, threads: int, device: Device = "cpu") -> Callable[[list[str]], np.ndarray]:
        """e(d) for the build of a collection's first load, on `threads` cores on `device` (SSI_ENCODE_DEVICE): no
        worker serves it yet and the others wait for its snapshot, while the serving encoder has SSI_THREADS (one a
        worker where the workers fill the cores) on the CPU. The serving encoder itself for one core of the CPU; else
        an encoder for texts in bulk (ssi.sentence.bulk_encoder: a one-thread session a core), loaded at its first
        call, so a build that finds every e(d) in the sentence cache never loads it."""
        if self.sentence is None:
            raise RuntimeError("a bundle without a sentence encoder has no e(d)")
        device = "cpu" if device == "auto" and "cuda" not in available_devices() else device
        if threads <= 1 and device == "cpu":
            return self.sentence.encode
        load = functools.cache(
            functools.partial(bulk_encoder, self.bundle.sentence_path, threads, self.sentence.precision, device=device)
        )

        def encode(texts: list[str]) -> np.ndarray:
            encoder = load()
            log.info("encoding %d documents' e(d) on the %s", len(texts), encoder.device)
            return encoder.encode(texts)

        return encode

    def document_sentences(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [texts, E]: e(d) of documents' texts, unscaled: the sentence cache's where it holds a text (and
        those encoded now kept in it), else encoded."""
        if self.sentence is None:
            raise RuntimeError("a bundle without a sentence encoder has no e(d)")
        if self.sentence_cache is not None:
            return self.sentence_cache.vectors(texts)
        return self.sentence.encode(texts)

    @staticmethod
    def _texts_of(texts: Sequence[str] | None, rows: int) -> list[str]:
        """The texts a hybrid bundle's encoder reads, one per row; a caller that gives none is a bug."""
        if texts is None or len(texts) != rows:
            raise RuntimeError(f"a hybrid bundle embeds texts: {rows} rows came with {texts and len(texts)} texts")
        return list(texts)

    def lexical_rows(self, texts: Sequence[str], rows: sp.csr_matrix) -> sp.csr_matrix:
        """The lexical index's rows of `texts` whose bundle rows are `rows`: those rows, or with the collection's
        statistics the texts weighed with its avg_len."""
        if self.lexical_vocab is self.bundle.vocab:
            return rows
        return self.lexical_vocab.featurize_documents(list(texts))

    def prepare(self, docs: Sequence[Document]) -> Prepared:
        if self.collection_statistics and not self._avg_len_set:
            raise RuntimeError("the collection's avg_len is not known yet (the state sets it when it is built)")
        texts = [doc.full_text for doc in docs]
        tfidf = self.featurize_documents(texts)
        ids = [doc.id for doc in docs]
        entries = self.open_entries(texts)
        embeddings = self.embed_documents(tfidf, ids, texts)
        return Prepared(ids=ids, tfidf=self.lexical_rows(texts, tfidf), embeddings=embeddings, open_entries=entries)

    def open_entries(self, texts: Sequence[str]) -> list[DocEntries] | None:
        """Each text's new words with their document values (ssi.open_vocab), or None for a closed vocabulary."""
        if self.open_rule is None:
            return None
        return [self.open_rule.document_entries(tokenize(text)) for text in texts]


def _long(texts: list[str]) -> bool:
    """Whether texts are long enough in all for the array featurizer to pay (BULK_QUERY_CHARS)."""
    return sum(map(len, texts)) >= BULK_QUERY_CHARS
