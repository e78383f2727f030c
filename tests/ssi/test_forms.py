"""Each form's reference score is the paper's formula, and splits into what the service ranks by:

    f(q, d) = (query_map q)·embed(d) + Σ_i w_i q_i d_i

which is the identity the index + exact rerank rely on (the service's oracle tests check the rest).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ssi.forms import FORMS, Form, FormError, form_class
from ssi.products import DocMatrix

D, N = 40, 5


@pytest.fixture
def matrices() -> tuple[sp.csr_matrix, sp.csr_matrix]:
    rng = np.random.default_rng(7)

    def rows(n: int, density: float) -> sp.csr_matrix:
        X = sp.random(n, D, density=density, random_state=rng, dtype=np.float32, format="csr")
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).ravel()
        return sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X, dtype=np.float32)

    return rows(6, 0.2), rows(30, 0.15)


def make(name: str, seed: int = 0) -> Form:
    rng = np.random.default_rng(seed)
    cls = form_class(name)
    return cls({k: rng.normal(size=s).astype(np.float32) for k, s in cls.shapes(N, D).items()})


@pytest.mark.parametrize("name", sorted(FORMS))
def test_reference_score_is_index_product_plus_diagonal(name: str, matrices) -> None:
    Q, X = matrices
    form = make(name)
    semantic = (Q @ np.asarray(form.query_map(), dtype=np.float64).T) @ form.embed_documents(X).astype(np.float64).T
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
