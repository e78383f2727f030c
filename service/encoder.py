"""The query encoder: the bundle's ONNX graph x ↦ A x (A: the form's query map), run by onnxruntime;
for a cosine form (`Form.normalizes_query`, the projections of paper 003) x ↦ A x/‖A x‖.

The service embeds queries with the exact graph the trainer exported (no PyTorch). When loading,
it checks the graph's input and output shapes against the bundle and compares its output with
A x on a few random vectors, so a bundle whose encoder does not match its form's query map (U for
SSI and PSI, Wᵀ for full W) is refused at load instead of silently ranking with the wrong model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from ssi.bundle import BundleError
from ssi.forms.base import UNIT_EPS

INPUT_NAME = "tfidf"
OUTPUT_NAME = "embedding"


class QueryEncoder:
    def __init__(self, path: Path, vocab_size: int, index_dims: int, threads: int) -> None:
        options = ort.SessionOptions()
        # One request is one small MatMul: a few intra-op threads at most, no inter-op pool, and no
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
        inputs = self._session.get_inputs()
        outputs = self._session.get_outputs()
        if len(inputs) != 1 or inputs[0].name != INPUT_NAME or inputs[0].shape[-1] != vocab_size:
            found = [(i.name, i.shape) for i in inputs]
            raise BundleError(f"{path}: expected one input '{INPUT_NAME}' [batch, {vocab_size}], found {found}")
        if len(outputs) != 1 or outputs[0].name != OUTPUT_NAME or outputs[0].shape[-1] != index_dims:
            found = [(o.name, o.shape) for o in outputs]
            raise BundleError(f"{path}: expected one output '{OUTPUT_NAME}' [batch, {index_dims}], found {found}")
        self.path = path
        self.vocab_size = vocab_size
        self.index_dims = index_dims

    def encode(self, dense: np.ndarray) -> np.ndarray:
        """A x for each row of a dense float32 [batch, D] tf-idf matrix."""
        batch = np.ascontiguousarray(dense, dtype=np.float32)
        (embedding,) = self._session.run([OUTPUT_NAME], {INPUT_NAME: batch})
        return np.ascontiguousarray(embedding, dtype=np.float32)

    def check_against(self, query_map: np.ndarray, probes: int = 4, seed: int = 0, *, normalize: bool = False) -> None:
        """Refuse an encoder whose output differs from numpy's A x (A: `query_map`, M × D) on random unit vectors.

        `normalize`: the form's embedding is A x/‖A x‖ (`Form.normalizes_query`); an encoder without
        that last step, or with it where the form has none, is refused too.
        """
        rng = np.random.default_rng(seed)
        x = np.zeros((probes, self.vocab_size), dtype=np.float32)
        expected = np.zeros((probes, self.index_dims), dtype=np.float64)
        for row in range(probes):
            ids = np.sort(rng.choice(self.vocab_size, size=min(8, self.vocab_size), replace=False))
            values = rng.random(ids.size) + 0.1
            values /= np.linalg.norm(values)
            x[row, ids] = values
            # Only the probed columns of A are read: A may be a large memory-mapped file.
            expected[row] = np.asarray(query_map[:, ids], dtype=np.float64) @ values
        if normalize:
            expected /= np.maximum(np.linalg.norm(expected, axis=1, keepdims=True), UNIT_EPS)
        got = self.encode(x).astype(np.float64)
        scale = max(1.0, float(np.abs(expected).max()))
        if not np.allclose(got, expected, atol=1e-4 * scale, rtol=1e-3):
            raise BundleError(
                f"{self.path}: the query encoder's output does not match the form's query map "
                "(encoder.onnx and the arrays disagree)"
            )
