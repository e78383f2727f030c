"""The query encoder as an ONNX graph: x ↦ U x on the unit tf-idf vector (then to unit length for a
cosine form, `Form.normalizes_query`).

Built directly with the `onnx` helper API (one MatMul against the stored Uᵀ, and for a cosine form
y / max(‖y‖, UNIT_EPS)), so exporting needs no PyTorch tracing and the service runs it with
onnxruntime alone.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ssi.forms import Form
from ssi.forms.base import UNIT_EPS

INPUT_NAME = "tfidf"
OUTPUT_NAME = "embedding"


def build_encoder(U: np.ndarray, *, normalize: bool = False) -> bytes:
    """Serialized ONNX model: input float32 [batch, D], output float32 [batch, N] = x Uᵀ.

    `normalize`: each output row divided by max(its L2 norm, UNIT_EPS), as `ssi.forms.base.unit_length`.
    """
    U = np.ascontiguousarray(U, dtype=np.float32)
    n_dims, vocab_size = U.shape
    weight = numpy_helper.from_array(np.ascontiguousarray(U.T), name="U_transposed")
    initializers = [weight]
    if normalize:
        eps = numpy_helper.from_array(np.asarray(UNIT_EPS, dtype=np.float32), name="unit_eps")
        initializers.append(eps)
        nodes = [
            helper.make_node("MatMul", [INPUT_NAME, "U_transposed"], ["projected"]),
            helper.make_node("ReduceL2", ["projected"], ["norm"], axes=[-1], keepdims=1),
            helper.make_node("Max", ["norm", "unit_eps"], ["guarded_norm"]),
            helper.make_node("Div", ["projected", "guarded_norm"], [OUTPUT_NAME]),
        ]
    else:
        nodes = [helper.make_node("MatMul", [INPUT_NAME, "U_transposed"], [OUTPUT_NAME])]
    graph = helper.make_graph(
        nodes=nodes,
        name="ssi_query_encoder",
        inputs=[helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", vocab_size])],
        outputs=[helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", n_dims])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ssi-training")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def form_encoder(form: Form) -> bytes:
    """The encoder of a form served exactly: its query map, normalised where the form says so."""
    return build_encoder(form.query_map(), normalize=form.normalizes_query)
