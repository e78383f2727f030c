"""Query likelihood in the language-model framework (paper 003, section 3.3, eqs. 14–16): the score
of the topic-model and word-translation forms.

    log P(q|d) = Σ_w c(w, q) log P(w|d)                                            (eq. 14)
    P(w|d)     = α P(w|C) + (1 − α) [λ P_ml(w|d) + (1 − λ) P_model(w|d)]          (eqs. 15, 16)

P_ml(w|d) = c(w, d) / |d| is the document's unigram model, P(w|C) the collection's (Jelinek-Mercer
smoothing, so no word has probability 0), P_model the latent model's (topics: Σ_z P(w|z) P(z|d);
word translation: Σ_w' P(w|w') P_ml(w'|d)). λ = 0 is the latent model alone (the paper's shaded
rows), λ = 1 the smoothed unigram baseline ("UM").

Term counts from tf-idf rows. A form sees the rows ssi.vocab makes, x_w = (1 + log tf_w) · idf_w / ‖·‖,
not raw counts. Dividing by the idf (which the form stores) leaves (1 + log tf_w) up to the row's
scale; taking the row's smallest such value as a word seen once (1 + log 1 = 1) fixes the scale, so
c(w) = exp(r_w − 1) with r_w = (x_w / idf_w) / min_v (x_v / idf_v). That is exact whenever the
text's least frequent word occurs once (nearly every text: a query, a title, an article), and
under-counts every word of a text whose words all repeat. Words outside the vocabulary are not in
the row and count nowhere, in training and in scoring alike (both go through `term_counts`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar, Self

import numpy as np
import scipy.sparse as sp

from ssi.forms.base import DocumentKeys, Form, FormError

DOC_BLOCK = 512  # documents whose P(w|d) rows (over the queries' words) are held at once
MAX_LOG_COUNT = 50.0  # 1 + log tf is never this large for real text (tf ≈ e⁴⁹)
FLOOR = 1e-30  # P(w|d) below this (λ = 1 and α = 0 on an unseen word) counts as this, not as log 0


def term_counts(X: sp.csr_matrix, idf: np.ndarray) -> sp.csr_matrix:
    """c(w, x) of each tf-idf row of X, recovered as the module says (float32 CSR, same pattern as X).

    Only the first len(idf) columns are words; any later column (hashed slots) is dropped.
    """
    n_words = idf.shape[0]
    X = sp.csr_matrix(X[:, :n_words] if X.shape[1] > n_words else X, dtype=np.float32)
    X.eliminate_zeros()
    lengths = np.diff(X.indptr)
    # abs and the cap on the exponent: arrays read from a bundle are used as written, never overflowed
    ratio = np.abs(X.data.astype(np.float64)) / np.maximum(np.abs(np.asarray(idf, dtype=np.float64)[X.indices]), 1e-12)
    smallest = np.ones(X.shape[0])
    filled = lengths > 0
    if filled.any():
        smallest[filled] = np.minimum.reduceat(ratio, X.indptr[:-1][filled])
    entry_rows = np.repeat(np.arange(X.shape[0]), lengths)
    counts = np.exp(np.minimum(ratio / np.maximum(smallest[entry_rows], 1e-12) - 1.0, MAX_LOG_COUNT))
    return sp.csr_matrix((counts.astype(np.float32), X.indices, X.indptr), shape=X.shape)


def unigram_rows(C: sp.csr_matrix) -> sp.csr_matrix:
    """P_ml(w|d) = c(w, d) / |d| of each count row (an empty row stays empty)."""
    totals = np.asarray(C.sum(axis=1), dtype=np.float64).ravel()
    scale = np.divide(1.0, totals, out=np.zeros_like(totals), where=totals > 0)
    return sp.csr_matrix(sp.diags(scale) @ C, dtype=np.float32)


def mixture_weights(lam: float, alpha: float) -> tuple[float, float]:
    """(λ, α) clipped to [0, 1]: a form's stored weights are used as probabilities whatever was written."""
    return float(np.clip(np.nan_to_num(lam), 0.0, 1.0)), float(np.clip(np.nan_to_num(alpha), 0.0, 1.0))


