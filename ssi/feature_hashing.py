"""Correlated feature hashing (Bai et al., "Supervised Semantic Indexing", 2009, section 2.2.1; paper 001).

Words beyond the F most frequent ones, and 2-grams, are too many to embed (Wikispeedia: 1.2 M
features). Each such *rare feature* i is replaced by its k most correlated frequent words
S_1(i), …, S_k(i), ranked by the DICE coefficient counted on the unlabeled corpus,

    DICE(i, j) = 2 · cooccur(i, j) / (occur(i) + occur(j))        (document level)

with weight 1/k each: the paper's equation (6), the mean of k hash maps, "equivalent to
pre-processing our documents and replacing all the words indexed by i with S_1(i), …, S_k(i)".
So a text's rare features (tf-idf over the rare dictionary, unit length) become an F-dimensional
vector h = H x_rare, slot j standing for frequent word j. The vocabulary (ssi.vocab) appends h to
the ordinary tf-idf vector, so every consumer of `Vocabulary.featurize` (trainer, `ssi eval`, the
service) sees the same [x_D ; h] rows and a form (ssi.forms.cfh) scores them.

The map is part of the bundle (`write_hashing` / `read_hashing`): the rare dictionary with its idf
(`cfh_features.tsv`, "feature<TAB>idf", a 2-gram written "word word"), the k targets of each
feature (`cfh_targets.npy`, int32, −1 where fewer than k frequent words co-occur) and their DICE
scores (`cfh_dice.npy`, float32; informative, the weights are 1/k).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ssi.idf_table import read_idf_table, write_idf_table

FEATURES_FILE = "cfh_features.tsv"
TARGETS_FILE = "cfh_targets.npy"
DICE_FILE = "cfh_dice.npy"
FILES = (FEATURES_FILE, TARGETS_FILE, DICE_FILE)


class HashingError(ValueError):
    """The correlated-hashing map is inconsistent (shapes, targets out of range, a bad file)."""


@dataclass
class CorrelatedHashing:
    """The DICE map: rare features (words beyond the top F, 2-grams) → k frequent-word ids with weights 1/k."""

    n_frequent: int  # F: width of the hashed block; slot j is vocabulary word j
    features: list[str]  # the rare dictionary: words, and 2-grams as "word word"
    idf: np.ndarray  # R float32
    targets: np.ndarray  # R × k int32 frequent-word ids, best first; −1 pads
    dice: np.ndarray  # R × k float32 DICE(i, S_p(i)); 0 on pads
    ngrams: tuple[int, ...] = (1, 2)
    info: dict[str, Any] = field(default_factory=dict)  # how it was counted (min_df, level, counts)
    _word_code: dict[str, int] = field(init=False, repr=False)
    _word_row: np.ndarray = field(init=False, repr=False)
    _bigram_keys: np.ndarray = field(init=False, repr=False)
    _bigram_rows: np.ndarray = field(init=False, repr=False)
    _H: sp.csr_matrix = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.idf = np.asarray(self.idf, dtype=np.float32)
        self.targets = np.asarray(self.targets, dtype=np.int32)
        self.dice = np.asarray(self.dice, dtype=np.float32)
        self.ngrams = tuple(sorted(set(self.ngrams)))
        n = len(self.features)
        if self.n_frequent < 1:
            raise HashingError("the hashed block needs at least one frequent word")
        if not set(self.ngrams) <= {1, 2}:
            raise HashingError(f"n-grams must be 1 and/or 2, got {self.ngrams}")
        if self.idf.shape != (n,) or self.targets.ndim != 2 or self.targets.shape[0] != n:
            raise HashingError(f"{n} features but idf {self.idf.shape} and targets {self.targets.shape}")
        if self.dice.shape != self.targets.shape:
            raise HashingError(f"DICE scores {self.dice.shape} do not match targets {self.targets.shape}")
        if self.targets.size and (self.targets.min() < -1 or self.targets.max() >= self.n_frequent):
            raise HashingError(f"targets must be frequent-word ids in [0, {self.n_frequent}) or −1")
        self._index()

    @property
    def k(self) -> int:
        return int(self.targets.shape[1])

    @property
    def size(self) -> int:
        """R, the number of rare features."""
        return len(self.features)

    def _index(self) -> None:
        """Lookup tables: word → code, code → rare-word row, packed (code, code) 2-gram keys → row."""
        codes: dict[str, int] = {}
        word_rows: list[int] = []
        pairs: list[tuple[int, int, int]] = []
        for row, feature in enumerate(self.features):
            parts = feature.split(" ")
            if len(parts) == 1:
                code = codes.setdefault(feature, len(codes))
                if code == len(word_rows):
                    word_rows.append(row)
                elif word_rows[code] >= 0:
                    raise HashingError(f"feature {feature!r} is listed twice")
                else:
                    word_rows[code] = row
            elif len(parts) == 2 and all(parts):
                ids = []
                for part in parts:
                    code = codes.setdefault(part, len(codes))
                    if code == len(word_rows):
                        word_rows.append(-1)
                    ids.append(code)
                pairs.append((ids[0], ids[1], row))
            else:
                raise HashingError(f"feature {feature!r} is neither a word nor a 2-gram")
        self._word_code = codes
        self._word_row = np.asarray(word_rows, dtype=np.int64)
        n_codes = max(1, len(codes))
        keys = np.asarray([a * n_codes + b for a, b, _ in pairs], dtype=np.int64)
        rows = np.asarray([r for _, _, r in pairs], dtype=np.int64)
        order = np.argsort(keys, kind="stable")
        self._bigram_keys, self._bigram_rows = keys[order], rows[order]
        if np.any(np.diff(self._bigram_keys) == 0):
            raise HashingError("a 2-gram is listed twice")
        valid = self.targets >= 0
        rows_of = np.repeat(np.arange(self.size), self.k).reshape(self.size, self.k)
        self._H = sp.csr_matrix(
            (np.full(int(valid.sum()), 1.0 / max(1, self.k), dtype=np.float32), (rows_of[valid], self.targets[valid])),
            shape=(self.size, self.n_frequent),
            dtype=np.float32,
        )

    def feature_rows(self, tokens: Sequence[str]) -> np.ndarray:
        """Rows of the text's rare features (repeats kept: they are the term counts)."""
        codes = np.asarray([self._word_code.get(w, -1) for w in tokens], dtype=np.int64)
        out: list[np.ndarray] = []
        if 1 in self.ngrams and codes.size:
            known = codes[codes >= 0]
            rows = self._word_row[known]
            out.append(rows[rows >= 0])
        if 2 in self.ngrams and codes.size > 1 and self._bigram_keys.size:
            a, b = codes[:-1], codes[1:]
            both = (a >= 0) & (b >= 0)
            keys = a[both] * max(1, len(self._word_code)) + b[both]
            pos = np.searchsorted(self._bigram_keys, keys)
            pos = np.minimum(pos, self._bigram_keys.size - 1)
            hit = self._bigram_keys[pos] == keys
            out.append(self._bigram_rows[pos[hit]])
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def rare_tfidf(self, token_lists: Sequence[Sequence[str]]) -> sp.csr_matrix:
        """n × R unit tf-idf rows over the rare dictionary, x_i = (1 + log tf_i) · idf_i."""
        indptr = np.zeros(len(token_lists) + 1, dtype=np.int64)
        all_ids: list[np.ndarray] = []
        all_vals: list[np.ndarray] = []
        for row, tokens in enumerate(token_lists):
            rows = self.feature_rows(tokens)
            if rows.size:
                uniq, counts = np.unique(rows, return_counts=True)
                vals = (1.0 + np.log(counts)).astype(np.float32) * self.idf[uniq]
                vals /= np.linalg.norm(vals)
            else:
                uniq, vals = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
            all_ids.append(uniq)
            all_vals.append(vals.astype(np.float32))
            indptr[row + 1] = indptr[row] + uniq.size
        indices = np.concatenate(all_ids) if all_ids else np.zeros(0, dtype=np.int64)
        data = np.concatenate(all_vals) if all_vals else np.zeros(0, dtype=np.float32)
        return sp.csr_matrix((data, indices, indptr), shape=(len(token_lists), self.size), dtype=np.float32)

    def hashed(self, token_lists: Sequence[Sequence[str]]) -> sp.csr_matrix:
        """n × F: h = H x_rare, each rare feature spread over its k frequent words with weight 1/k."""
        out = sp.csr_matrix(self.rare_tfidf(token_lists) @ self._H, dtype=np.float32)
        out.sum_duplicates()
        out.sort_indices()
        return out

    def rows_of(self, feature: str) -> list[tuple[int, float]]:
        """The (frequent-word id, DICE) pairs a rare feature is replaced by, best first (for display)."""
        try:
            row = self.features.index(feature)
        except ValueError:
            raise KeyError(feature) from None
        return [(int(t), float(s)) for t, s in zip(self.targets[row], self.dice[row], strict=True) if t >= 0]

    def manifest_entry(self) -> dict[str, Any]:
        """What the bundle's manifest records about the map."""
        return {
            "frequent": self.n_frequent,
            "k": self.k,
            "ngrams": list(self.ngrams),
            "features": self.size,
            "weights": "1/k (paper 001, eq. 6)",
            **self.info,
        }


