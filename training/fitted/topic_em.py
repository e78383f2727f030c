"""EM for the topic models of paper 003 (section 3): PLSA, BLTM, BLTM with posterior regularization.

A training item is a pair of texts (query side, document side) sharing one topic mixture θ
(BLTM, eq. 3; PLSA is the case with no query side: one text, one θ). MAP estimation under the
Dirichlet priors Dir(α_θ) on θ and Dir(β) on each topic's word distribution φ_z:

    E-step   P(z|w, pair) ∝ φ_z(w) θ_pair(z)                                          (eqs. 4, 5)
    M-step   θ_pair(z) ∝ Σ_w c(w) P(z|w) + α_θ − 1,  φ_z(w) ∝ Σ_pairs c(w) P(z|w) + β − 1   (eqs. 6–8)

with φ^Q for query-side words and φ^D for document-side words, or one φ for both (the
one-vocabulary variant, section 5.2, and PLSA).

Posterior regularization (BLTM-PR, section 3.2, eqs. 9–13, after Ganchev et al.): the E-step's
posteriors of a pair are projected, in KL divergence, onto the set where the expected share of
query tokens in each topic equals the expected share of document tokens in it. The projection is

    q(z|w in Q) ∝ P(z|w) exp(−λ_z / |Q|),   q(z|w in D) ∝ P(z|w) exp(λ_z / |D|)      (eqs. 10, 11)

with the dual variables λ (one per topic and pair) found by ascent on the dual, whose gradient
is the constraint's violation E_q[share in Q] − E_q[share in D] (eqs. 12, 13). We take `pr_steps`
diagonal Newton steps (the dual's Hessian diagonal is minus the variance of each share under q)
rather than the paper's fixed-rate gradient steps: the same fixed point, reached in a few steps.
The M-step is unchanged and uses the projected posteriors.

The objective reported per iteration is the paper's eq. 3, the joint log-likelihood of the pairs
and the parameters (log-likelihood plus the log Dirichlet priors), per training token, at the
parameters the E-step starts from: plain EM never lowers it; with posterior regularization EM
climbs the regularized objective instead, so this one may dip.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from ssi.jit_cache import CACHE
from training.fitted.sides import Sides

SEED_PAIRS = 3  # pairs whose words seed each topic's starting distribution
MAX_TILT = 30.0  # |λ_z| / |side| at most: e^±30 keeps every projected posterior finite


@numba.njit(inline="always", cache=CACHE)
def _posteriors(idx: np.ndarray, phi: np.ndarray, theta: np.ndarray, counts: np.ndarray, out: np.ndarray) -> float:
    """out[j] ← P(z|w_j) of each token of the text, P(z|w) ∝ φ_z(w) θ(z); returns Σ_j c_j log P(w_j)."""
    k = theta.shape[0]
    loglik = 0.0
    for j in range(idx.shape[0]):
        w = idx[j]
        s = 0.0
        for z in range(k):
            out[j, z] = phi[w, z] * theta[z]
            s += out[j, z]
        if s > 0.0:
            for z in range(k):
                out[j, z] /= s
            loglik += counts[j] * np.log(s)
    return loglik


@numba.njit(inline="always", cache=CACHE)
def _tilt(
    base: np.ndarray, n: int, counts: np.ndarray, weights: np.ndarray, size: float, sign: float,
    out: np.ndarray, grad: np.ndarray, hess: np.ndarray,
) -> None:  # fmt: skip
    """out[j] ← base[j] · weights renormalised over topics (a projected posterior, eqs. 10, 11), adding
    sign × this side's expected topic shares to `grad` and their variances to `hess`, in the same pass."""
    k = weights.shape[0]
    for j in range(n):
        s = 0.0
        for z in range(k):
            out[j, z] = base[j, z] * weights[z]
            s += out[j, z]
        if s > 0.0:
            for z in range(k):
                out[j, z] /= s
                share = counts[j] * out[j, z] / size
                grad[z] += sign * share
                hess[z] += share * (1.0 - out[j, z]) / size


