"""`--kind opca`: Oriented PCA (Diamantaras & Kung, 1996; Platt et al., 2010; paper 003, section 5.3).

PCA finds the directions a maximising the texts' variance aᵀ Σ a / aᵀ a (eq. 22); OPCA divides by
the variance of the pairs' differences instead, the generalized Rayleigh quotient (eq. 23)

    aᵀ Σ a / aᵀ (Σ_n + δ I) a,     Σ_n = (1/m) Σ_k (q_k − d_k)(q_k − d_k)ᵀ   (eq. 24)

so a query and its paired document land close together. Its top N generalized eigenvectors give one
map for both sides, A = B (a word keeps its meaning wherever it occurs; with two languages in one
joint vocabulary, query words and document words are different columns of the same map). δ I is the
ridge that keeps Σ_n invertible (the paper's noise covariance is singular for fewer pairs than words).

Tractable at D ≈ 30,000 words by solving it in a reduced basis: Σ and Σ_n are D × D (7 GB dense),
so both are taken within the span of the texts' top K = BASIS_FACTOR · N right singular vectors P
(LSA of the same texts, LsiBasis): a = Pᵀ b, and the K × K problem P Σ Pᵀ b = λ (P Σ_n Pᵀ + δ I) b
is solved densely (scipy.linalg.eigh). The basis holds the directions in which the texts vary at
all; OPCA chooses among them the ones pairs agree on. δ = ρ · trace(P Σ_n Pᵀ)/K, ρ chosen on the
validation pairs from RIDGES (alone, before the tf-idf combination).
"""

from __future__ import annotations

import time
from typing import ClassVar

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from training.fitted.base import FitContext, FittedKind
from training.fitted.basis import LsiBasis
from training.fitted.projections import PairRows, choose, corpus_texts, fitted_result, make_form, summary_row
from training.trainer import TrainResult

BASIS_FACTOR = 3  # K = 3 N singular vectors span the reduced problem
RIDGES = (0.001, 0.01, 0.1, 1.0, 10.0)  # ρ of δ = ρ · trace(Σ_n)/K tried on validation
UNTUNED_RIDGE = 0.1
CHUNK = 8192  # pairs per block of the noise covariance


def reduced_covariances(basis: np.ndarray, texts: sp.csr_matrix, pairs: PairRows) -> tuple[np.ndarray, np.ndarray]:
    """(P Σ Pᵀ, P Σ_n Pᵀ) in float64: the texts' centred covariance and the pairs' noise covariance, eq. (24)."""
    P_T = np.ascontiguousarray(basis.T, dtype=np.float32)  # D × K
    Y = np.asarray(texts @ P_T, dtype=np.float64)
    Y -= Y.mean(axis=0)
    sigma = Y.T @ Y / max(1, Y.shape[0])
    YQ = np.asarray(pairs.XQ @ P_T, dtype=np.float64)
    YD = np.asarray(pairs.XD @ P_T, dtype=np.float64)
    noise = np.zeros_like(sigma)
    for start in range(0, pairs.size, CHUNK):
        E = YQ[pairs.q_rows[start : start + CHUNK]] - YD[pairs.d_rows[start : start + CHUNK]]
        noise += E.T @ E
    return sigma, noise / pairs.size


def opca_map(sigma: np.ndarray, noise: np.ndarray, basis: np.ndarray, n_dims: int, ridge: float) -> np.ndarray:
    """N × D: the top n_dims generalized eigenvectors of (Σ, Σ_n + δ I), eq. (23), mapped back to words."""
    K = sigma.shape[0]
    delta = ridge * float(np.trace(noise)) / K
    if delta <= 0:  # no noise at all (every pair identical): plain PCA
        delta = ridge
    values, vectors = scipy.linalg.eigh(sigma, noise + delta * np.eye(K))
    top = vectors[:, np.argsort(-values)[: min(n_dims, K)]]
    return np.asarray(top.T @ basis, dtype=np.float32)


class Opca(FittedKind):
    kind: ClassVar[str] = "opca"
    description: ClassVar[str] = "OPCA: generalized eigenproblem with the pairs' noise covariance (paper 003)"

    def fit(self, context: FitContext) -> TrainResult:
        started = time.perf_counter()
        settings = context.settings
        texts = corpus_texts(context)
        pairs = PairRows.of(context)
        basis = LsiBasis.fit(texts, BASIS_FACTOR * settings.n_dims, seed=settings.seed).components
        sigma, noise = reduced_covariances(basis, texts, pairs)
        history = []
        best: tuple[float, float, np.ndarray] | None = None
        ridges = RIDGES if context.validate is not None else (UNTUNED_RIDGE,)
        for step, ridge in enumerate(ridges, start=1):
            A = opca_map(sigma, noise, basis, settings.n_dims, ridge)
            value = float(context.validate(make_form(A, A, 0.0))["map"]) if context.validate is not None else 0.0
            history.append(summary_row(step, started, map=value, ridge=ridge))
            if best is None or value > best[0]:
                best = (value, ridge, A)
        assert best is not None
        _, ridge, A = best
        chosen = choose(A, A, context)
        chosen.metrics["ridge"] = ridge
        return fitted_result(chosen, started, history, steps=len(ridges))
