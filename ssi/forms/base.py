"""What every model form declares, in one place (DESIGN.md, "Model forms: one home each").

A form is one kind of the model family bound to its trained arrays. It says:

- `arrays`: the named arrays it writes into the bundle, with their shapes in symbols
  (N: the model's embedding size, D: the vocabulary size);
- `query_map()`: the linear map M × D that embeds a tf-idf query; the trainer exports it as the
  ONNX query encoder and the service checks the encoder against it;
- `embed_documents(X)`: what the service stores per document in the inner-product index (M values);
- `lexical_weights()`: w of the diagonal term Σ_i w_i q_i d_i;
- `reference_scores(Q, docs)`: a plain numpy f(q, d) for a block of queries against every document,
  the single definition of the form's ranking. Nothing else computes f: the trainer validates with
  it, `ssi eval` ranks with it, and the service's oracle tests compare its top-k with it.

The service ranks a form exactly when f(q, d) = (query_map q)·embed(d) + Σ w_i q_i d_i, which every
form here satisfies (`served_exactly`); a future form that does not (a topic model, say) sets it
False and can only rerank candidates.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
import scipy.sparse as sp


class FormError(ValueError):
    """The arrays cannot make this form (a missing array, a wrong shape or dtype)."""


class DocumentProducts(Protocol):
    """Document rows X and their weighted inner products with query rows (ssi.products.DocMatrix)."""

    X: sp.csr_matrix

    def products(self, Q: sp.csr_matrix, weights: np.ndarray | None = None) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """One named array of a form: its shape in symbols ("N", "D") and what it holds."""

    name: str
    shape: tuple[str, ...]
    meaning: str


def dense(product: np.ndarray | sp.spmatrix) -> np.ndarray:
    """A sparse × dense product as a float32 ndarray (scipy returns np.matrix for some inputs)."""
    return np.asarray(product.toarray() if sp.issparse(product) else product, dtype=np.float32)


class Form(ABC):
    """A model form bound to its arrays (float32; memory-mapped arrays are kept as they are)."""

    name: ClassVar[str]
    description: ClassVar[str]
    paper: ClassVar[str]
    arrays: ClassVar[tuple[ArraySpec, ...]]
    served_exactly: ClassVar[bool] = True
    # The N × D array whose columns embed words, read by nearest words (PSI paper, Table 5); None: no such table.
    word_array: ClassVar[str | None] = None

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        wanted = [spec.name for spec in self.arrays]
        if sorted(arrays) != sorted(wanted):
            raise FormError(f"form '{self.name}' needs arrays {wanted}, got {sorted(arrays)}")
        sizes: dict[str, int] = {}
        self.values: dict[str, np.ndarray] = {}
        for spec in self.arrays:
            array = arrays[spec.name]
            if not isinstance(array, np.ndarray) or array.dtype != np.float32:
                raise FormError(f"form '{self.name}': array {spec.name} must be float32")
            if array.ndim != len(spec.shape):
                raise FormError(f"form '{self.name}': {spec.name} must have shape {spec.shape}, got {array.shape}")
            for symbol, size in zip(spec.shape, array.shape, strict=True):
                if sizes.setdefault(symbol, size) != size:
                    raise FormError(
                        f"form '{self.name}': {spec.name} has {symbol} = {size}, another array says {sizes[symbol]}"
                    )
            self.values[spec.name] = array
        self.n_dims = sizes.get("N", 0)
        self.vocab_size = sizes["D"]
        self._cache: dict[tuple[str, int], tuple[sp.csr_matrix, np.ndarray]] = {}
        self._transposed: dict[str, np.ndarray] = {}

    @classmethod
    def shapes(cls, n_dims: int, vocab_size: int) -> dict[str, tuple[int, ...]]:
        """The concrete shape of each array for N and D."""
        size = {"N": n_dims, "D": vocab_size}
        return {spec.name: tuple(size[s] for s in spec.shape) for spec in cls.arrays}

    @abstractmethod
    def query_map(self) -> np.ndarray:
        """M × D: a query's index embedding is query_map @ q (the ONNX encoder's matrix)."""

    @abstractmethod
    def embed_documents(self, X: sp.csr_matrix) -> np.ndarray:
        """n × M float32: what the index stores per document row of X."""

    @abstractmethod
    def lexical_weights(self) -> np.ndarray:
        """D float32: w of the diagonal term Σ_i w_i q_i d_i."""

    @abstractmethod
    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        """float32 [n_queries, n_docs]: f(q, d) of every query row of Q and document row of docs.X."""

    @property
    def index_dims(self) -> int:
        """M, the size of the vectors in the index."""
        return int(self.query_map().shape[0])

    def project(self, X: sp.csr_matrix, name: str) -> np.ndarray:
        """X Aᵀ for the N × D array `name`: each row's N-dimensional embedding (Aᵀ is kept, C order)."""
        table_t = self._transposed.get(name)
        if table_t is None:
            table_t = self._transposed[name] = np.ascontiguousarray(np.asarray(self.values[name]).T)
        return dense(X @ table_t)

    def projected(self, name: str, docs: DocumentProducts) -> np.ndarray:
        """`project(docs.X, name)`, computed once per document matrix (reference scores reuse it)."""
        key = (name, id(docs.X))
        cached = self._cache.get(key)
        if cached is None or cached[0] is not docs.X:
            cached = (docs.X, self.project(docs.X, name))
            self._cache = {k: v for k, v in self._cache.items() if v[0] is docs.X}
            self._cache[key] = cached
        return cached[1]
