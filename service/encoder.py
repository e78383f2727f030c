"""The query encoder: the bundle's ONNX graph x ↦ A x (A: the form's query map), run by onnxruntime;
for a cosine form (`Form.normalizes_query`, the projections of paper 003) x ↦ A x/‖A x‖.

The service embeds queries with the exact graph the trainer exported (no PyTorch). When loading,
it checks the graph's inputs and output against the bundle and compares its output with A x on a
few random vectors (the vocabulary's last word among them), so a bundle whose encoder does not match
its form's query map (U for SSI and PSI, Wᵀ for full W) is refused at load instead of silently ranking
with the wrong model. Both graph formats of ssi.encoder_io run: sparse (word ids and weights, what
the trainer writes now) and dense (one [batch, D] input, bundles from before).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import scipy.sparse as sp

from ssi.bundle import BundleError
from ssi.encoder_io import DENSE_INPUT, OUTPUT, WEIGHTS, WORD_IDS, Feed, run_encoder
from ssi.forms.base import UNIT_EPS


class QueryEncoder:
    def __init__(self, path: Path, vocab_size: int, index_dims: int, threads: int) -> None:
        options = ort.SessionOptions()
        # One request is one small product: a few intra-op threads at most, no inter-op pool, and no
        # spinning threads burning the cores the web server needs between requests.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for corrupt graphs
            raise BundleError(f"{path}: onnxruntime cannot load the query encoder ({exc})") from None
        inputs = {i.name: i.shape for i in self._session.get_inputs()}
        outputs = self._session.get_outputs()
        if set(inputs) == {WORD_IDS, WEIGHTS}:
            self.sparse = True
        elif set(inputs) == {DENSE_INPUT} and inputs[DENSE_INPUT][-1] == vocab_size:
            self.sparse = False
        else:
            raise BundleError(
                f"{path}: expected inputs '{WORD_IDS}' and '{WEIGHTS}' (or one '{DENSE_INPUT}' [batch, {vocab_size}]),"
                f" found {sorted(inputs.items())}"
            )
        if len(outputs) != 1 or outputs[0].name != OUTPUT or outputs[0].shape[-1] != index_dims:
            found = [(o.name, o.shape) for o in outputs]
            raise BundleError(f"{path}: expected one output '{OUTPUT}' [batch, {index_dims}], found {found}")
        self.path = path
        self.vocab_size = vocab_size
        self.index_dims = index_dims

    def _run(self, feed: Feed) -> np.ndarray:
        (embedding,) = self._session.run([OUTPUT], dict(feed))
        return embedding

    def encode(self, tfidf: sp.csr_matrix) -> np.ndarray:
        """A x for each row of a [batch, D] tf-idf matrix, float32 [batch, M]."""
        if tfidf.shape[0] == 0:
            return np.zeros((0, self.index_dims), dtype=np.float32)
        return run_encoder(self._run, tfidf, sparse=self.sparse)

    def check_against(self, query_map: np.ndarray, probes: int = 4, seed: int = 0, *, normalize: bool = False) -> None:
        """Refuse an encoder whose output differs from numpy's A x (A: `query_map`, M × D) on random unit vectors.

        `normalize`: the form's embedding is A x/‖A x‖ (`Form.normalizes_query`); an encoder without
        that last step, or with it where the form has none, is refused too.
        """
        rng = np.random.default_rng(seed)
        rows: list[sp.csr_matrix] = []
        expected = np.zeros((probes, self.index_dims), dtype=np.float64)
        for row in range(probes):
            ids = np.sort(rng.choice(self.vocab_size, size=min(8, self.vocab_size), replace=False))
            if row == 0:
                ids[-1] = self.vocab_size - 1  # a graph holding fewer words than the vocabulary fails here
                ids = np.unique(ids)
            values = rng.random(ids.size) + 0.1
            values /= np.linalg.norm(values)
            rows.append(sp.csr_matrix((values, ids, [0, ids.size]), shape=(1, self.vocab_size), dtype=np.float32))
            # Only the probed columns of A are read: A may be a large memory-mapped file.
            expected[row] = np.asarray(query_map[:, ids], dtype=np.float64) @ values
        if normalize:
            expected /= np.maximum(np.linalg.norm(expected, axis=1, keepdims=True), UNIT_EPS)
        try:
            got = self.encode(sp.vstack(rows, format="csr")).astype(np.float64)
        except Exception as exc:  # onnxruntime's own errors (an id past the graph's words, a bad shape)
            raise BundleError(f"{self.path}: the query encoder fails on the vocabulary's words ({exc})") from None
        scale = max(1.0, float(np.abs(expected).max()))
        if not np.allclose(got, expected, atol=1e-4 * scale, rtol=1e-3):
            raise BundleError(
                f"{self.path}: the query encoder's output does not match the form's query map "
                "(encoder.onnx and the arrays disagree)"
            )
