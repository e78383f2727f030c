"""An int8 graph whose activations are quantized token by token, so a text's vector does not depend on its batch.

onnxruntime's dynamic quantization (`quantize_dynamic`) puts a DynamicQuantizeLinear before every integer product: one
scale and zero point for the whole input tensor, that is for every token of every text in the batch. A text's int8
vector then moves with the texts encoded beside it: 60-word passages encoded in batches of 32 against one at a time,
cosine as low as 0.984 (all-MiniLM-L6-v2, docs/results/hybrid.md#int8-token-by-token), as far as int8 is from fp32;
so the same query ranked differently as other queries shared its batch. Here each DynamicQuantizeLinear becomes a
scale per token row (its largest magnitude over 127) and a blocked QuantizeLinear (opset 21) with a zero point of 128:
the same uint8 × int8 products, each row on its own scale. A row's quantization reads only that row, so a text's
vector is the same in any batch, and closer to fp32's (least cosine 0.995 against 0.986 on the passages above).

onnxruntime's MatMulIntegerToFloat fusion reads the activations' scale as one number and gives wrong vectors with a
scale per row: a session running such a graph disables it (ssi.sentence.UNFUSED_FOR_TOKEN_SCALES).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

OPSET = 21  # blocked QuantizeLinear (a scale per block of the last axis: here one block per row)
ZERO_POINT = 128  # symmetric around it: a row's values map to 1..255


def quantize_by_token(fp32: Path, out: Path) -> int:
    """Write `out`, the int8 graph of `fp32` (weights per channel, as `quantize_dynamic` makes them) with every
    activation quantized per token row; returns how many quantizations were rewritten. Raises ValueError for a graph
    whose dynamic quantization feeds anything but integer products and their scales."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(fp32, out, per_channel=True, weight_type=QuantType.QInt8)
    model = onnx.load(str(out))
    graph = model.graph
    leading = _leading_dims(model)
    weights = {init.name: init for init in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([-1], dtype=np.int64), "token_quant_axes"),
            numpy_helper.from_array(np.array(1e-12, dtype=np.float32), "token_quant_least"),
            numpy_helper.from_array(np.array(127.0, dtype=np.float32), "token_quant_127"),
            numpy_helper.from_array(np.array(0.0, dtype=np.float32), "token_quant_zero"),
            numpy_helper.from_array(np.array(float(ZERO_POINT), dtype=np.float32), "token_quant_point"),
            numpy_helper.from_array(np.array(ZERO_POINT, dtype=np.uint8), "token_quant_zero_point"),
        ]
    )
    nodes: list[onnx.NodeProto] = []
    points: dict[tuple[str, ...], str] = {}  # zero-point tensors by the leading dims of the rows they quantize
    rewritten = 0
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        x = node.input[0]
        quantized, scale, _ = node.output  # its zero point goes: the products take 128
        products = [c for c in consumers.get(quantized, []) if c.op_type == "MatMulInteger" and c.input[0] == quantized]
        if len(products) != len(consumers.get(quantized, [])) or not products:
            raise ValueError(f"{out}: {quantized} feeds more than integer products")
        if any(c.op_type != "Mul" for c in consumers.get(scale, [])):
            raise ValueError(f"{out}: {scale} feeds more than the products' scales")
        width = {int(weights[c.input[1]].dims[0]) for c in products}
        if len(width) != 1:
            raise ValueError(f"{out}: the products of {x} disagree on its width")
        prefix = f"token_quant/{x}"
        nodes += [
            helper.make_node("Abs", [x], [f"{prefix}/abs"]),
            helper.make_node("ReduceMax", [f"{prefix}/abs", "token_quant_axes"], [f"{prefix}/max"], keepdims=1),
            helper.make_node("Max", [f"{prefix}/max", "token_quant_least"], [f"{prefix}/max_or_least"]),
            helper.make_node("Div", [f"{prefix}/max_or_least", "token_quant_127"], [scale]),
        ]
        # QuantizeLinear's blocked form wants a zero point of the scale's shape (128 in every row): made once for
        # every quantization of rows with the same leading dims (a BERT's: batch × tokens), a small op less each
        shape = leading.get(x)
        point = points.get(shape) if shape is not None else None
        if point is None:
            point = f"{prefix}/zero_points"
            nodes += [
                helper.make_node("Mul", [scale, "token_quant_zero"], [f"{prefix}/zeros"]),
                helper.make_node("Add", [f"{prefix}/zeros", "token_quant_point"], [f"{prefix}/points"]),
                helper.make_node("Cast", [f"{prefix}/points"], [point], to=TensorProto.UINT8),
            ]
            if shape is not None:
                points[shape] = point
        quantize = helper.make_node("QuantizeLinear", [x, scale, point], [quantized], axis=-1, block_size=width.pop())
        nodes.append(quantize)
        for product in products:
            product.input[2] = "token_quant_zero_point"
        rewritten += 1
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]  # the scales' shapes changed (one number → one a row): let onnxruntime infer them
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = max(opset.version, OPSET)
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return rewritten


def _leading_dims(model: Any) -> dict[str, tuple[str, ...]]:
    """Each tensor's dims but the last, where shape inference names every one of them (a symbol or a size)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    found: dict[str, tuple[str, ...]] = {}
    for value in [*inferred.graph.value_info, *inferred.graph.input]:
        dims = [d.dim_param or (str(d.dim_value) if d.dim_value else "") for d in value.type.tensor_type.shape.dim]
        if len(dims) >= 2 and all(dims[:-1]):
            found[value.name] = tuple(dims[:-1])
    return found
