"""The FAISS inner-product index over the documents' embeddings (V d for SSI): flat (exact), HNSW or IVF.

A vector's id is its row number, which is its position: rows are only ever appended, so FAISS's own
sequential ids are the rows and no id map is needed (an `IndexIDMap2` cost 0.13 × the vectors at 1 M
and is only unwrapped from older snapshots). A replaced or deleted document's row stays in the index
as a tombstone that searches skip through an `IDSelectorBitmap` over the live rows. That keeps a
delete O(1) for every index type (HNSW cannot remove vectors at all, and removing from a flat index
moves the whole array); tombstones are dropped when a snapshot is compacted (`service.state_builder`).

The index is also where the exact rerank reads a row's vector (`vectors`), so no second copy of the
embeddings is held: a flat "index" is the embeddings themselves (`EmbeddingRows`, scanned by FAISS's
`knn_inner_product`, the routine `IndexFlatIP` calls, without copying them into FAISS); IVF reads
them back through its direct map, HNSW from its flat storage. On 1 M passages that took the served
collection's vectors from about 2.15 × the float32 floor (index + rerank copy + id map) to the index alone.

An IVF index loaded from a snapshot keeps its inverted lists mapped from the file (FAISS's
IO_FLAG_MMAP_IFC: the pages are the page cache's, one copy for all the worker processes that load it,
and as fast to search as lists in memory). FAISS aborts the process on an add to mapped lists, so rows
appended later go to a second IVF over the same quantizer (`_delta`), searched beside it and merged;
a snapshot copies both into one IVF in memory (`_index_copy`), entries in row order as if added to one.

Vectors are passed as float32, C-contiguous arrays; callers serialize mutations against searches.

HNSW ranks by inner product in one of two ways (SSI_HNSW_METRIC). "ip" (the default) builds the
graph on raw inner products. "l2" indexes the standard reduction of maximum inner product search to
nearest neighbours (Bachrach et al., "Speeding up the Xbox recommender system using a Euclidean
transformation for inner-product spaces", RecSys 2014): each vector x becomes [x, √(R² − ‖x‖²)] and a
query q becomes [q, 0], so ‖q' − x'‖² = ‖q‖² + R² − 2 q·x and the L2 order is exactly the
inner-product order. R is 1.1 × the largest norm at build (more headroom squeezes the data into a
smaller cap of the sphere, away from the queries, and costs recall); a later vector longer than R is
clamped to √0 and only its own recall suffers, until the next compaction rebuilds with a new R. R is
not stored separately: every stored vector of the build has norm exactly R, so it is read back.

Which navigates better depends on the vectors. On an earlier trained Wikispeedia model raw inner
products plateaued at recall@10 0.77 even at efSearch 512 (hubs of large-norm vectors) and the
reduction reached 0.98 at 256; on the current N = 100 bundle the reverse (benchmarks.ann_scale,
100k passages, the served ranking's recall@10 at efSearch 128: 0.958 ip, 0.790 l2; raw index recall
at 1 M real text, efSearch 1,024: 0.96 ip, 0.72 l2), hence the default. IVF keeps inner products
(its k-means partitions did better with them: 0.89 vs 0.80 at nprobe 16).

OpenMP's thread count is a per-thread setting, so it is set on every call from whichever web worker
thread makes it: one thread for a single query of an HNSW index (FAISS parallelizes over queries, and
waking a team of OpenMP threads costs more than the scan of one query saves) and for every flat scan,
`threads` for other batches and builds. A flat batch is one matrix product (`BLAS_MIN_QUERIES`) whose
results FAISS merges in an OpenMP region per 1,024 rows; with the service's `threads` search threads
each opening such regions on the same cores, 32 clients got 391 q/s against 925–936 with one OpenMP
thread a scan (100k passages, 2 cores, wrk; the batching threads already keep the cores busy).
A single query of an IVF index scans hundreds of lists, enough to split: it
goes to a second IndexIVFFlat over the same quantizer and inverted lists (nothing copied) whose
parallel_mode 1 splits the probes of each query among the threads (mode 0, the main index's, splits
the queries of a batch: better for batches). On 1 M passages, nlist 4,000, nprobe 384, k 500, 2
threads: the FAISS stage 2.00 / 2.05 → 1.27 / 1.42 ms a query, median of 300, two runs of each
(`python -m benchmarks.search_stages --index-type ivf --ivf-nlist 4000 --nprobe 384 --clock wall`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import faiss
import numpy as np

from service import busy, int8_gemm, quantized
from service.quantized import QUANTIZED_QUERIES, Codes
from service.rows import EmbeddingRows
from service.settings import IndexType
from service.topk import EveryScore


class IndexLoadError(RuntimeError):
    """A saved index is unreadable or does not match the expected configuration."""


@dataclass(frozen=True, slots=True)
class IndexConfig:
    index_type: IndexType = "flat"
    hnsw_m: int = 32
    hnsw_ef_construction: int = 200
    hnsw_ef_search: int = 128
    hnsw_metric: str = "ip"  # "ip": the graph on raw inner products; "l2": the MIPS→L2 reduction
    ivf_nlist: int = 0  # 0: auto_nlist
    ivf_nprobe: int = 0  # 0: auto_nprobe
    threads: int = 1  # OpenMP threads for builds and batch searches (not part of what is built)
    int8_gemm: bool = True  # a flat scan's first rows by onnxruntime's integer product (service.int8_gemm)
    # Whose statistics weigh the stored lexical rows (SSI_OPEN_VOCAB_STATISTICS with SSI_OPEN_VOCAB on): the
    # collection's avg_len changes every row, so its snapshots are kept apart from the bundle's.
    lexical_statistics: Literal["bundle", "collection"] = "bundle"
    # The sentence encoder's graph that serves where it is not the bundle's own (whose content hash names it already),
    # None otherwise (service.state_builder.keyed_precision): asked (SSI_ENCODER_PRECISION) or taken on a CPU where the
    # bundle's int8 does not pay (ssi.sentence.served_precision), it changes a hybrid bundle's e(d): its snapshots are
    # kept apart.
    sentence_precision: str | None = None

    def tag(self) -> str:
        """The part of the cache key that changes what is built (search-time knobs are left out)."""
        statistics = "" if self.lexical_statistics == "bundle" else f"-stats{self.lexical_statistics}"
        if self.sentence_precision is not None:
            statistics += f"-sentence{self.sentence_precision}"
        if self.index_type == "hnsw":
            metric = "-ip" if self.hnsw_metric == "ip" else ""  # the reduction keeps the key it had
            return f"hnsw-m{self.hnsw_m}-efc{self.hnsw_ef_construction}{metric}{statistics}"
        if self.index_type == "ivf":
            # 'auto' was √n lists: an index of those is rebuilt
            return f"ivf-nlist{self.ivf_nlist or 'auto4'}{statistics}"
        return f"flat{statistics}"


def auto_nlist(n_vectors: int) -> int:
    """About 4·√n lists, with at least 39 training points per list (FAISS's k-means minimum).

    With nprobe scaled to the lists (`auto_nprobe`), more lists reach the same recall scanning fewer
    vectors: served-ranking recall@10 ≥ 0.98 took nprobe 256 of 1,000 lists (√n) at 1 M Wikispeedia
    passages against 384 of 4,000, 4.1 against 2.0 ms a query (benchmarks.ann_scale); at 100k, 0.990
    at nprobe 128 of 316 lists against 0.993 at 256 of 1,265 (`ssi bench`). The k-means costs more
    (48 s against 12 s at 1 M).
    """
    if n_vectors < 2 * 39:
        return 1
    return max(1, min(int(4 * math.sqrt(n_vectors)), n_vectors // 39))


def auto_nprobe(nlist: int) -> int:
    """6·√nlist lists probed (all of them for ≤ 36): the recall of the served ranking at that share held at
    about 0.98 from 100k to 1 M Wikispeedia passages with 4·√n lists (`ssi bench --index-types flat,ivf
    --nprobe ...`): 1,265 lists at 100k needed ~210 (0.966 at 128, 0.993 at 256), 4,000 at 1 M 384
    (0.986)."""
    return max(1, min(nlist, round(6 * math.sqrt(nlist))))


MIPS_HEADROOM = 1.1

# A flat scan is cut into pieces of this many rows (`every_score`), which idle cores share: about 0.2 ms each
# at 100 dimensions, against ~50 µs to hand one to another thread.
SCAN_PIECE_ROWS = 12_500


def _f32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


# FAISS scans a batch of queries with one matrix product (BLAS) when queries × dimension reaches
# `distance_compute_blas_threshold`, else one query at a time; faiss-cpu 1.15 ships 128,000, so the
# service's batches (≤ 64 queries of dimension ~100) were never multiplied. Measured here, 100k
# vectors of dimension 100, k 128, one thread, CPU ms a query (one-at-a-time / matrix product):
# 1 query 1.0 / 2.8, 3 queries 1.05 / 1.24, 4 queries 1.04 / 0.70, 16 queries 1.0 / 0.33, 32 1.0 / 0.27.
BLAS_MIN_QUERIES = 4
# With a selector (dead rows) FAISS takes the one-at-a-time path whatever the batch (1.06 ms a query at
# 16 queries); asking the product for k + dead rows instead cost 0.64 ms a query at k 2,048.
OVERFETCH_DEAD_MAX = 2048


def _live_first(scores: np.ndarray, rows: np.ndarray, live_bits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's first k live rows of a best-first answer, padded as FAISS pads (lowest float32, −1) where
    fewer are live."""
    found = rows >= 0
    safe = np.where(found, rows, 0)
    alive = found & ((live_bits[safe >> 3] >> (safe & 7)) & 1).astype(bool)
    order = np.argsort(~alive, axis=1, kind="stable")[:, :k]
    kept = np.take_along_axis(alive, order, axis=1)
    scores = np.where(kept, np.take_along_axis(scores, order, axis=1), np.finfo(np.float32).min)
    rows = np.where(kept, np.take_along_axis(rows, order, axis=1), -1)
    return np.ascontiguousarray(scores, dtype=np.float32), np.ascontiguousarray(rows, dtype=np.int64)


def _merged(answers: list[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best k of several (scores, rows) answers over disjoint rows, best first (the earlier
    answer first on ties); rows −1 (nothing found) sort last."""
    scores = np.concatenate([found for found, _ in answers], axis=1)
    rows = np.concatenate([found for _, found in answers], axis=1)
    best = np.argsort(-np.where(rows >= 0, scores, -np.inf), axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, best, axis=1), np.take_along_axis(rows, best, axis=1)


def _bits_from(live_bits: np.ndarray, first: int, n: int) -> np.ndarray:
    """The bits of rows first … first + n − 1 of a little-endian bitmap as a bitmap of their own (bit j: row
    first + j), bits past n cleared: a view where the rows start and end on byte boundaries."""
    if first % 8 == 0:
        bits = live_bits[first // 8 : first // 8 + (n + 7) // 8]
        if n % 8 == 0:
            return bits
        bits = bits.copy()
        bits[-1] &= np.uint8((1 << (n % 8)) - 1)
        return bits
    window = np.unpackbits(live_bits[first // 8 : (first + n + 7) // 8 + 1], bitorder="little")
    return np.packbits(window[first % 8 : first % 8 + n], bitorder="little")


def _probe_parallel_view(index: faiss.Index | None, threads: int) -> faiss.IndexIVFFlat | None:
    """For an IVF index and ≥ 2 threads, an IndexIVFFlat over its quantizer and inverted lists (not owned:
    the caller keeps `index` alive) that splits one query's probes among the threads."""
    if threads < 2 or not isinstance(index, faiss.IndexIVFFlat):
        return None
    view = faiss.IndexIVFFlat(index.quantizer, index.d, index.nlist, index.metric_type)
    view.replace_invlists(index.invlists, False)
    view.is_trained = True
    view.ntotal = index.ntotal
    view.parallel_mode = 1
    return view


class VectorIndex:
    """The vectors of rows 0 … ntotal − 1 and the top-k search over them (a row is its position)."""

    def __init__(
        self,
        config: IndexConfig,
        dim: int,
        *,
        rows: EmbeddingRows | None = None,
        index: faiss.Index | None = None,
        radius: float | None = None,
        owner: faiss.Index | None = None,
        mapped: bool = False,
    ) -> None:
        if (rows is None) == (index is None):
            raise ValueError("a VectorIndex holds either embedding rows (flat) or a FAISS index")
        self._rows = rows
        self._index = index
        self._owner = owner  # an IndexIDMap2 read from an older snapshot: it owns `index`, so it is kept alive
        self._probes_split = _probe_parallel_view(index, config.threads)
        # An IVF index read from a snapshot with its lists mapped (`load`): FAISS cannot add to mapped lists
        # (it aborts the process), so rows appended since go to `_delta`, an IVF over the same quantizer.
        self._mapped = mapped
        self._delta: faiss.IndexIVFFlat | None = None
        self.config = config
        self.dim = dim
        self.radius = radius  # R of the MIPS-to-L2 reduction (HNSW only; None until the first vectors)
        # A flat index's first rows (they never change) in pieces of SCAN_PIECE_ROWS, each packed once for
        # onnxruntime's integer product; rows appended later take numba's pass (service.quantized).
        self._products: list[int8_gemm.PieceProducts] = []
        if rows is not None and config.int8_gemm and 0 < dim <= int8_gemm.MAX_DIM:
            base = rows.base_codes.codes
            self._products = [
                int8_gemm.PieceProducts(base[a : a + SCAN_PIECE_ROWS]) for a in range(0, base.shape[0], SCAN_PIECE_ROWS)
            ]
        self.beyond_radius = 0  # vectors added since the build that were longer than R

    @property
    def reduced(self) -> bool:
        """Whether the index holds [x, √(R² − ‖x‖²)] and ranks by L2 (HNSW, metric l2), not raw inner products."""
        return self.config.index_type == "hnsw" and self.config.hnsw_metric != "ip"

    def _augment_documents(self, vectors: np.ndarray) -> np.ndarray:
        squared = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)
        if self.radius is None:
            self.radius = max(float(np.sqrt(squared.max(initial=0.0))) * MIPS_HEADROOM, 1e-6)
        extra = self.radius**2 - squared
        self.beyond_radius += int((extra < 0).sum())
        return _f32(np.hstack([vectors, np.sqrt(np.maximum(extra, 0.0))[:, None]]))

    @staticmethod
    def _augment_queries(queries: np.ndarray) -> np.ndarray:
        return _f32(np.hstack([queries, np.zeros((queries.shape[0], 1), dtype=np.float32)]))

    @classmethod
    def build(cls, config: IndexConfig, dim: int, vectors: np.ndarray, codes: Codes | None = None) -> VectorIndex:
        """A new index holding `vectors` as rows 0 … n − 1; an IVF index trains its coarse quantizer on them.
        A flat index keeps float32 C-order `vectors` as they are, uncopied: the caller hands them over, with
        their int8 `codes` where it has them (a snapshot's, mapped), else they are computed."""
        vectors = _f32(vectors).reshape(-1, dim)
        faiss.omp_set_num_threads(config.threads)
        if config.index_type == "flat":
            return cls(config, dim, rows=EmbeddingRows(vectors, dim, codes))
        if config.index_type == "hnsw":
            if config.hnsw_metric == "ip":
                index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            else:
                index = faiss.IndexHNSWFlat(dim + 1, config.hnsw_m, faiss.METRIC_L2)
            index.hnsw.efConstruction = config.hnsw_ef_construction
            index.hnsw.efSearch = config.hnsw_ef_search
        else:
            nlist = config.ivf_nlist or auto_nlist(vectors.shape[0])
            nlist = max(1, min(nlist, max(1, vectors.shape[0])))
            quantizer = faiss.IndexFlatIP(dim)
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
            if nlist == 1:
                # One list is an exhaustive scan: no k-means needed (and none possible on an empty collection).
                quantizer.add(np.zeros((1, dim), dtype=np.float32))
                index.is_trained = True
            else:
                rng = np.random.default_rng(0)
                sample = vectors
                if vectors.shape[0] > 256 * nlist:
                    sample = vectors[np.sort(rng.choice(vectors.shape[0], 256 * nlist, replace=False))]
                index.train(_f32(sample))
            index.nprobe = config.ivf_nprobe or auto_nprobe(nlist)
            index.make_direct_map()  # row → (list, offset), 8 bytes a row: how `vectors` reads rows back
        built = cls(config, dim, index=index)
        if vectors.shape[0]:
            built.add(vectors)
        return built

    @property
    def ntotal(self) -> int:
        if self._rows is not None:
            return self._rows.rows
        return int(self._index.ntotal) + (int(self._delta.ntotal) if self._delta is not None else 0)

    @property
    def nprobe(self) -> int | None:
        """Lists probed per query unless a request says otherwise (SSI_IVF_NPROBE, or `auto_nprobe`)."""
        nlist = self.nlist
        if nlist is None:
            return None
        return min(nlist, self.config.ivf_nprobe or auto_nprobe(nlist))

    @property
    def nlist(self) -> int | None:
        if self.config.index_type != "ivf":
            return None
        return int(faiss.extract_index_ivf(self._index).nlist)

    def add(self, vectors: np.ndarray) -> int:
        """Append `vectors` as the next rows; returns the first new row."""
        vectors = _f32(vectors).reshape(-1, self.dim)
        first = self.ntotal
        if self._rows is not None:
            self._rows.append(vectors)
        elif vectors.shape[0]:
            faiss.omp_set_num_threads(self.config.threads)
            if self._mapped:
                self._delta_index().add(vectors)
            else:
                self._index.add(self._augment_documents(vectors) if self.reduced else vectors)
                if self._probes_split is not None:
                    self._probes_split.ntotal = self._index.ntotal
        return first

    def _delta_index(self) -> faiss.IndexIVFFlat:
        """The IVF of rows appended to a mapped one (made on the first append): same quantizer and lists."""
        if self._delta is None:
            base = self._index
            self._delta = faiss.IndexIVFFlat(base.quantizer, base.d, base.nlist, base.metric_type)
            self._delta.is_trained = True
            self._delta.make_direct_map()
        return self._delta

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The stored embedding of each of `rows` (float32, one row each), for the exact rerank."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._rows is not None:
            return self._rows.take(rows)
        if rows.shape[0] == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._delta is None or int(rows.max()) < self._index.ntotal:
            return self._index.reconstruct_batch(rows)[:, : self.dim]
        first_delta = int(self._index.ntotal)
        out = np.empty((rows.shape[0], self.dim), dtype=np.float32)
        in_base = rows < first_delta
        if in_base.any():
            out[in_base] = self._index.reconstruct_batch(rows[in_base])[:, : self.dim]
        out[~in_base] = self._delta.reconstruct_batch(rows[~in_base] - first_delta)
        return out

    @property
    def scans_every_row(self) -> bool:
        """Whether this is a flat index, whose search is a scan of every row's vector (`every_score`)."""
        return self._rows is not None

    def every_score(self, queries: np.ndarray, beside: Sequence[Callable[[], None]] = ()) -> EveryScore:
        """Every row's inner product with each query, float32 [queries, rows], dead rows included, with how far
        each may be off: the flat scan kept whole instead of cut to a top k, for the exact ranking when the
        lexical part is known for every row too (service.rerank.every_row_top). Flat indexes only.

        From two queries on, the rows the index started with go through onnxruntime's integer product with the
        queries quantized to 7 bits (service.int8_gemm; its bound adds a term), rows appended since through
        numba's int8 pass (service.quantized). Without the former (SSI_INT8_GEMM=false, a lone query, a query
        not finite), at most QUANTIZED_QUERIES queries take the int8 pass and more BLAS's float32 product
        (rounding only). The rows go in pieces of SCAN_PIECE_ROWS, spread with the `beside` tasks (run first)
        over this thread and the cores no other search is using (service.busy): all on this one under load."""
        assert self._rows is not None, "every_score needs a flat index"
        queries = _f32(queries).reshape(-1, self.dim)
        out = np.empty((queries.shape[0], self._rows.rows), dtype=np.float32)
        tasks = list(beside)
        products = self._products if queries.shape[0] >= int8_gemm.FROM_QUERIES else []
        products = products if products and bool(np.isfinite(queries).all()) else []
        if not products and queries.shape[0] > QUANTIZED_QUERIES:

            def product(piece: np.ndarray, first: int) -> None:
                np.matmul(queries, piece.T, out=out[:, first : first + piece.shape[0]])

            for part, first in self._rows.parts():
                for a in range(0, part.shape[0], SCAN_PIECE_ROWS):
                    tasks.append(partial(product, part[a : a + SCAN_PIECE_ROWS], first + a))
            busy.board().spread(tasks)
            return EveryScore(out, None, None)

        def coded(piece: Codes, first: int) -> None:
            quantized.scores(piece, queries, out[:, first : first + piece.codes.shape[0]])

        codes_a, step = int8_gemm.quantize_queries(queries) if products else (None, None)

        def multiplied(piece: int8_gemm.PieceProducts, scales: np.ndarray, first: int) -> None:
            int8_gemm.scores(piece, scales, codes_a, step, out[:, first : first + piece.rows])

        for codes, first in self._rows.coded_parts():
            if products and first == 0:  # the first rows, in the pieces packed when the index was made
                a = 0
                for packed in products:
                    tasks.append(partial(multiplied, packed, codes.scales[a : a + packed.rows], a))
                    a += packed.rows
                continue
            for a in range(0, codes.codes.shape[0], SCAN_PIECE_ROWS):
                b = a + SCAN_PIECE_ROWS
                piece = Codes(codes.codes[a:b], codes.scales[a:b], codes.radius[a:b])
                tasks.append(partial(coded, piece, first + a))
        busy.board().spread(tasks)
        factor = quantized.query_factor(queries)
        if not products:
            return EveryScore(out, self._rows.radius(), factor)
        return EveryScore(out, self._rows.radius(), factor, self._rows.l1(), int8_gemm.step_factor(step))

    def vector_parts(self) -> list[np.ndarray] | None:
        """A flat index's embeddings in row order, as its own arrays (filled rows never change: a snapshot saves
        them without a copy); None for HNSW and IVF, whose serialized index holds their vectors."""
        if self._rows is None:
            return None
        return [piece for piece, _ in self._rows.parts()]

    def code_parts(self) -> list[Codes] | None:
        """A flat index's int8 codes (service.quantized) in the blocks of `vector_parts`; None for HNSW and IVF."""
        if self._rows is None:
            return None
        return [codes for codes, _ in self._rows.coded_parts()]

    @property
    def shared_vectors(self) -> bool:
        """Whether the vectors of the rows loaded from a snapshot are its file mapped (a flat index's embeddings,
        an IVF index's lists): one copy in the page cache for every process that loaded it."""
        return self._mapped or (self._rows is not None and self._rows.shared)

    def all_vectors(self) -> np.ndarray:
        """Every row's embedding as one array: for a flat index its first part itself when nothing was appended
        since (else a copy), for the others a copy."""
        if self._rows is not None:
            return self._rows.whole()
        if self.ntotal == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.vectors(np.arange(self.ntotal, dtype=np.int64))

    def search(
        self,
        queries: np.ndarray,
        k: int,
        *,
        live_bits: np.ndarray | None = None,
        ef_search: int | None = None,
        nprobe: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k rows by inner product for each query: (scores, rows), -1 rows where fewer exist.

        `live_bits` is a little-endian bitmap of the rows that may be returned (None: all rows).
        """
        queries = _f32(queries).reshape(-1, self.dim)
        k = max(1, min(k, max(1, self.ntotal)))
        if self.ntotal == 0:
            return (np.full((queries.shape[0], k), -np.inf, np.float32), np.full((queries.shape[0], k), -1, np.int64))
        split = queries.shape[0] == 1 and self._probes_split is not None
        one_thread = (queries.shape[0] == 1 or self._rows is not None) and not split
        faiss.omp_set_num_threads(1 if one_thread else self.config.threads)
        # Process-wide in FAISS; every search sets it for its own dimension (see BLAS_MIN_QUERIES).
        faiss.cvar.distance_compute_blas_threshold = BLAS_MIN_QUERIES * self.dim
        if self._rows is not None:
            return self._scan(queries, k, live_bits)
        selector = None
        if live_bits is not None:
            selector = faiss.IDSelectorBitmap(live_bits.shape[0], faiss.swig_ptr(live_bits))
        index = self._probes_split if split else self._index
        scores, rows = self._search_index(index, queries, k, selector, ef_search, nprobe)
        del selector  # kept alive until FAISS is done with it
        if self._delta is not None and self._delta.ntotal:
            first = int(self._index.ntotal)
            bits = None if live_bits is None else _bits_from(live_bits, first, int(self._delta.ntotal))
            appended = None if bits is None else faiss.IDSelectorBitmap(bits.shape[0], faiss.swig_ptr(bits))
            extra_scores, extra_rows = self._search_index(
                self._delta, queries, min(k, int(self._delta.ntotal)), appended, ef_search, nprobe
            )
            del appended
            extra_rows = np.where(extra_rows >= 0, extra_rows + first, extra_rows)
            scores, rows = _merged([(scores, rows), (extra_scores, extra_rows)], k)
        return scores, rows

    def _scan(self, queries: np.ndarray, k: int, live_bits: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The flat scan: each part of the rows (EmbeddingRows) scanned on its own, the answers merged."""
        answers = [self._scan_part(queries, k, part, first, live_bits) for part, first in self._rows.parts()]
        return answers[0] if len(answers) == 1 else _merged(answers, k)

    def _scan_part(
        self, queries: np.ndarray, k: int, vectors: np.ndarray, first: int, live_bits: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The top k of the rows first … first + len(vectors) − 1. FAISS's matrix-product path takes no selector,
        so a batch over a few dead rows asks for k + dead rows without one and drops the dead (`_live_first`)."""
        k = min(k, vectors.shape[0])
        if live_bits is None:
            scores, rows = self._knn(queries, vectors, k, None)
        else:
            bits = _bits_from(live_bits, first, vectors.shape[0])
            dead = vectors.shape[0] - int(np.bitwise_count(bits).sum())
            if queries.shape[0] >= BLAS_MIN_QUERIES and dead <= OVERFETCH_DEAD_MAX:
                scores, rows = self._knn(queries, vectors, min(k + dead, vectors.shape[0]), None)
                scores, rows = _live_first(scores, rows, bits, k)
            else:
                selector = faiss.IDSelectorBitmap(bits.shape[0], faiss.swig_ptr(bits))
                scores, rows = self._knn(queries, vectors, k, selector)
        if first:
            rows = np.where(rows >= 0, rows + first, rows)
        return scores, rows

    def _knn(
        self, queries: np.ndarray, vectors: np.ndarray, k: int, selector: faiss.IDSelector | None
    ) -> tuple[np.ndarray, np.ndarray]:
        scores = np.empty((queries.shape[0], k), dtype=np.float32)
        rows = np.empty((queries.shape[0], k), dtype=np.int64)
        faiss.knn_inner_product(
            faiss.swig_ptr(queries),
            faiss.swig_ptr(vectors),
            self.dim,
            queries.shape[0],
            vectors.shape[0],
            k,
            faiss.swig_ptr(scores),
            faiss.swig_ptr(rows),
            selector,
        )
        return scores, rows

    def _search_index(
        self,
        index: faiss.Index,
        queries: np.ndarray,
        k: int,
        selector: faiss.IDSelector | None,
        ef_search: int | None,
        nprobe: int | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.config.index_type == "hnsw":
            params = faiss.SearchParametersHNSW()
            params.efSearch = max(k, ef_search or self.config.hnsw_ef_search)
        else:
            params = faiss.SearchParametersIVF()
            params.nprobe = min(nprobe or self.nprobe or 1, self.nlist or 1)
        if selector is not None:
            params.sel = selector
        if not self.reduced:
            return index.search(queries, k, params=params)
        distances, rows = index.search(self._augment_queries(queries), k, params=params)
        # ‖q' − x'‖² = ‖q‖² + R² − 2 q·x, so the inner product comes back exactly (up to rounding).
        norms = np.einsum("ij,ij->i", queries, queries, dtype=np.float64)[:, None]
        scores = ((norms + (self.radius or 0.0) ** 2 - distances) / 2).astype(np.float32)
        scores[rows < 0] = -np.inf
        return scores, rows

    def serialize(self) -> np.ndarray | None:
        """The index as bytes for a snapshot; None for a flat index (its vectors are the snapshot's embeddings)."""
        if self._index is None:
            return None
        return faiss.serialize_index(self._index_copy() if self._mapped else self._index)

    def _index_copy(self) -> faiss.IndexIVFFlat:
        """A mapped IVF and its appended rows as one IVF in memory (for a snapshot): every list's entries copied,
        the appended rows' after the mapped ones, as if they had been added to it."""
        base = self._index
        copy = faiss.IndexIVFFlat(faiss.clone_index(base.quantizer), base.d, base.nlist, base.metric_type)
        copy.is_trained = True
        first = int(base.ntotal)
        for source, offset in ((base, 0), (self._delta, first)):
            if source is None:
                continue
            lists = source.invlists
            for number in range(source.nlist):
                n = lists.list_size(number)
                if n == 0:
                    continue
                ids = faiss.rev_swig_ptr(lists.get_ids(number), n).copy() + offset
                codes = faiss.rev_swig_ptr(lists.get_codes(number), n * lists.code_size).copy()
                copy.invlists.add_entries(number, n, faiss.swig_ptr(ids), faiss.swig_ptr(codes))
        copy.ntotal = self.ntotal
        copy.nprobe = base.nprobe
        copy.make_direct_map()
        return copy

    @classmethod
    def load(cls, path: Path, config: IndexConfig, dim: int) -> VectorIndex:
        """An HNSW or IVF index saved by `serialize` (or wrapped in the IndexIDMap2 of older snapshots)."""
        mapped = config.index_type == "ivf"
        try:
            index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC if mapped else 0)
            if mapped and not isinstance(index, faiss.IndexIVFFlat):  # an older snapshot's wrapper: read, not mapped
                mapped = False
                index = faiss.read_index(str(path))
        except RuntimeError as exc:
            raise IndexLoadError(f"{path}: FAISS cannot read the index ({str(exc).splitlines()[0]})") from None
        reduced = config.index_type == "hnsw" and config.hnsw_metric != "ip"
        stored_dim = dim + 1 if reduced else dim
        owner = None
        if isinstance(index, faiss.IndexIDMap2):
            ids = faiss.vector_to_array(index.id_map)
            if not np.array_equal(ids, np.arange(index.ntotal, dtype=ids.dtype)):
                raise IndexLoadError(f"{path}: its ids are not the row numbers 0 … {index.ntotal - 1}")
            owner, index = index, faiss.downcast_index(index.index)
        classes = {"hnsw": faiss.IndexHNSWFlat, "ivf": faiss.IndexIVFFlat}
        expected = classes.get(config.index_type)
        if expected is None or not isinstance(index, expected) or index.d != stored_dim:
            wanted = expected.__name__ if expected is not None else "no saved index (flat)"
            raise IndexLoadError(f"{path}: holds a {type(index).__name__} of dimension {index.d}, expected {wanted}")
        wanted_metric = faiss.METRIC_L2 if reduced else faiss.METRIC_INNER_PRODUCT
        if index.metric_type != wanted_metric:
            raise IndexLoadError(f"{path}: its metric is not the one configured (SSI_HNSW_METRIC)")
        radius = None
        if config.index_type == "hnsw":
            index.hnsw.efSearch = config.hnsw_ef_search
        elif index.direct_map.type == faiss.DirectMap.NoMap:
            index.make_direct_map()
        if reduced and index.ntotal:
            # The first stored vector comes from the build, where every vector has norm exactly R.
            radius = float(np.linalg.norm(index.reconstruct(0).astype(np.float64)))
        return cls(config, dim, index=index, radius=radius, owner=owner, mapped=mapped)
