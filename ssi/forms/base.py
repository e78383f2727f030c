"""What every model form declares, in one place (DESIGN.md, "Model forms: one home each").

A form is one kind of the model family bound to its trained arrays. It says:

- `arrays`: the named arrays it writes into the bundle, with their shapes in symbols
  (N: the model's embedding size, D: the vocabulary size; a form may declare another, e.g. H);
- `query_map()`: the linear map M × D that embeds a tf-idf query; the trainer exports it as the
  ONNX query encoder and the service checks the encoder against it. A form whose score is a cosine
  (`normalizes_query`, the linear projections of paper 003) embeds a query as A q/‖A q‖ instead, and
  its encoder ends with that L2 normalisation; `embed_queries(Q)` is the query embedding either way;
- `embed_documents(S)`: what the service stores per document in the inner-product index (M values), from
  the document's semantic row (`Vocabulary.semantic_rows`: the document row itself under tf-idf, scaled
  to a unit tf-idf-like vector under BM25), while the lexical term reads the document row (`docs.X`);
  a form with per-document state (`keyed`, e.g. half-transductive ranking) also takes the rows'
  document ids, `embed_documents(X, doc_ids)`: callers go through `embed_documents_of(X, doc_ids)`;
- `lexical_weights()`: w of the diagonal term Σ_i w_i q_i d_i;
- `reference_scores(Q, docs)`: a plain numpy f(q, d) for a block of queries against every document,
  the single definition of the form's ranking. Nothing else computes f: the trainer validates with
  it, `ssi eval` ranks with it, and the service's oracle tests compare its top-k with it.

The service ranks a form exactly when f(q, d) = embed_queries(q)·embed(d) + Σ w_i q_i d_i, which every
form here satisfies (`served_exactly`) but one: hash kernels (`hashkernel`) set it False, have no query
map (index_dims 0: their bundle holds no encoder), are refused by the service and ranked by `ssi eval`.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
import scipy.sparse as sp


class FormError(ValueError):
    """The arrays cannot make this form (a missing array, a wrong shape or dtype)."""


class DocumentProducts(Protocol):
    """Document rows X and their weighted inner products with query rows (ssi.products.DocMatrix): the
    lexical part; S, the rows the semantic part embeds (X itself under tf-idf, unit rows under BM25).

    `ids`: the rows' document ids where the caller knows them (None: unknown), for keyed forms.
    """

    X: sp.csr_matrix
    S: sp.csr_matrix
    ids: Sequence[str] | None

    def products(self, Q: sp.csr_matrix, weights: np.ndarray | None = None) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """One named array of a form: its shape in symbols ("N", "D") and what it holds."""

    name: str
    shape: tuple[str, ...]
    meaning: str


def row_fingerprints(X: sp.csr_matrix) -> list[str]:
    """A short hash of each tf-idf row (word ids and weights to 5 decimals): what a document's text was.

    A keyed form compares it with the fingerprint taken at training, so a document whose text changed
    since (same id, other words) is not mistaken for the one it learned a vector for. Weights are
    rounded so the same text featurized by another process hashes the same.
    """
    X = sp.csr_matrix(X)
    out: list[str] = []
    for row in range(X.shape[0]):
        start, end = int(X.indptr[row]), int(X.indptr[row + 1])
        order = np.argsort(X.indices[start:end], kind="stable")
        digest = hashlib.blake2b(digest_size=8)
        digest.update(np.asarray(X.indices[start:end][order], dtype=np.int64).tobytes())
        digest.update(np.round(np.asarray(X.data[start:end][order], dtype=np.float64), 5).tobytes())
        out.append(digest.hexdigest())
    return out


@dataclass(frozen=True)
class DocumentKeys:
    """The documents a keyed form holds a vector for, in its rows' order: ids and text fingerprints."""

    ids: tuple[str, ...]
    fingerprints: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.fingerprints):
            raise FormError(f"{len(self.ids)} document ids but {len(self.fingerprints)} fingerprints")
        if len(set(self.ids)) != len(self.ids):
            raise FormError("document ids must be unique")

    @classmethod
    def of(cls, ids: Sequence[str], X: sp.csr_matrix) -> DocumentKeys:
        """The keys of documents `ids` whose tf-idf rows are X."""
        if len(ids) != X.shape[0]:
            raise FormError(f"{len(ids)} document ids for {X.shape[0]} rows")
        return cls(tuple(ids), tuple(row_fingerprints(X)))

    def rows(self, ids: Sequence[str] | None, X: sp.csr_matrix) -> np.ndarray:
        """For each row of X (document `ids[i]`), its row among the keys, −1 when unknown or its text changed."""
        out = np.full(X.shape[0], -1, dtype=np.int64)
        if ids is None:
            return out
        if len(ids) != X.shape[0]:
            raise FormError(f"{len(ids)} document ids for {X.shape[0]} rows")
        where = {doc_id: i for i, doc_id in enumerate(self.ids)}
        candidates = [(i, where.get(doc_id, -1)) for i, doc_id in enumerate(ids)]
        known = [(i, k) for i, k in candidates if k >= 0]
        if known:
            rows = np.asarray([i for i, _ in known], dtype=np.int64)
            prints = row_fingerprints(X[rows])
            for (i, k), fingerprint in zip(known, prints, strict=True):
                if fingerprint == self.fingerprints[k]:
                    out[i] = k
        return out

    def __len__(self) -> int:
        return len(self.ids)


