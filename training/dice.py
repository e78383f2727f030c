"""Count the correlated-hashing map (ssi.feature_hashing) on the unlabeled corpus: DICE coefficients.

For every rare feature i (a word beyond the F most frequent, or a 2-gram seen in at least
`min_df` documents) and every frequent word j, at the document level,

    DICE(i, j) = 2 · |docs(i) ∩ docs(j)| / (|docs(i)| + |docs(j)|),

and i keeps its k best j (ties: the more frequent word first). With ~10⁶ rare features and
F = 10⁴ a dense R × F matrix is out of reach, and so is the sparse product of the incidences
(≈ 10⁹ non-zeros on Wikispeedia). A numba kernel walks, for each feature, its documents and their
frequent words, counting co-occurrences in a scratch array of F counters, and keeps the top k by
exact integer comparison of the fractions; features are split across threads.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from ssi.feature_hashing import CorrelatedHashing
from ssi.jit_cache import CACHE
from ssi.vocab import Vocabulary

log = logging.getLogger(__name__)


@numba.njit(parallel=True, cache=CACHE)
def _dice_top_k(
    feature_indptr: np.ndarray,
    feature_docs: np.ndarray,
    doc_indptr: np.ndarray,
    doc_words: np.ndarray,
    feature_df: np.ndarray,
    word_df: np.ndarray,
    k: int,
    out_targets: np.ndarray,
    out_dice: np.ndarray,
) -> None:
    n_features = feature_indptr.shape[0] - 1
    n_frequent = word_df.shape[0]
    n_chunks = max(1, min(n_features, 64 * numba.get_num_threads()))
    for chunk in numba.prange(n_chunks):
        lo = chunk * n_features // n_chunks
        hi = (chunk + 1) * n_features // n_chunks
        counts = np.zeros(n_frequent, dtype=np.int64)
        touched = np.empty(n_frequent, dtype=np.int64)
        for i in range(lo, hi):
            m = 0
            for p in range(feature_indptr[i], feature_indptr[i + 1]):
                d = feature_docs[p]
                for q in range(doc_indptr[d], doc_indptr[d + 1]):
                    j = doc_words[q]
                    if counts[j] == 0:
                        touched[m] = j
                        m += 1
                    counts[j] += 1
            a = feature_df[i]
            for slot in range(k):
                best = -1
                best_c = 0
                best_den = 1
                for t in range(m):
                    j = touched[t]
                    c = counts[j]
                    if c <= 0:
                        continue  # taken by an earlier slot
                    den = a + word_df[j]
                    # c / den > best_c / best_den, exactly; ties go to the lower id (the more frequent word)
                    if best < 0 or c * best_den > best_c * den or (c * best_den == best_c * den and j < best):
                        best, best_c, best_den = j, c, den
                if best < 0:
                    out_targets[i, slot] = -1
                    out_dice[i, slot] = 0.0
                else:
                    out_targets[i, slot] = best
                    out_dice[i, slot] = 2.0 * best_c / best_den
                    counts[best] = -counts[best]
            for t in range(m):
                counts[touched[t]] = 0


def dice_top_k(
    feature_docs: Sequence[np.ndarray], doc_words: Sequence[np.ndarray], n_frequent: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """For each feature (its sorted distinct documents), its k best frequent words by DICE and their scores.

    `doc_words[d]`: the distinct frequent-word ids (< n_frequent) of document d.
    """
    f_indptr = np.zeros(len(feature_docs) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in feature_docs], out=f_indptr[1:])
    f_docs = np.concatenate(feature_docs).astype(np.int64) if feature_docs else np.zeros(0, dtype=np.int64)
    d_indptr = np.zeros(len(doc_words) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in doc_words], out=d_indptr[1:])
    d_words = np.concatenate(doc_words).astype(np.int64) if doc_words else np.zeros(0, dtype=np.int64)
    return _dice_csr(f_indptr, f_docs, d_indptr, d_words, n_frequent, k)


def _dice_csr(
    f_indptr: np.ndarray, f_docs: np.ndarray, d_indptr: np.ndarray, d_words: np.ndarray, n_frequent: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    word_df = np.bincount(d_words, minlength=n_frequent).astype(np.int64)
    feature_df = np.diff(f_indptr).astype(np.int64)
    n = f_indptr.shape[0] - 1
    targets = np.full((n, k), -1, dtype=np.int32)
    dice = np.zeros((n, k), dtype=np.float32)
    if n:
        _dice_top_k(f_indptr, f_docs, d_indptr, d_words, feature_df, word_df, k, targets, dice)
    return targets, dice


def build_correlated_hashing(
    doc_tokens: Sequence[Sequence[str]],
    vocab: Vocabulary,
    *,
    n_frequent: int,
    k: int = 5,
    ngrams: Sequence[int] = (1, 2),
    min_df: int = 2,
) -> CorrelatedHashing:
    """The DICE map of every word beyond the top `n_frequent` vocabulary words and every 2-gram in at least
    `min_df` documents (words: all of them), counted on `doc_tokens`, each kept with its top `k`."""
    if not 1 <= n_frequent <= vocab.n_words:
        raise ValueError(f"the frequent words must be 1 to {vocab.n_words} vocabulary words, got {n_frequent}")
    if k < 1:
        raise ValueError("k must be at least 1")
    ngrams = tuple(sorted(set(ngrams)))
    if not ngrams or not set(ngrams) <= {1, 2}:
        raise ValueError(f"n-grams must be 1 and/or 2, got {ngrams}")
    n_docs = len(doc_tokens)
    codes: dict[str, int] = {}
    doc_codes: list[np.ndarray] = []
    for tokens in doc_tokens:
        doc_codes.append(np.asarray([codes.setdefault(w, len(codes)) for w in tokens], dtype=np.int64))
    words = list(codes)
    frequent_of = np.full(len(words), -1, dtype=np.int64)
    for code, word in enumerate(words):
        wid = vocab.id_of(word)
        if wid is not None and wid < n_frequent:
            frequent_of[code] = wid
    n_codes = max(1, len(words))
    doc_words: list[np.ndarray] = []
    pair_keys: list[np.ndarray] = []  # (kind, key) → per-document distinct rare features
    pair_docs: list[np.ndarray] = []
    for d, c in enumerate(doc_codes):
        distinct = np.unique(c)
        freq = frequent_of[distinct]
        doc_words.append(np.sort(freq[freq >= 0]))
        keys: list[np.ndarray] = []
        if 1 in ngrams:
            keys.append(distinct[freq < 0])  # word features: their code
        if 2 in ngrams and c.size > 1:
            keys.append(n_codes + np.unique(c[:-1] * n_codes + c[1:]))  # 2-grams: shifted past the codes
        if keys:
            joined = np.concatenate(keys)
            pair_keys.append(joined)
            pair_docs.append(np.full(joined.size, d, dtype=np.int64))
    all_keys = np.concatenate(pair_keys) if pair_keys else np.zeros(0, dtype=np.int64)
    all_docs = np.concatenate(pair_docs) if pair_docs else np.zeros(0, dtype=np.int64)
    uniq, inverse, df = np.unique(all_keys, return_inverse=True, return_counts=True)
    is_bigram = uniq >= n_codes
    keep = ~is_bigram | (df >= min_df)
    # Rare words first, then 2-grams; each by document frequency (highest first), then by key.
    order = np.lexsort((uniq, -df, is_bigram))
    order = order[keep[order]]
    row_of = np.full(uniq.size, -1, dtype=np.int64)
    row_of[order] = np.arange(order.size)
    rows = row_of[inverse]
    used = rows >= 0
    by_row = np.lexsort((all_docs[used], rows[used]))
    f_docs = all_docs[used][by_row]
    f_indptr = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[used], minlength=order.size), out=f_indptr[1:])
    d_indptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum([x.size for x in doc_words], out=d_indptr[1:])
    d_words = np.concatenate(doc_words) if doc_words else np.zeros(0, dtype=np.int64)
    targets, dice = _dice_csr(f_indptr, f_docs, d_indptr, d_words, n_frequent, k)
    features: list[str] = []
    for key in uniq[order].tolist():
        if key < n_codes:
            features.append(words[key])
        else:
            a, b = divmod(key - n_codes, n_codes)
            features.append(f"{words[a]} {words[b]}")
    kept_df = df[order]
    idf = np.asarray([math.log((1 + n_docs) / (1 + c)) + 1.0 for c in kept_df.tolist()], dtype=np.float32)
    n_bigrams = int(is_bigram[order].sum())
    return CorrelatedHashing(
        n_frequent=n_frequent,
        features=features,
        idf=idf,
        targets=targets,
        dice=dice,
        ngrams=ngrams,
        info={
            "level": "document",
            "min_df_2grams": min_df,
            "words": len(features) - n_bigrams,
            "2grams": n_bigrams,
            "documents": n_docs,
        },
    )


@dataclass(frozen=True)
class HashingPlan:
    """How `ssi train --kind cfh` counts its map: F frequent words, top k, which n-grams, 2-gram min_df."""

    n_frequent: int
    k: int = 5
    ngrams: tuple[int, ...] = (1, 2)
    min_df: int = 2

    def build(self, doc_tokens: Sequence[Sequence[str]], vocab: Vocabulary) -> Vocabulary:
        """`vocab`'s words and idf with the map counted on `doc_tokens` (any map it had is replaced)."""
        started = time.perf_counter()
        hashing = build_correlated_hashing(
            doc_tokens, vocab, n_frequent=self.n_frequent, k=self.k, ngrams=self.ngrams, min_df=self.min_df
        )
        hashing.info["seconds"] = round(time.perf_counter() - started, 1)
        log.info(
            "correlated hashing: %d rare words and %d 2-grams onto %d frequent words, k = %d (%.1f s)",
            hashing.info["words"], hashing.info["2grams"], self.n_frequent, self.k, hashing.info["seconds"],
        )  # fmt: skip
        return Vocabulary(vocab.words, vocab.idf, vocab.tokenizer, vocab.tf_scheme, hashing)