# (first document row, end row, the query words' columns) → P_model(w|d) for those rows and words.
ModelBlock = Callable[[int, int, np.ndarray], np.ndarray]


def query_log_likelihood(
    Q: sp.csr_matrix,
    P_ml: sp.csr_matrix,
    model_block: ModelBlock,
    background: np.ndarray,
    lam: float,
    alpha: float,
) -> np.ndarray:
    """float32 [queries, documents]: Σ_w c(w, q) log P(w|d) (eqs. 14–16) for count rows Q and P_ml rows.

    Only the words some query holds are needed, so P(w|d) is built over those columns, a block of
    documents at a time, and the sum over a query's words is one sparse × dense product.
    """
    lam, alpha = mixture_weights(lam, alpha)
    Q = sp.csr_matrix(Q, dtype=np.float32)
    n_docs = P_ml.shape[0]
    out = np.zeros((Q.shape[0], n_docs), dtype=np.float32)
    cols = np.unique(Q.indices)
    if cols.size == 0 or n_docs == 0:
        return out
    Q_cols = sp.csr_matrix(Q[:, cols])
    bg = (alpha * np.clip(np.asarray(background, dtype=np.float32)[cols], 0.0, None)).astype(np.float32)
    P_cols = sp.csr_matrix(P_ml[:, cols], dtype=np.float32)
    for first in range(0, n_docs, DOC_BLOCK):
        end = min(first + DOC_BLOCK, n_docs)
        P = np.asarray(model_block(first, end, cols), dtype=np.float32) * np.float32((1.0 - alpha) * (1.0 - lam))
        P += bg[None, :]
        if lam > 0.0:
            block = P_cols[first:end]
            rows = np.repeat(np.arange(end - first), np.diff(block.indptr))
            P[rows, block.indices] += np.float32((1.0 - alpha) * lam) * block.data
        np.log(np.maximum(P, FLOOR, out=P), out=P)
        out[:, first:end] = np.asarray(Q_cols @ np.ascontiguousarray(P.T))
    return out


class LanguageModelForm(Form):
    """What the query-likelihood forms share: a `mixture` array (λ first), no index, no diagonal.

    log P(q|d) is no inner product of a query embedding with a stored document vector, so these forms
    are not served: no query map, no document embedding; `ssi eval` ranks them by `reference_scores`.
    """

    served_exactly: ClassVar[bool] = False
    mixture_names: ClassVar[tuple[str, ...]]  # the entries of the `mixture` array, λ first

    def __init__(self, arrays: Mapping[str, np.ndarray], document_keys: DocumentKeys | None = None) -> None:
        super().__init__(arrays, document_keys)
        names = self.mixture_names
        if self.sizes["S"] != len(names):
            raise FormError(f"form '{self.name}': mixture must hold {len(names)} values ({', '.join(names)})")

    @classmethod
    def shapes(cls, n_dims: int, vocab_size: int, **sizes: int) -> dict[str, tuple[int, ...]]:
        return super().shapes(n_dims, vocab_size, **{**sizes, "S": len(cls.mixture_names)})

    @property
    def mixture(self) -> dict[str, float]:
        return dict(zip(self.mixture_names, (float(v) for v in self.values["mixture"]), strict=True))

    def with_mixture(self, lam: float) -> Self:
        """The same model with λ = `lam`, sharing what this form computed per document (tuning λ computes once)."""
        mixture = np.array(self.values["mixture"], dtype=np.float32)
        mixture[0] = lam
        other = type(self)({**self.values, "mixture": mixture})
        self._share_state(other)
        return other

    def _share_state(self, other: Self) -> None:
        """Hand `other` (the same model, another λ) this form's per-document caches."""

    def query_map(self) -> np.ndarray:
        raise FormError(
            f"form '{self.name}' has no query map: log P(q|d) is no inner product of a query embedding with a "
            "document vector; rank it by reference_scores (`ssi eval`)"
        )

    def embed_documents(self, X: sp.csr_matrix) -> np.ndarray:
        raise FormError(f"form '{self.name}' stores no document embedding: it is not served from an index")

    def lexical_weights(self) -> np.ndarray:
        return np.zeros(self.vocab_size, dtype=np.float32)  # exact matches count through P_ml, not a diagonal