# The smallest norm a vector is divided by: a zero vector (no known word, or one the map sends to 0)
# stays zero, its cosine with everything 0. The ONNX encoder divides by the same max(‖y‖, UNIT_EPS).
UNIT_EPS = 1e-12


def unit_length(rows: np.ndarray) -> np.ndarray:
    """float32 rows divided by max(‖row‖, UNIT_EPS): unit length, zero rows left zero."""
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float32))
    return rows / np.maximum(norms, np.float32(UNIT_EPS))[:, None]


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
    # Whether the form holds per-document state keyed by document id (`document_keys`, bundle documents.tsv).
    keyed: ClassVar[bool] = False
    # Whether a query's index embedding is its query map's output scaled to unit length (a cosine form).
    normalizes_query: ClassVar[bool] = False

    def __init__(self, arrays: Mapping[str, np.ndarray], document_keys: DocumentKeys | None = None) -> None:
        if (document_keys is not None) != self.keyed:
            raise FormError(
                f"form '{self.name}' "
                + ("needs its documents' ids" if self.keyed else "holds no per-document state: no document ids")
            )
        self.document_keys = document_keys
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
        self.sizes = dict(sizes)  # every symbol's concrete size (N, D, and H, F or T where declared)
        self.n_dims = sizes.get("N", 0)
        self.vocab_size = sizes["D"]
        self._cache: dict[tuple[str, int], tuple[sp.csr_matrix, np.ndarray]] = {}
        self._transposed: dict[str, np.ndarray] = {}

    @classmethod
    def shapes(cls, n_dims: int, vocab_size: int, **sizes: int) -> dict[str, tuple[int, ...]]:
        """The concrete shape of each array for N, D and any other symbol the form declares (e.g. H=...)."""
        size = {"N": n_dims, "D": vocab_size, **sizes}
        missing = sorted({s for spec in cls.arrays for s in spec.shape} - size.keys())
        if missing:
            raise FormError(f"form '{cls.name}' needs the size of {', '.join(missing)}")
        return {spec.name: tuple(size[s] for s in spec.shape) for spec in cls.arrays}

    @classmethod
    def free_sizes(cls, declared: Mapping[str, Sequence[int]]) -> dict[str, int]:
        """The sizes of the symbols other than N and D, read from declared array shapes (a manifest's)."""
        sizes: dict[str, int] = {}
        for spec in cls.arrays:
            shape = declared.get(spec.name)
            if shape is None or len(shape) != len(spec.shape):
                raise FormError(f"form '{cls.name}': array {spec.name} must have shape {spec.shape}, got {shape}")
            sizes.update({s: int(n) for s, n in zip(spec.shape, shape, strict=True) if s not in ("N", "D")})
        return sizes

    @abstractmethod
    def query_map(self) -> np.ndarray:
        """M × D: a query's index embedding is query_map @ q (the ONNX encoder's matrix)."""

    def embed_queries(self, Q: sp.csr_matrix) -> np.ndarray:
        """n × M float32: what the ONNX encoder outputs per query row, (query map) q, to unit length where
        `normalizes_query`; the service ranks documents by its inner product with `embed_documents`."""
        embedded = dense(Q @ np.asarray(self.query_map(), dtype=np.float32).T)
        return unit_length(embedded) if self.normalizes_query else embedded

    @abstractmethod
    def embed_documents(self, X: sp.csr_matrix) -> np.ndarray:
        """n × M float32: what the index stores per document row of X."""

    def embed_documents_of(self, X: sp.csr_matrix, doc_ids: Sequence[str] | None = None) -> np.ndarray:
        """`embed_documents`, given the rows' document ids where known (a keyed form uses them; others need not)."""
        return self.embed_documents(X, doc_ids) if self.keyed else self.embed_documents(X)  # type: ignore[call-arg]

    @abstractmethod
    def lexical_weights(self) -> np.ndarray:
        """D float32: w of the diagonal term Σ_i w_i q_i d_i."""

    @abstractmethod
    def reference_scores(self, Q: sp.csr_matrix, docs: DocumentProducts) -> np.ndarray:
        """float32 [n_queries, n_docs]: f(q, d) of every query row of Q and document row of docs.X."""

    @property
    def index_dims(self) -> int:
        """M, the size of the vectors in the index (0 for a form not served exactly: no index, no encoder)."""
        return int(self.query_map().shape[0]) if self.served_exactly else 0

    def project(self, X: sp.csr_matrix, name: str) -> np.ndarray:
        """X Aᵀ for the N × D array `name`: each row's N-dimensional embedding (Aᵀ is kept, C order)."""
        table_t = self._transposed.get(name)
        if table_t is None:
            table_t = self._transposed[name] = np.ascontiguousarray(np.asarray(self.values[name]).T)
        return dense(X @ table_t)

    def projected(self, name: str, docs: DocumentProducts) -> np.ndarray:
        """`project(docs.S, name)`, computed once per document matrix (reference scores reuse it)."""
        key = (name, id(docs.S))
        cached = self._cache.get(key)
        if cached is None or cached[0] is not docs.S:
            cached = (docs.S, self.project(docs.S, name))
            self._cache = {k: v for k, v in self._cache.items() if v[0] is docs.S}
            self._cache[key] = cached
        return cached[1]