@numba.njit(inline="always", cache=CACHE)
def _project(
    rq: np.ndarray, nq: int, cq: np.ndarray, rd: np.ndarray, nd: int, cd: np.ndarray, steps: int,
    pq: np.ndarray, pd: np.ndarray,
) -> None:  # fmt: skip
    """pq, pd ← the posteriors rq, rd projected so that both sides' expected topic shares agree."""
    k = rq.shape[1]
    size_q, size_d = 0.0, 0.0
    for j in range(nq):
        size_q += cq[j]
    for j in range(nd):
        size_d += cd[j]
    lam = np.zeros(k)
    wq, wd = np.ones(k), np.ones(k)
    grad, hess = np.zeros(k), np.zeros(k)
    for step in range(steps + 1):
        for z in range(k):  # exponents capped: a topic (nearly) absent from both sides has a flat dual
            wq[z] = np.exp(min(max(-lam[z] / size_q, -MAX_TILT), MAX_TILT))
            wd[z] = np.exp(min(max(lam[z] / size_d, -MAX_TILT), MAX_TILT))
        grad[:] = 0.0
        hess[:] = 0.0
        _tilt(rq, nq, cq, wq, size_q, 1.0, pq, grad, hess)
        _tilt(rd, nd, cd, wd, size_d, -1.0, pd, grad, hess)
        if step < steps:
            for z in range(k):
                lam[z] += grad[z] / (hess[z] + 1e-12)


