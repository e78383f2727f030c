"""The query encoder as an ONNX graph: x ↦ U x on the unit tf-idf vector (then to unit length for a
cosine form, `Form.normalizes_query`).

Built directly with the `onnx` helper API, so exporting needs no PyTorch tracing and the service
runs it with onnxruntime alone. The graph takes the batch sparsely (ssi.encoder_io, format 2):
Gather the rows of the stored Uᵀ for the batch's word ids, one MatMul with the [batch, words]
weights, and for a cosine form y / max(‖y‖, UNIT_EPS).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ssi.encoder_io import OUTPUT, WEIGHTS, WORD_IDS
from ssi.forms import Form
from ssi.forms.base import UNIT_EPS


def build_encoder(U: np.ndarray, *, normalize: bool = False) -> bytes:
    """Serialized ONNX model: inputs word ids int64 [words] and weights float32 [batch, words], output
    float32 [batch, N] = weights · Uᵀ[word ids] (= x Uᵀ for the batch's tf-idf rows x).

    `normalize`: each output row divided by max(its L2 norm, UNIT_EPS), as `ssi.forms.base.unit_length`.
    """
    U = np.ascontiguousarray(U, dtype=np.float32)
    n_dims = U.shape[0]
    weight = numpy_helper.from_array(np.ascontiguousarray(U.T), name="U_transposed")
    initializers = [weight]
    gather = [helper.make_node("Gather", ["U_transposed", WORD_IDS], ["columns"], axis=0)]  # [words, N]
    if normalize:
        eps = numpy_helper.from_array(np.asarray(UNIT_EPS, dtype=np.float32), name="unit_eps")
        initializers.append(eps)
        nodes = [
            *gather,
            helper.make_node("MatMul", [WEIGHTS, "columns"], ["projected"]),
            helper.make_node("ReduceL2", ["projected"], ["norm"], axes=[-1], keepdims=1),
            helper.make_node("Max", ["norm", "unit_eps"], ["guarded_norm"]),
            helper.make_node("Div", ["projected", "guarded_norm"], [OUTPUT]),
        ]
    else:
        nodes = [*gather, helper.make_node("MatMul", [WEIGHTS, "columns"], [OUTPUT])]
    graph = helper.make_graph(
        nodes=nodes,
        name="ssi_query_encoder",
        inputs=[
            helper.make_tensor_value_info(WORD_IDS, TensorProto.INT64, ["words"]),
            helper.make_tensor_value_info(WEIGHTS, TensorProto.FLOAT, ["batch", "words"]),
        ],
        outputs=[helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", n_dims])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ssi-training")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def form_encoder(form: Form) -> bytes:
    """The encoder of a form served exactly: its query map, normalised where the form says so."""
    return build_encoder(form.query_map(), normalize=form.normalizes_query)
