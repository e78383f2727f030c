"""The query encoder as an ONNX graph: x ↦ U x on the unit tf-idf vector.

Built directly with the `onnx` helper API (one MatMul against the stored Uᵀ), so exporting needs
no PyTorch tracing and the service runs it with onnxruntime alone.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INPUT_NAME = "tfidf"
OUTPUT_NAME = "embedding"


def build_encoder(U: np.ndarray) -> bytes:
    """Serialized ONNX model: input float32 [batch, D], output float32 [batch, N] = x Uᵀ."""
    U = np.ascontiguousarray(U, dtype=np.float32)
    n_dims, vocab_size = U.shape
    weight = numpy_helper.from_array(np.ascontiguousarray(U.T), name="U_transposed")
    graph = helper.make_graph(
        nodes=[helper.make_node("MatMul", [INPUT_NAME, "U_transposed"], [OUTPUT_NAME])],
        name="ssi_query_encoder",
        inputs=[helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", vocab_size])],
        outputs=[helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", n_dims])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ssi-training")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()