@numba.njit(parallel=True, cache=CACHE)
def _em_pass(
    q_ptr: np.ndarray, q_idx: np.ndarray, q_cnt: np.ndarray,
    d_ptr: np.ndarray, d_idx: np.ndarray, d_cnt: np.ndarray,
    phi_q: np.ndarray, phi_d: np.ndarray, theta: np.ndarray, pr_steps: int, n_chunks: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """One E-step over every pair; returns (Σ counts into φ^Q, into φ^D per chunk, into θ, log-likelihood per chunk)."""
    n_pairs, k = theta.shape
    n_words = phi_q.shape[0]
    acc_q = np.zeros((n_chunks, n_words, k))
    acc_d = np.zeros((n_chunks, n_words, k))
    acc_t = np.zeros((n_pairs, k))
    loglik = np.zeros(n_chunks)
    longest_q, longest_d = 1, 1
    for p in range(n_pairs):
        longest_q = max(longest_q, q_ptr[p + 1] - q_ptr[p])
        longest_d = max(longest_d, d_ptr[p + 1] - d_ptr[p])
    for chunk in numba.prange(n_chunks):
        rq, rd = np.empty((longest_q, k)), np.empty((longest_d, k))
        pq, pd = np.empty((longest_q, k)), np.empty((longest_d, k))
        for p in range(chunk, n_pairs, n_chunks):
            qs, qe, ds, de = q_ptr[p], q_ptr[p + 1], d_ptr[p], d_ptr[p + 1]
            nq, nd = qe - qs, de - ds
            t = theta[p]
            loglik[chunk] += _posteriors(q_idx[qs:qe], phi_q, t, q_cnt[qs:qe], rq)
            loglik[chunk] += _posteriors(d_idx[ds:de], phi_d, t, d_cnt[ds:de], rd)
            if pr_steps > 0 and nq > 0 and nd > 0:
                _project(rq, nq, q_cnt[qs:qe], rd, nd, d_cnt[ds:de], pr_steps, pq, pd)
                post_q, post_d = pq, pd
            else:
                post_q, post_d = rq, rd
            for j in range(nq):
                w, c = q_idx[qs + j], q_cnt[qs + j]
                for z in range(k):
                    acc_q[chunk, w, z] += c * post_q[j, z]
                    acc_t[p, z] += c * post_q[j, z]
            for j in range(nd):
                w, c = d_idx[ds + j], d_cnt[ds + j]
                for z in range(k):
                    acc_d[chunk, w, z] += c * post_d[j, z]
                    acc_t[p, z] += c * post_d[j, z]
    return acc_q, acc_d, acc_t, loglik


def _normalise_columns(counts: np.ndarray, prior: float) -> np.ndarray:
    """Each column (a topic) of a D × K count table + prior − 1 as a distribution over words."""
    table = np.maximum(counts + (prior - 1.0), 0.0)
    return table / np.maximum(table.sum(axis=0, keepdims=True), 1e-300)


def _normalise_rows(counts: np.ndarray, prior: float) -> np.ndarray:
    table = np.maximum(counts + (prior - 1.0), 0.0)
    return table / np.maximum(table.sum(axis=1, keepdims=True), 1e-300)


@dataclass
class TopicState:
    """The parameters EM updates: φ^Q and φ^D (D × K, word-major; the same array when shared) and θ (pairs × K)."""

    phi_q: np.ndarray
    phi_d: np.ndarray
    theta: np.ndarray

    @property
    def shared(self) -> bool:
        return self.phi_q is self.phi_d


@dataclass(frozen=True)
class TopicEM:
    """EM over pairs of count rows (`Sides`), as the module says; `shared`: one φ for both sides."""

    sides: Sides
    n_topics: int
    shared: bool
    topic_prior: float = 1.1  # α_θ of the paper's experiments (section 5.2)
    word_prior: float = 1.01  # β
    pr_steps: int = 0  # posterior regularization: dual Newton steps per pair and iteration (0: plain EM)
    threads: int = 1

    def start(self, seed: int) -> TopicState:
        """θ uniform; each φ_z seeded from a few random pairs: their words, plus a tenth of their mass spread
        by collection frequency. Topics that start apart break EM's symmetry at once; topics that all start
        near the collection's frequencies (jittered) left PLSA on Wikispeedia near its start for ten iterations.
        """
        rng = np.random.default_rng(seed)
        n_pairs, k = self.sides.n_pairs, self.n_topics
        seeds = rng.permutation(n_pairs)[: SEED_PAIRS * k] if n_pairs else np.zeros(0, dtype=np.int64)
        groups = sp.csr_matrix(
            (np.ones(seeds.shape[0]), (np.arange(seeds.shape[0]) % k, seeds)), shape=(k, max(n_pairs, 1))
        )

        def seeded(*sides: sp.csr_matrix) -> np.ndarray:
            counts = sum((np.asarray((groups @ side).toarray()).T for side in sides), np.zeros((self.sides.n_words, k)))
            frequencies = sum(np.asarray(side.sum(axis=0), dtype=np.float64).ravel() for side in sides) + 1.0
            spread = 0.1 * counts.sum(axis=0, keepdims=True) + 1.0
            return _normalise_columns(counts + spread * (frequencies / frequencies.sum())[:, None], 1.0)

        q, d = self.sides.query, self.sides.doc
        if self.shared:
            phi = seeded(q, d)
            phi_q = phi_d = phi
        else:
            phi_q, phi_d = seeded(q), seeded(d)
        return TopicState(phi_q, phi_d, np.full((n_pairs, k), 1.0 / k))

    def step(self, state: TopicState) -> tuple[TopicState, float]:
        """One EM iteration: the new state and the objective (eq. 3, per token) of the state it started from."""
        q, d = self.sides.query, self.sides.doc
        acc_q, acc_d, acc_t, loglik = _em_pass(
            q.indptr.astype(np.int64), q.indices.astype(np.int64), q.data.astype(np.float64),
            d.indptr.astype(np.int64), d.indices.astype(np.int64), d.data.astype(np.float64),
            state.phi_q, state.phi_d, state.theta, self.pr_steps, max(1, self.threads),
        )  # fmt: skip
        objective = (float(loglik.sum()) + self.log_prior(state)) / max(self.sides.tokens, 1e-12)
        counts_q, counts_d = acc_q.sum(axis=0), acc_d.sum(axis=0)
        theta = _normalise_rows(acc_t, self.topic_prior)
        if state.shared:
            phi = _normalise_columns(counts_q + counts_d, self.word_prior)
            return TopicState(phi, phi, theta), objective
        phi_q = _normalise_columns(counts_q, self.word_prior)
        phi_d = _normalise_columns(counts_d, self.word_prior)
        return TopicState(phi_q, phi_d, theta), objective

    def log_prior(self, state: TopicState) -> float:
        """Σ (α_θ − 1) log θ + Σ (β − 1) log φ: the Dirichlet priors' part of eq. 3 (up to a constant)."""

        def part(table: np.ndarray, prior: float) -> float:
            return (prior - 1.0) * float(np.log(np.maximum(table, 1e-300)).sum()) if prior != 1.0 else 0.0

        tables = [state.phi_q] if state.shared else [state.phi_q, state.phi_d]
        return part(state.theta, self.topic_prior) + sum(part(t, self.word_prior) for t in tables)

    def objective(self, state: TopicState) -> float:
        """Eq. 3 per token at `state` (an E-step whose counts are dropped)."""
        return self.step(state)[1]


def topic_shares(sides: Sides, state: TopicState) -> tuple[np.ndarray, np.ndarray]:
    """Expected share of each side's tokens per topic under the plain posteriors: pairs × K, twice."""

    def shares(C: sp.csr_matrix, phi: np.ndarray) -> np.ndarray:
        out = np.zeros((C.shape[0], phi.shape[1]))
        for p in range(C.shape[0]):
            s, e = C.indptr[p], C.indptr[p + 1]
            post = phi[C.indices[s:e]] * state.theta[p]
            post /= np.maximum(post.sum(axis=1, keepdims=True), 1e-300)
            out[p] = (C.data[s:e, None] * post).sum(axis=0) / max(float(C.data[s:e].sum()), 1e-300)
        return out

    return shares(sides.query, state.phi_q), shares(sides.doc, state.phi_d)
