"""The open vocabulary: the lexical part over words the bundle does not know (issue 35), defined once.

The learned part of f(q, d) = (U q)·(V d) + Σ w_i q_i d_i stays on the bundle's D words; the lexical part
needs no training, so it also covers every word of every served document that the bundle lacks (a "new"
word, spelled as the vocabulary spells words: same tokenizer, same stemmer). f becomes

    f(q, d) = reference_score(q, d) + o(q, d),     o(q, d) = w_new · Σ_{t new} idf_t · qtf_t · d_t / Z(q)

- d_t is BM25's saturated term frequency with the bundle's k1, b and avg_len, |d| counting every token
  (ssi.weighting, `Bm25.document_values`): a document's values never depend on other documents.
- idf_t = Lucene's BM25 idf (`bm25_idf`) from the *served collection's live* document frequency and size
  at query time (a word no live document holds adds nothing).
- Z(q) = ‖idf ∘ qtf‖ over the query's bundle words (the norm its bundle row was divided by), so with
  w_new = 1 the whole lexical part is BM25(q, d)/Z(q) over every word; a query with no bundle word takes
  the norm over its new words instead (any positive constant of the query keeps its order).
- w_new: the form's diagonal weight for a word it never saw: the median of its lexical weights (1 for SSI,
  the tf-idf weight c for a projection, the typical learned w for the diagonal forms), clamped at ≥ 0; 0 —
  the open vocabulary off — for a form without a diagonal term (noidentity, halftrans, query likelihood).

Known words keep the bundle's idf and rows, and o is 0 for a query with no new word found in the collection,
so such a collection ranks exactly as with a closed vocabulary, bit for bit (o is never added then).

A tf-idf bundle stays closed (`OpenRule.of` gives None): its rows are unit length over the known words, so a
new word would change every stored value of its document and the bundle's ranking of known words; so does a
correlated-hashing vocabulary (tf-idf only).

Statistics (`statistics`): "bundle" (the default, above) keeps the bundle's idf and avg_len for its words, so the
lexical part is BM25 with the *training corpus's* statistics. "collection" takes every statistic from the served
collection instead (`CollectionStatistics`): each word's idf from its document frequency there (bundle words too)
and avg_len its mean length, with the bundle's k1 and b; the lexical part is then BM25 over the collection, exactly
(divided by the same Z(q)), which is what a bundle serving another domain needs: a Wikispeedia bundle (avg_len
3,181) on SciFact (225), its lexical part alone 0.6718 NDCG@10 with the bundle's statistics and 0.6971 = BM25 on
stems with the collection's (docs/guides/open-vocabulary.md). The learned part keeps the bundle's rows (U q, V d
from the bundle's idf and avg_len: what it was trained on), and Z(q) stays the norm the bundle row was divided by,
so the balance of the two parts is the one training set. A collection whose statistics are the bundle's (the corpus
it was trained on) ranks as with "bundle", bit for bit: its rows are the bundle's and no correction is added.

Bounds: only documents bring words in (query words never enter); a word leaves when its last live document
goes; at most `max_words` words are held: once full, a document's words not yet held are not indexed
(`OpenPostings.dropped` counts them; a held word still takes every new posting), so a word only becomes
findable once a slot is free and a later document brings it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import scipy.sparse as sp

from ssi.forms import Form
from ssi.products import DocMatrix
from ssi.vocab import Vocabulary
from ssi.weighting import Bm25, average_length, bm25_idf, bm25_idf_of

DEFAULT_MAX_WORDS = 1_000_000  # open words held per collection (each a dict of postings)

DocEntries = dict[str, float]  # a document's new words and their d_t

# Whose statistics (idf, avg_len) the lexical part uses with the open vocabulary on: see the module's docstring.
Statistics = Literal["bundle", "collection"]
STATISTICS: tuple[Statistics, ...] = ("bundle", "collection")


def collection_idf(vocab: Vocabulary, words: np.ndarray, df: np.ndarray, n_docs: int) -> np.ndarray:
    """float32 idf of bundle words `words` in a collection where they have document frequencies `df` among `n_docs`
    documents: Lucene's (`bm25_idf`), or the bundle's for a word no document holds (it scores nothing either way)."""
    df = np.asarray(df, dtype=np.float64)
    return np.where(df > 0, bm25_idf(df, n_docs), vocab.idf[words]).astype(np.float32)


def collection_query_values(vocab: Vocabulary, words: np.ndarray, values: np.ndarray, idf: np.ndarray) -> np.ndarray:
    """A query's lexical values under the collection's statistics, the one definition: from its bundle row (`words`,
    `values`: idf_b ∘ qtf / Z(q)) and the collection's idf of those words (`collection_idf`), idf_c ∘ qtf / Z(q) with
    the same Z(q), i.e. each value times idf_c / idf_b, float32 (the value itself where the two idf are equal). The
    service ranks with these values; the brute force adds their change (`CollectionStatistics.lexical_change`)."""
    words = np.asarray(words, dtype=np.int64)
    bundle_idf = vocab.idf[words].astype(np.float64)
    idf = np.asarray(idf, dtype=np.float64)
    values = np.asarray(values, dtype=np.float32)
    return np.where(idf == bundle_idf, values, (values.astype(np.float64) * idf / bundle_idf).astype(np.float32))


@dataclass(frozen=True, slots=True)
class CollectionStatistics:
    """A served collection's own BM25 statistics for the lexical part (statistics "collection").

    `bm25`: the bundle's k1 and b with the collection's avg_len (`average_length`, the formula the bundle's came
    from); `idf`: float32 [D], each bundle word's `collection_idf`. New words take theirs from the open postings'
    live counts, as with "bundle". (The service keeps the avg_len of the documents its index was computed from and
    the live document frequencies: `with_avg_len` makes those statistics for its brute force.)"""

    bm25: Bm25
    idf: np.ndarray

    @classmethod
    def of(cls, vocab: Vocabulary, df: np.ndarray, n_docs: int, n_tokens: int) -> CollectionStatistics:
        """From the bundle words' document frequencies `df` [D] in a collection of `n_docs` documents holding
        `n_tokens` tokens in all (every token, as |d| counts them)."""
        if vocab.bm25 is None:
            raise ValueError("collection statistics are BM25 statistics: this bundle weighs tf-idf")
        bm25 = Bm25(k1=vocab.bm25.k1, b=vocab.bm25.b, avg_len=average_length(n_tokens, n_docs))
        return cls(bm25, collection_idf(vocab, np.arange(vocab.size), df, n_docs))

    def with_avg_len(self, avg_len: float) -> CollectionStatistics:
        """The same idf with another avg_len (the service's: that of the documents its index was computed from)."""
        return CollectionStatistics(dataclasses.replace(self.bm25, avg_len=avg_len), self.idf)

    def vocabulary(self, vocab: Vocabulary) -> Vocabulary:
        """`vocab` weighing documents with the collection's avg_len (its lexical document rows); `vocab` itself
        when that is the bundle's, so the rows are the bundle's, bit for bit."""
        return weighing(vocab, self.bm25)

    def lexical_change(self, vocab: Vocabulary, Q: sp.csr_matrix) -> sp.csr_matrix | None:
        """The collection's lexical query rows (`collection_query_values`) minus the bundle's rows `Q`, float64; None
        where no query word's idf differs (nothing to add: the scores stay the reference's, bit for bit)."""
        Q = sp.csr_matrix(Q)
        values = collection_query_values(vocab, Q.indices, Q.data, self.idf[Q.indices])
        if np.array_equal(values, Q.data):
            return None
        delta = values.astype(np.float64) - Q.data.astype(np.float64)
        change = sp.csr_matrix((delta, Q.indices.copy(), Q.indptr.copy()), shape=Q.shape)
        change.eliminate_zeros()
        return change

    def lexical_scores_change(
        self, vocab: Vocabulary, form: Form, Q: sp.csr_matrix, docs: DocMatrix
    ) -> np.ndarray | None:
        """Σ_i w_i Δq_i d_i (float64 [queries, documents]) to add to the form's reference scores of the bundle rows
        `Q` over `docs` (lexical rows at the collection's avg_len): the lexical part then has the collection's idf.
        None where no query word's idf differs."""
        change = self.lexical_change(vocab, Q)
        if change is None:
            return None
        return docs.products(change, form.lexical_weights()).astype(np.float64)


def weighing(vocab: Vocabulary, bm25: Bm25) -> Vocabulary:
    """`vocab` with BM25 parameters `bm25` for its document rows (`vocab` itself where they are its own)."""
    return vocab if bm25 == vocab.bm25 else dataclasses.replace(vocab, bm25=bm25)


def at_avg_len(vocab: Vocabulary, avg_len: float) -> Vocabulary:
    """`vocab` weighing document rows with the bundle's k1 and b and a collection's `avg_len` (a BM25 bundle)."""
    if vocab.bm25 is None:
        raise ValueError("a collection's avg_len weighs BM25 rows: this bundle weighs tf-idf")
    return weighing(vocab, Bm25(k1=vocab.bm25.k1, b=vocab.bm25.b, avg_len=avg_len))


def collection_statistics(vocab: Vocabulary, rows: sp.csr_matrix, lengths: np.ndarray) -> CollectionStatistics:
    """The statistics of a collection given as its bundle-word document rows (any weighting: only which words a row
    holds counts) and its documents' token counts."""
    df = np.bincount(sp.csr_matrix(rows).indices, minlength=vocab.size)[: vocab.size]
    return CollectionStatistics.of(vocab, df, rows.shape[0], int(np.asarray(lengths, dtype=np.int64).sum()))


def new_counts(vocab: Vocabulary, tokens: Sequence[str]) -> dict[str, int]:
    """The tokens the vocabulary lacks, as it spells words (stemmed where it stems), with their counts."""
    tokens = list(tokens)
    return _spelled_counts(vocab, [t for t, i in zip(tokens, vocab.ids_of(tokens).tolist(), strict=True) if i < 0])


def _spelled_counts(vocab: Vocabulary, unknown: list[str]) -> dict[str, int]:
    """Tokens the vocabulary lacks, named as it spells words (a new word's name), with their counts in order of
    first appearance. (Counted in a loop: for a page's handful, `Counter` cost 29 µs right after another page's
    ranking, its Python layers cold.)"""
    counts: dict[str, int] = {}
    for word in vocab.spelled(unknown) if unknown else ():
        counts[word] = counts.get(word, 0) + 1
    return counts


@dataclass(frozen=True, slots=True)
class QueryWords:
    """What a query's open term is weighed from (`OpenRule.query_weights`), found once per query text: its new words
    with their counts, in order of first appearance (the order the term's sums are taken in), and its bundle words'
    ids with their counts, for Z(q). Built from the ids and counts the query's row was made from
    (service.bulk_featurize, `Vocabulary.term_counts`), so a long page is neither tokenized nor looked up nor counted
    a second time."""

    new: dict[str, int]
    known: np.ndarray  # the distinct ids of its bundle words, sorted
    qtf: np.ndarray  # float64, each one's count

    @classmethod
    def of(cls, vocab: Vocabulary, known: np.ndarray, qtf: np.ndarray, unknown: list[str]) -> QueryWords:
        """From its row's term counts (`Vocabulary.term_counts`: the distinct ids `known`, sorted, and their counts
        `qtf`) and the tokens the vocabulary lacks in order, as the tokenizer gives them."""
        return cls(_spelled_counts(vocab, unknown), known, qtf)

    @classmethod
    def of_tokens(cls, vocab: Vocabulary, tokens: Sequence[str]) -> QueryWords:
        """From a query's tokens (`ssi.tokenize.tokenize`)."""
        tokens = list(tokens)
        ids = vocab.ids_of(tokens)
        counts = vocab.term_counts(ids, np.array([ids.shape[0]], dtype=np.int64))
        unknown = [t for t, i in zip(tokens, ids.tolist(), strict=True) if i < 0]
        return cls.of(vocab, counts.indices, counts.data, unknown)

    def keeping(self, words: np.ndarray) -> QueryWords:
        """The words of the text with every bundle word but `words` removed (a long text cut to its heaviest words,
        service.embedding.keep_top_words): Z(q) is then the norm its cut row was divided by; new words all stay."""
        keep = np.isin(self.known, words)
        return QueryWords(self.new, self.known[keep], self.qtf[keep])


@dataclass(frozen=True, slots=True)
class OpenCounts:
    """The live counts a query's new words are weighed by (`OpenRule.query_weights`): each word's document frequency
    and the number of live documents; with the collection's statistics also its bundle words' document frequencies
    by id (`known`: their `collection_idf`). A collection's own (`OpenPostings.df`, its live rows); a sharded
    collection's are its shards' summed (cluster.fanout), so each shard weighs every word as one node holding every
    document."""

    df: Mapping[str, int]
    n_docs: int
    known: Mapping[int, int] = field(default_factory=dict)  # bundle word id → live document frequency (> 0)

    @classmethod
    def summed(cls, parts: Sequence[OpenCounts], n_docs: int) -> OpenCounts:
        """The counts of a collection made of `parts` (its shards' own) holding `n_docs` live documents in all."""
        df: dict[str, int] = {}
        known: dict[int, int] = {}
        for part in parts:
            for word, n in part.df.items():
                df[word] = df.get(word, 0) + n
            for word_id, n in part.known.items():
                known[word_id] = known.get(word_id, 0) + n
        return cls(df, n_docs, known)


@dataclass(frozen=True, slots=True)
class OpenRule:
    """How new words count beside a bundle's words: its BM25 parameters and the form's weight for them."""

    vocab: Vocabulary
    bm25: Bm25
    weight: float

    @classmethod
    def of(cls, vocab: Vocabulary, form: Form, bm25: Bm25 | None = None) -> OpenRule | None:
        """The rule for a bundle, or None where its vocabulary stays closed (tf-idf, hashing, no diagonal).
        `bm25`: the parameters of a new word's d_t where they are not the bundle's (the collection's avg_len)."""
        if vocab.bm25 is None or vocab.hashing is not None:
            return None
        weights = np.asarray(form.lexical_weights(), dtype=np.float64)
        weight = max(float(np.median(weights)), 0.0) if weights.size else 0.0
        if weight == 0.0:
            return None
        return cls(vocab, vocab.bm25 if bm25 is None else bm25, weight)

    def document_entries(self, tokens: Sequence[str]) -> DocEntries:
        """d_t of each new word of a document given as its tokens (|d| = every token)."""
        counts = new_counts(self.vocab, tokens)
        if not counts:
            return {}
        words = list(counts)
        tf = np.asarray([counts[w] for w in words], dtype=np.float64)
        values = self.bm25.document_values(tf, np.full(tf.shape[0], len(tokens), dtype=np.int64))
        return dict(zip(words, values.tolist(), strict=True))

    def query_weights(self, words: QueryWords, df: Mapping[str, int], n_docs: int) -> dict[str, float]:
        """w_new · idf_t · qtf_t / Z(q) for each new query word some live document holds (empty: o = 0).

        Asked for every query with a new word (every page of a /match): its handful of words are weighed as Python
        floats (the same float64 operations as on arrays, in the same order; each idf `bm25_idf_of`, remembered),
        since numpy's per-call work on arrays of a few values was most of its time. Norms are √(x·x), as
        `np.linalg.norm` takes them."""
        new: list[str] = []
        held: list[int] = []
        counts: list[int] = []
        for word, count in words.new.items():
            n = df.get(word, 0)
            if n > 0:
                new.append(word)
                held.append(n)
                counts.append(count)
        if not new:
            return {}
        raw = [bm25_idf_of(n, n_docs) * count for n, count in zip(held, counts, strict=True)]  # float32 idf
        known = self.vocab.idf[words.known] * words.qtf  # float64, as qtf
        z = math.sqrt(known.dot(known)) if known.size else 0.0
        if z <= 0.0:
            summed = np.asarray(raw, dtype=np.float64)
            z = math.sqrt(summed.dot(summed))
        return {word: self.weight * value / z for word, value in zip(new, raw, strict=True)}


@dataclass
class OpenPostings:
    """The new words of a collection's rows: postings word → {row: d_t}, live document frequencies, and each
    row's words (so a delete takes its postings out). Rows are the caller's numbering (corpus positions, or the
    service's row table); a deleted row is `remove`d."""

    max_words: int = DEFAULT_MAX_WORDS
    postings: dict[str, dict[int, float]] = field(default_factory=dict)
    row_words: dict[int, list[str]] = field(default_factory=dict)
    dropped: int = 0  # new words of documents left out because the open vocabulary was full
    # Postings held, kept by add/remove (read after every write for /metrics: no walk over the words).
    _n_postings: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._n_postings = sum(len(p) for p in self.postings.values())

    @property
    def n_words(self) -> int:
        return len(self.postings)

    @property
    def n_postings(self) -> int:
        """(row, word) pairs held: the sum of the postings' lengths."""
        return self._n_postings

    def df(self) -> Mapping[str, int]:
        """Live document frequency of each held word (a view: len of its postings)."""
        return _DfView(self.postings)

    def add(self, row: int, entries: DocEntries) -> None:
        """Index row `row`'s new words (replacing whatever the row held)."""
        self.remove(row)
        kept: list[str] = []
        for word, value in entries.items():
            lists = self.postings.get(word)
            if lists is None:
                if len(self.postings) >= self.max_words:
                    self.dropped += 1
                    continue
                lists = self.postings[word] = {}
            if row not in lists:
                self._n_postings += 1
            lists[row] = value
            kept.append(word)
        if kept:
            self.row_words[row] = kept

    def remove(self, row: int) -> None:
        """Take row `row`'s postings out; a word with no live posting left leaves the open vocabulary."""
        for word in self.row_words.pop(row, ()):
            lists = self.postings[word]
            del lists[row]
            self._n_postings -= 1
            if not lists:
                del self.postings[word]

    def select(self, rows: np.ndarray) -> OpenPostings:
        """A copy holding only `rows`, renumbered 0..len(rows)−1 (the service's compaction)."""
        out = OpenPostings(self.max_words, dropped=self.dropped)
        if not self.row_words:  # nothing held (always so with the open vocabulary off): no walk over the rows
            return out
        for new, old in enumerate(np.asarray(rows, dtype=np.int64).tolist()):
            words = self.row_words.get(old)
            if words:
                out.add(new, {w: self.postings[w][old] for w in words})
        return out

    def copy(self) -> OpenPostings:
        return OpenPostings(
            self.max_words,
            {w: dict(p) for w, p in self.postings.items()},
            {r: list(w) for r, w in self.row_words.items()},
            self.dropped,
        )

    def scores(self, weights: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray, float]:
        """(rows, o, bound): every row holding a weighted word (each once, in the order first met) and its
        o = Σ weights[t] · d_t, float64, and the most o can be for any row, Σ_t weights[t] · max_d d_t (what
        service.rerank's pruning adds to its bound), from one pass over the weighted words' postings."""
        summed: dict[int, float] = {}
        bound = 0.0
        for word, weight in weights.items():
            lists = self.postings.get(word)
            if lists is None:
                continue
            bound += weight * max(lists.values())
            for row, value in lists.items():
                if row in summed:
                    summed[row] += weight * value
                else:  # 0.0 + x: x itself (x ≥ 0)
                    summed[row] = weight * value
        if not summed:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64), bound
        rows = np.fromiter(summed, dtype=np.int64, count=len(summed))
        return rows, np.fromiter(summed.values(), dtype=np.float64, count=len(summed)), bound

    def to_json(self) -> dict[str, object]:
        """Rows and their entries, for a snapshot (restores with `from_json`)."""
        rows = sorted(self.row_words)
        return {
            "max_words": self.max_words,
            "dropped": self.dropped,
            "rows": rows,
            "entries": [{w: self.postings[w][r] for w in self.row_words[r]} for r in rows],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> OpenPostings:
        out = cls(int(data["max_words"]))  # type: ignore[call-overload]
        for row, entries in zip(data["rows"], data["entries"], strict=True):  # type: ignore[call-overload]
            out.add(int(row), {str(w): float(v) for w, v in entries.items()})
        out.dropped = int(data["dropped"])  # type: ignore[call-overload]
        return out


class _DfView(Mapping[str, int]):
    """Document frequencies read from the postings without copying them."""

    def __init__(self, postings: dict[str, dict[int, float]]) -> None:
        self._postings = postings

    def __getitem__(self, word: str) -> int:
        return len(self._postings[word])

    def get(self, word: str, default: int = 0) -> int:  # type: ignore[override]
        lists = self._postings.get(word)
        return default if lists is None else len(lists)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._postings)

    def __len__(self) -> int:
        return len(self._postings)


def build_postings(
    rule: OpenRule, token_lists: Sequence[Sequence[str]], max_words: int = DEFAULT_MAX_WORDS
) -> OpenPostings:
    """The open postings of a corpus given as each document's tokens, rows numbered by position."""
    postings = OpenPostings(max_words)
    for row, tokens in enumerate(token_lists):
        entries = rule.document_entries(tokens)
        if entries:
            postings.add(row, entries)
    return postings


def open_scores(
    rule: OpenRule, postings: OpenPostings, query_tokens: Sequence[Sequence[str]], n_docs: int, n_rows: int
) -> np.ndarray | None:
    """o(q, d) of each query against rows 0..n_rows−1, float64 [queries, n_rows]; None where every query's o is
    0 (nothing to add: the closed ranking stands bit for bit)."""
    out: np.ndarray | None = None
    df = postings.df()
    for i, tokens in enumerate(query_tokens):
        weights = rule.query_weights(QueryWords.of_tokens(rule.vocab, tokens), df, n_docs)
        if not weights:
            continue
        rows, values, _ = postings.scores(weights)
        if out is None:
            out = np.zeros((len(query_tokens), n_rows), dtype=np.float64)
        out[i, rows] = values
    return out
