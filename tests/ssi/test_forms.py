"""Each form's reference score is the paper's formula, and splits into what the service ranks by:

    f(q, d) = embed_queries(q)·embed(d) + Σ_i w_i q_i d_i

(embed_queries(q) = query_map q, scaled to unit length for a cosine form)

which is the identity the index + exact rerank rely on (the service's oracle tests check the rest).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ssi.forms import FORMS, DocumentKeys, Form, FormError, form_class
from ssi.forms.hashkernel import PRIME
from ssi.products import DocMatrix

D, N = 40, 5
H = 97  # hash buckets of the hash-kernel form (below D² = 1600: pairs collide)
F = 8  # hashed slots of the correlated-hashing form (the last F of the D columns)
SERVED = sorted(name for name, cls in FORMS.items() if cls.served_exactly)


@pytest.fixture
def matrices() -> tuple[sp.csr_matrix, sp.csr_matrix]:
    rng = np.random.default_rng(7)

    def rows(n: int, density: float) -> sp.csr_matrix:
        X = sp.random(n, D, density=density, random_state=rng, dtype=np.float32, format="csr")
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).ravel()
        return sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X, dtype=np.float32)

    return rows(6, 0.2), rows(30, 0.15)


def make(name: str, seed: int = 0) -> Form:
    """Random arrays; a keyed form (halftrans) holds vectors for documents these tests never pass (all fall back)."""
    rng = np.random.default_rng(seed)
    cls = form_class(name)
    keys = DocumentKeys(("elsewhere-1", "elsewhere-2"), ("0" * 16, "1" * 16))
    shapes = cls.shapes(N, D, H=H, T=len(keys), F=F)
    arrays = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    return cls(arrays, keys) if cls.keyed else cls(arrays)


@pytest.mark.parametrize("name", SERVED)
def test_reference_score_is_index_product_plus_diagonal(name: str, matrices) -> None:
    Q, X = matrices
    form = make(name)
    semantic = form.embed_queries(Q).astype(np.float64) @ form.embed_documents(X).astype(np.float64).T
    diagonal = (Q.multiply(form.lexical_weights()[None, :]) @ X.T).toarray()
    np.testing.assert_allclose(form.reference_scores(Q, DocMatrix(X)), semantic + diagonal, rtol=1e-4, atol=1e-4)


def test_lowrank_is_q_t_u_t_v_plus_identity_d(matrices) -> None:
    Q, X = matrices
    form = make("lowrank")
    U, V = (form.values[k].astype(np.float64) for k in ("U", "V"))
    expected = Q.toarray() @ (U.T @ V + np.eye(D)) @ X.toarray().T
    np.testing.assert_allclose(form.reference_scores(Q, DocMatrix(X)), expected, rtol=1e-4, atol=1e-4)


def test_psi3_adds_the_cubic_term_to_degree_two(matrices) -> None:
    Q, X = matrices
    form = make("psi3", seed=2)
    U, V, V3, Y3 = (form.values[k].astype(np.float64) for k in ("U", "V", "V3", "Y3"))
    q, d = Q.toarray()[1], X.toarray()[4]
    cubic = sum((U @ q)[k] * (V3 @ d)[k] * (Y3 @ d)[k] for k in range(N))
    expected = cubic + (U @ q) @ (V @ d) + q @ d
    assert form.reference_scores(Q, DocMatrix(X))[1, 4] == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_forms_without_semantics_and_without_identity(matrices) -> None:
    Q, X = matrices
    docs = DocMatrix(X)
    w = np.abs(make("diagonal").values["w"])
    diagonal = form_class("diagonal")({"w": w})
    np.testing.assert_allclose(
        diagonal.reference_scores(Q, docs), (Q.toarray() * w) @ X.toarray().T, rtol=1e-5, atol=1e-6
    )
    noid = make("noidentity")
    U, V = noid.values["U"].astype(np.float64), noid.values["V"].astype(np.float64)
    np.testing.assert_allclose(
        noid.reference_scores(Q, docs), (Q.toarray() @ U.T) @ (X.toarray() @ V.T).T, rtol=1e-4, atol=1e-4
    )


def test_hash_kernel_is_the_hashed_pair_sum_plus_its_diagonal(matrices) -> None:
    """f(q, d) = Σ_{i,j} q_i d_j W[mod(i·P + j, H)] + Σ_i w_i q_i d_i, pair by pair (H below D: windows wrap too)."""
    Q, X = matrices
    for hash_size in (H, 13):
        form = form_class("hashkernel").shapes(N, D, H=hash_size)
        rng = np.random.default_rng(hash_size)
        hk = form_class("hashkernel")({k: rng.normal(size=s).astype(np.float32) for k, s in form.items()})
        W, w = hk.values["W"].astype(np.float64), hk.values["w"].astype(np.float64)
        q_rows, d_rows = Q.toarray().astype(np.float64), X.toarray().astype(np.float64)
        expected = np.zeros((Q.shape[0], X.shape[0]))
        for b, p in np.ndindex(*expected.shape):
            for i in np.flatnonzero(q_rows[b]):
                expected[b, p] += w[i] * q_rows[b, i] * d_rows[p, i]
                for j in np.flatnonzero(d_rows[p]):
                    expected[b, p] += q_rows[b, i] * d_rows[p, j] * W[(i * PRIME + j) % hash_size]
        np.testing.assert_allclose(hk.reference_scores(Q, DocMatrix(X)), expected, rtol=1e-4, atol=1e-5)
        assert hk.lexical_weights() is not None and hk.hash_size == hash_size


def test_hash_kernel_has_no_index_embedding() -> None:
    form = make("hashkernel")
    assert not form.served_exactly and form.index_dims == 0
    with pytest.raises(FormError, match="no query map"):
        form.query_map()
    with pytest.raises(FormError, match="no document embedding"):
        form.embed_documents(sp.csr_matrix((1, D), dtype=np.float32))
    with pytest.raises(FormError, match="needs the size of H"):
        form_class("hashkernel").shapes(N, D)


def test_bad_arrays_are_refused_with_the_reason() -> None:
    lowrank = form_class("lowrank")
    U = np.zeros((N, D), dtype=np.float32)
    with pytest.raises(FormError, match=r"needs arrays \['U', 'V'\]"):
        lowrank({"U": U})
    with pytest.raises(FormError, match="V has D = 39"):
        lowrank({"U": U, "V": np.zeros((N, D - 1), dtype=np.float32)})
    with pytest.raises(FormError, match="must be float32"):
        lowrank({"U": U, "V": np.zeros((N, D))})
    with pytest.raises(FormError, match="unknown model form 'psi4'"):
        form_class("psi4")
