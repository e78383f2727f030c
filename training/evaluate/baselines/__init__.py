"""The classic baselines, picked by name from a registry (not an if-chain).

Each entry knows how to build its scorer from a shared `BaselineContext` (one tokenization, one
tf-idf document matrix, one SVD for every LSI variant), its default knobs, and the small grid it
is tuned over on the validation split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ssi.records import Document
from training.evaluate.baselines.bm25 import DEFAULT_B, DEFAULT_K1, BM25Scorer
from training.evaluate.baselines.lsi import DEFAULT_K, LsiBasis, LsiScorer
from training.evaluate.baselines.lsi_mix import DEFAULT_ALPHA, LsiMixScorer
from training.evaluate.baselines.query_expansion import DEFAULT_FB_DOCS, DEFAULT_FB_WEIGHT, RocchioScorer
from training.evaluate.baselines.tfidf import TfidfScorer
from training.evaluate.features import TextFeatures
from training.evaluate.scorer import DEFAULT_BLOCK, Scorer

LSI_K_GRID = (50, 100, 200)
ALPHA_GRID = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
# Indexing dominates BM25's cost, so its grid is two classic settings: Anserini's and bm25s's defaults.
BM25_GRID = ({"k1": 0.9, "b": 0.4}, {"k1": 1.5, "b": 0.75})
QE_GRID = tuple(
    {"fb_docs": m, "fb_weight": w, "fb_terms": None} for m in (3, 10) for w in (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
)
TFIDF_MEMO_BYTES = 512 * 1024 * 1024


@dataclass
class BaselineContext:
    """What the baselines share on one corpus: documents, featurizer, the tf-idf scorer, the SVD."""

    docs: Sequence[Document]
    features: TextFeatures
    lsi_k_grid: tuple[int, ...] = LSI_K_GRID
    seed: int = 0
    block_size: int = DEFAULT_BLOCK
    _bases: dict[int, LsiBasis] = field(default_factory=dict, repr=False)

    @cached_property
    def tfidf(self) -> TfidfScorer:
        return TfidfScorer(self.features, self.docs, block_size=self.block_size, memo_bytes=TFIDF_MEMO_BYTES)

    def lsi_basis(self, k: int) -> LsiBasis:
        """One SVD at the largest k asked for so far serves every smaller k."""
        k_needed = max((k, *self.lsi_k_grid))
        for k_max, basis in self._bases.items():
            if k_max >= k:
                return basis
        basis = LsiBasis.fit(self.tfidf.X, k_needed, seed=self.seed)
        self._bases[k_needed] = basis
        return basis

    def lsi(self, k: int) -> LsiScorer:
        return LsiScorer(self.features, self.tfidf.X, self.lsi_basis(k), k, block_size=self.block_size)


@dataclass(frozen=True)
class BaselineSpec:
    """How to build one baseline, with its defaults and its tuning grid."""

    name: str
    label: str
    build: Callable[[BaselineContext, dict[str, Any]], Scorer]
    defaults: Callable[[BaselineContext], dict[str, Any]]
    grid: Callable[[BaselineContext], list[dict[str, Any]]]


def _build_bm25(ctx: BaselineContext, p: dict[str, Any]) -> Scorer:
    return BM25Scorer(
        ctx.docs,
        k1=p["k1"],
        b=p["b"],
        tokens=ctx.features.tokens,
        block_size=ctx.block_size,
        stemmer=ctx.features.vocab.stemmer,
    )


BASELINES: dict[str, BaselineSpec] = {
    spec.name: spec
    for spec in (
        BaselineSpec("tfidf", "tf-idf cosine", lambda ctx, p: ctx.tfidf, lambda ctx: {}, lambda ctx: [{}]),
        BaselineSpec(
            "bm25",
            "BM25",
            _build_bm25,
            lambda ctx: {"k1": DEFAULT_K1, "b": DEFAULT_B},
            lambda ctx: [dict(p) for p in BM25_GRID],
        ),
        BaselineSpec(
            "lsi",
            "LSI",
            lambda ctx, p: ctx.lsi(p["k"]),
            lambda ctx: {"k": DEFAULT_K},
            lambda ctx: [{"k": k} for k in ctx.lsi_k_grid],
        ),
        BaselineSpec(
            "lsi-mix",
            "α·LSI + (1−α)·tf-idf",
            lambda ctx, p: LsiMixScorer(ctx.tfidf, ctx.lsi(p["k"]), p["alpha"]),
            lambda ctx: {"k": DEFAULT_K, "alpha": DEFAULT_ALPHA},
            lambda ctx: [{"k": k, "alpha": a} for k in ctx.lsi_k_grid for a in ALPHA_GRID],
        ),
        BaselineSpec(
            "qe",
            "query expansion (Rocchio PRF)",
            lambda ctx, p: RocchioScorer(ctx.tfidf, p["fb_docs"], p["fb_weight"], p["fb_terms"]),
            lambda ctx: {"fb_docs": DEFAULT_FB_DOCS, "fb_weight": DEFAULT_FB_WEIGHT, "fb_terms": None},
            lambda ctx: [dict(p) for p in QE_GRID],
        ),
    )
}


def parse_baselines(spec: str) -> list[str]:
    """'tfidf,bm25' -> ['tfidf', 'bm25']; '' or 'none' -> []; unknown names raise ValueError."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if names in ([], ["none"]):
        return []
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline {unknown[0]!r}; choose from {', '.join(BASELINES)}")
    return list(dict.fromkeys(names))


__all__ = [
    "BASELINES",
    "BM25Scorer",
    "BaselineContext",
    "BaselineSpec",
    "LsiBasis",
    "LsiMixScorer",
    "LsiScorer",
    "RocchioScorer",
    "TfidfScorer",
    "parse_baselines",
]
