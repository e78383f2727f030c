"""How a text's word counts become the weights of its row: the lexical part of every model's score.

Two weightings, both recorded in the bundle and applied identically by the trainer, `ssi eval`,
`ssi rank` and the service (through `ssi.vocab.Vocabulary`, which holds the bundle's choice):

- `tfidf` (the papers' representation, Bai et al. 2009): a query and a document alike become
  x_i = (1 + log tf_i) · idf_i scaled to unit length, so q·d is their tf-idf cosine.
- `bm25` (Robertson & Zaragoza's BM25, Lucene's idf, as bm25s computes it): the two sides differ.
  A document's row holds each word's saturated, length-normalised term frequency

      d_i = tf_i / (tf_i + k1 · (1 − b + b · |d| / avg_len))          (in [0, 1))

  and a query's row its idf-weighted term counts scaled to unit length, q_i = idf_i · qtf_i / ‖idf ∘ qtf‖.
  Then q·d = BM25(q, d) / ‖idf ∘ qtf‖ (Lucene's BM25, which leaves out the classic constant factor k1 + 1):
  BM25 divided by a constant of the query, so the
  lexical part ranks every query's documents exactly as BM25 does (over the vocabulary's words), and a
  model learned on top of it starts at BM25 instead of below it. |d| counts every token of the text
  (words outside the vocabulary included, as BM25 counts them); avg_len is the training corpus's mean,
  fixed in the bundle: a document added to a served collection later is weighted against the same
  average, so no stored row ever changes when another is written.

The semantic part reads the query row as it is (U q) and, on the document side, not the raw BM25 row but
`Vocabulary.semantic_rows`: each word's saturated term frequency times its idf, scaled to unit length (V d).
The raw row grows with a document's length and carries no idf, so V d learned from it favoured long,
common-word documents: on the demo's document–document task it lost 0.11 validation MAP to the tf-idf base,
the unit idf-weighted row none (validation MAP 0.530 with `semantic_rows` returning the raw rows, 0.637 with
these rows, 0.638 on tf-idf: `ssi train` on the demo corpus's pairs, `--max-minutes 2` each).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Lexical = Literal["tfidf", "bm25"]
LEXICAL_KINDS: tuple[Lexical, ...] = ("tfidf", "bm25")

TFIDF_SCHEME = "log1p-idf-l2"
BM25_SCHEME = "bm25-doc-saturated-query-idf-l2"

# bm25s's (and this project's BM25 baseline's) defaults.
DEFAULT_K1 = 1.5
DEFAULT_B = 0.75


class WeightingError(ValueError):
    """BM25 parameters that cannot weigh a row (k1 ≤ 0, b outside [0, 1], no average length)."""


@dataclass(frozen=True, slots=True)
class Bm25:
    """The BM25 weighting's parameters, as the bundle records them."""

    k1: float = DEFAULT_K1
    b: float = DEFAULT_B
    avg_len: float = 1.0  # mean tokens per training document

    def __post_init__(self) -> None:
        if not (np.isfinite(self.k1) and self.k1 > 0):
            raise WeightingError(f"BM25 k1 must be > 0, got {self.k1}")
        if not (0.0 <= self.b <= 1.0):
            raise WeightingError(f"BM25 b must be in [0, 1], got {self.b}")
        if not (np.isfinite(self.avg_len) and self.avg_len > 0):
            raise WeightingError(f"BM25 average document length must be > 0, got {self.avg_len}")

    def manifest_entry(self) -> dict[str, Any]:
        return {"scheme": "bm25", "k1": self.k1, "b": self.b, "avg_len": self.avg_len}

    @classmethod
    def from_manifest(cls, entry: dict[str, Any]) -> Bm25:
        if entry.get("scheme") != "bm25":
            raise WeightingError(f"unknown lexical weighting {entry.get('scheme')!r} (this build knows bm25)")
        try:
            return cls(k1=float(entry["k1"]), b=float(entry["b"]), avg_len=float(entry["avg_len"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise WeightingError(f"lexical weighting: {exc}") from None

    def document_values(self, counts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """float32 d_i of entries with term counts `counts` in documents of `lengths` tokens (one per entry)."""
        norm = self.k1 * (1.0 - self.b + self.b * lengths.astype(np.float64) / self.avg_len)
        return (counts / (counts + norm)).astype(np.float32)


def average_length(n_tokens: int, n_docs: int) -> float:
    """BM25's avg_len of a collection of `n_docs` texts holding `n_tokens` tokens in all (at least 1): one formula
    for the bundle's (its training corpus, `Vocabulary.build`) and a served collection's (ssi.open_vocab), so the
    two are equal, bit for bit, when the collection is the training corpus."""
    return max(n_tokens / n_docs, 1.0) if n_docs > 0 else 1.0


def bm25_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """Lucene's BM25 idf, log(1 + (n − df + 0.5) / (df + 0.5)) (bm25s "lucene"): always positive."""
    df = np.asarray(df, dtype=np.float64)
    return np.log1p((n_docs - df + 0.5) / (df + 0.5)).astype(np.float32)


@functools.lru_cache(maxsize=1 << 16)
def bm25_idf_of(df: int, n_docs: int) -> float:
    """`bm25_idf` of one document frequency (its float32 value), remembered: the open vocabulary weighs a query's
    few new words at every query (ssi.open_vocab), their df mostly small and met before, and numpy's seven calls
    on a handful of values took 27-34 µs of a /match right after another page's ranking."""
    return float(bm25_idf(np.array([df], dtype=np.float64), n_docs)[0])
