"""Linear projection models (Gao et al., "Clickthrough-based latent semantic models for web search",
SIGIR 2011; paper 003, section 4): LSA, CL-LSA, OPCA and S2Net's discriminative projection all share
one form. A query and a document are mapped to N-dimensional concept vectors by linear maps and
compared by their cosine, eq. (20):

    f(q, d) = cos(A q, B d) + Σ_i w_i q_i d_i          A, B: N × D, w: D

A is the query map and B the document map (LSA and OPCA fit one map, A = B; CL-LSA and S2Net keep
two, so queries and documents may even come from disjoint words, the cross-language setting). The
diagonal is the paper's "combined with VSM" (section 5.3, Table 2): a ranking by
β · cos(A q, B d) + (1 − β) · cos(q, d) is the ranking by f with w_i = c = (1 − β)/β, since unit
tf-idf vectors have cos(q, d) = q · d; w = 0 is the projection alone.

Served exactly as an inner product: the index stores B d/‖B d‖ and the query encoder ends with
A q/‖A q‖ (`normalizes_query`); a zero vector (no word the map knows) stays zero, its cosine 0.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from ssi.forms.base import ArraySpec, DocumentProducts, Form, unit_length


class Projection(Form):
    name: ClassVar[str] = "projection"
    description: ClassVar[str] = "cos(Aq, Bd) + Σ w_i q_i d_i: LSA, CL-LSA, OPCA, S2Net, alone or with tf-idf"
    paper: ClassVar[str] = "Clickthrough latent semantic models (paper 003), section 4, eq. (20); Table 2"
    arrays: ClassVar[tuple[ArraySpec, ...]] = (
        ArraySpec("A", ("N", "D"), "query map: a query's concept vector is A q"),
        ArraySpec("B", ("N", "D"), "document map: a document's concept vector is B d"),
        ArraySpec("w", ("D",), "weights of the tf-idf cosine: 0 for a projection alone, c = (1 − β)/β combined"),
    )
    word_array: ClassVar[str | None] = "B"  # B d = Σ_i B·i d_i: column i embeds word i
    normalizes_query: ClassVar[bool] = True

    def query_map(self) -> np.ndarray:
        return self.values["A"]

    def embed_documents(self, X: sp.csr_matrix) -> np.ndarray:
        """B d/‖B d‖ per row of X (zero rows stay zero)."""
        return unit_length(self.project(X, "B"))

    def lexical_weights(self) -> np.ndarray:
        return self.values["w"]

    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        """cos(A q, B d) + Σ_i w_i q_i d_i for every query row and document row, eq. (20)."""
        scores = unit_length(self.project(Q, "A")) @ unit_length(self.projected("B", docs)).T
        w = self.values["w"]
        if np.any(w != 0):
            scores += docs.products(Q, w)
        return scores