def write_hashing(directory: Path, hashing: CorrelatedHashing) -> list[str]:
    """Write the map's files into `directory`; returns their names (the bundle hashes them)."""
    write_idf_table(directory / FEATURES_FILE, hashing.features, hashing.idf)
    np.save(directory / TARGETS_FILE, np.ascontiguousarray(hashing.targets, dtype=np.int32))
    np.save(directory / DICE_FILE, np.ascontiguousarray(hashing.dice, dtype=np.float32))
    return list(FILES)


def read_hashing(directory: Path, entry: dict[str, Any]) -> CorrelatedHashing:
    """The map written by `write_hashing`, checked against the manifest's `entry` (else a `HashingError`)."""
    try:
        features, idf = read_idf_table(directory / FEATURES_FILE)
    except ValueError as exc:
        raise HashingError(str(exc)) from None
    try:
        targets = np.load(directory / TARGETS_FILE, allow_pickle=False)
        dice = np.load(directory / DICE_FILE, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise HashingError(f"{directory}: unreadable correlated-hashing arrays ({exc})") from None
    if targets.dtype != np.int32 or dice.dtype != np.float32:
        raise HashingError(f"{directory}: {TARGETS_FILE} must be int32 and {DICE_FILE} float32")
    known = {"frequent", "k", "ngrams", "features", "weights"}
    hashing = CorrelatedHashing(
        n_frequent=int(entry["frequent"]),
        features=features,
        idf=np.asarray(idf, dtype=np.float32),
        targets=targets,
        dice=dice,
        ngrams=tuple(int(n) for n in entry.get("ngrams", (1, 2))),
        info={key: value for key, value in entry.items() if key not in known},
    )
    if hashing.size != int(entry["features"]) or hashing.k != int(entry["k"]):
        raise HashingError(
            f"{directory}: {hashing.size} features with k = {hashing.k}, the manifest says "
            f"{entry['features']} with k = {entry['k']}"
        )
    return hashing
