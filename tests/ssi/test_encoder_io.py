"""How tf-idf rows are fed to the query encoder's graph: every row encoded, in order, and a row's
embedding the same bits whatever it is batched with."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import scipy.sparse as sp

from ssi.encoder_io import WEIGHTS, run_encoder
from training.encoder import build_encoder


def test_encoding_equals_the_dense_product_and_does_not_depend_on_the_batch() -> None:
    rng = np.random.default_rng(0)
    U = rng.standard_normal((6, 50)).astype(np.float32)
    session = ort.InferenceSession(build_encoder(U, normalize=False), providers=["CPUExecutionProvider"])
    dense = sp.random(40, 50, density=0.3, random_state=3, dtype=np.float32).toarray()
    dense[5] = 0  # a row with no known word encodes to zero
    x = sp.csr_matrix(dense)
    calls: list[int] = []

    def run(feed: dict) -> np.ndarray:
        calls.append(feed[WEIGHTS].shape[0])
        return session.run(None, dict(feed))[0]

    got = run_encoder(run, x)
    np.testing.assert_allclose(got, dense @ U.T, rtol=1e-5, atol=1e-6)
    assert calls == [1] * 40 and not got[5].any()
    for row in (0, 7, 39):
        np.testing.assert_array_equal(run_encoder(run, x[row]), got[row : row + 1])


def test_unsorted_or_duplicated_entries_are_summed_first() -> None:
    U = np.arange(12, dtype=np.float32).reshape(3, 4)
    session = ort.InferenceSession(build_encoder(U), providers=["CPUExecutionProvider"])
    messy = sp.csr_matrix(
        (np.array([0.5, 0.25, 0.25], np.float32), np.array([3, 1, 3]), np.array([0, 3])), shape=(1, 4)
    )
    got = run_encoder(lambda feed: session.run(None, dict(feed))[0], messy)
    np.testing.assert_allclose(got, messy.toarray() @ U.T, rtol=1e-6)
