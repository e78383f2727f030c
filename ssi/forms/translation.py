"""The word translation model (paper 003, section 5.2, the WTM_M1 rows of Table 1; Gao et al., 2010):
a document's words translate into query words with IBM model 1's table P(w|w'),

    P_tr(w|d)  = Σ_w' P(w|w') P_ml(w'|d)
    log P(q|d) = Σ_w c(w, q) log[α P(w|C) + (1 − α)(λ P_ml(w|d) + (1 − λ) P_tr(w|d))]

in the same language-model framework as the topic models (ssi.forms.query_likelihood, eqs. 14–16).

The table is kept sparse so that it fits in memory whatever the vocabulary: each source word w'
holds its k most probable translations (`targets`, `probs`: D × k, renormalised over the k). A word
the model was not trained on (outside its frequent words) translates into itself with probability 1,
so for such a word P_tr = P_ml. Word ids are stored as float32 (bundles hold float32 arrays; ids
below 2²⁴ are exact); an id outside [0, D) or a non-positive probability is an empty slot.

Not served exactly, like the topic models: the score is no inner product of a query embedding with
a stored document vector (index_dims 0, no encoder; the service refuses it at load, `ssi eval`
ranks it by `reference_scores`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ssi.forms.base import ArraySpec, DocumentKeys, DocumentProducts
from ssi.forms.query_likelihood import LanguageModelForm, query_log_likelihood, term_counts, unigram_rows

MIXTURE = ("lambda", "alpha")


class WordTranslation(LanguageModelForm):
    name: ClassVar[str] = "word-translation"
    description: ClassVar[str] = "Σ_w c(w,q) log[αP(w|C) + (1−α)(λP(w|d) + (1−λ)Σ_w' P(w|w')P(w'|d))], IBM model 1"
    paper: ClassVar[str] = "Clickthrough-based latent semantic models (paper 003), section 5.2, WTM_M1"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (
        ArraySpec("targets", ("D", "N"), "the k translations w of each source word w' (word ids as float32)"),
        ArraySpec("probs", ("D", "N"), "P(w|w') of each of those translations"),
        ArraySpec("background", ("D",), "P(w|C): the collection's unigram model"),
        ArraySpec("idf", ("D",), "the vocabulary's idf, to recover term counts from tf-idf rows"),
        ArraySpec("mixture", ("S",), "λ, α"),
    )
    mixture_names: ClassVar[tuple[str, ...]] = MIXTURE

    def __init__(self, arrays: Mapping[str, np.ndarray], document_keys: DocumentKeys | None = None) -> None:
        super().__init__(arrays, document_keys)
        self._table: sp.csr_matrix | None = None
        self._docs: tuple[sp.csr_matrix, sp.csr_matrix] | None = None

    def _share_state(self, other: WordTranslation) -> None:
        other._table, other._docs = self._table, self._docs

    def table(self) -> sp.csr_matrix:
        """P(w|w') as a sparse D × D matrix, row w' (source), column w (target)."""
        if self._table is None:
            n = self.vocab_size
            targets = np.rint(np.nan_to_num(np.asarray(self.values["targets"], dtype=np.float64), nan=-1.0))
            probs = np.asarray(self.values["probs"], dtype=np.float32)
            keep = (targets >= 0) & (targets < n) & (probs > 0)
            sources = np.broadcast_to(np.arange(n)[:, None], targets.shape)
            self._table = sp.csr_matrix(
                (probs[keep], (sources[keep], targets[keep].astype(np.int64))), shape=(n, n), dtype=np.float32
            )
        return self._table

    def unigrams_of(self, X: sp.csr_matrix) -> sp.csr_matrix:
        """P_ml(w|d) of each document row, computed once per document matrix."""
        if self._docs is None or self._docs[0] is not X:
            self._docs = (X, unigram_rows(term_counts(X, self.values["idf"])))
        return self._docs[1]

    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        P_ml = self.unigrams_of(docs.X)
        table = self.table()
        chosen: dict[int, sp.csr_matrix] = {}  # the table's columns of the queries' words, taken out once

        def model_block(first: int, end: int, cols: np.ndarray) -> np.ndarray:
            if id(cols) not in chosen:
                chosen[id(cols)] = sp.csr_matrix(table[:, cols])
            return (P_ml[first:end] @ chosen[id(cols)]).toarray()

        mixture = self.mixture
        counts = term_counts(Q, self.values["idf"])
        return query_log_likelihood(
            counts, P_ml, model_block, self.values["background"], mixture["lambda"], mixture["alpha"]
        )
