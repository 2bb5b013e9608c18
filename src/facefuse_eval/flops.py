"""Compute cost of an ONNX graph: multiply-accumulates of its Conv, ConvTranspose, Gemm and MatMul nodes.

Those four carry nearly all the arithmetic of the face models; element-wise ops, pooling and resizes are left
out (a few percent). Shapes come from ONNX shape inference after fixing every dynamic input axis, so the count is
for one concrete input size. GFLOPs are reported as 2 × MACs, the usual convention.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import shape_inference

from facefuse.config import RuntimeConfig
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.runtime import Runtime


MAC_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass(frozen=True)
class Cost:
    macs: int
    by_op: dict[str, int]

    @property
    def gflops(self) -> float:
        return 2 * self.macs / 1e9


def _fix_inputs(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> None:
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        wanted = shapes.get(value.name)
        for axis, dim in enumerate(dims):
            if wanted is not None:
                dim.dim_value = wanted[axis]
            elif not dim.dim_value:
                dim.dim_value = 1
        if wanted is None and any(not d.dim_value for d in dims):
            raise FacefuseError(ErrorCode.INVALID_OPTION, f"input '{value.name}' has a dynamic axis",
                                "give its shape", {"input": value.name})


def count_macs(path: Path, input_shapes: dict[str, tuple[int, ...]] | None = None) -> Cost:
    """MACs of one forward pass; dynamic axes are set from ``input_shapes`` (others default to 1)."""
    model = onnx.load(str(path))
    _fix_inputs(model, input_shapes or {})
    inferred = shape_inference.infer_shapes(model)
    shapes: dict[str, tuple[int, ...]] = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
    for init in inferred.graph.initializer:
        shapes[init.name] = tuple(init.dims)
    unknown = sorted({name for node in inferred.graph.node if node.op_type in MAC_OPS
                      for name in (*node.input[:2], node.output[0]) if name not in shapes})
    if unknown:
        shapes.update(_measured_shapes(model, unknown))
    by_op: dict[str, int] = {}
    for node in inferred.graph.node:
        macs = _node_macs(node, shapes)
        if macs:
            by_op[node.op_type] = by_op.get(node.op_type, 0) + macs
    return Cost(sum(by_op.values()), by_op)


def _measured_shapes(model: onnx.ModelProto, names: list[str]) -> dict[str, tuple[int, ...]]:
    """Shapes static inference cannot reach (sizes computed at run time, e.g. Shape→Gather→Resize in an FPN):
    run the graph once on zeros with those tensors exposed as outputs."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    exposed.graph.output.extend(onnx.ValueInfoProto(name=name) for name in names)
    initializers = {i.name for i in model.graph.initializer}
    feeds = {v.name: np.zeros([d.dim_value for d in v.type.tensor_type.shape.dim], dtype=np.float32)
             for v in model.graph.input if v.name not in initializers}
    with tempfile.TemporaryDirectory(prefix="facefuse-flops-") as work:
        path = Path(work) / "exposed.onnx"
        onnx.save(exposed, str(path))
        values = Runtime(RuntimeConfig(providers=("CPUExecutionProvider",))).session(path).run(names, feeds)
    return {name: tuple(value.shape) for name, value in zip(names, values)}


def _node_macs(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    if node.op_type not in MAC_OPS:
        return 0
    missing = [name for name in (*node.input[:2], node.output[0]) if name not in shapes]
    if missing:
        raise FacefuseError(ErrorCode.MODEL_MISMATCH, f"shape inference left {missing[0]} unknown ({node.op_type})",
                            "fix the input shapes so every layer's size is known", {"node": node.name})
    weight, out = shapes[node.input[1]], shapes[node.output[0]]
    if node.op_type == "Conv":  # weight [Cout, Cin/g, k...]; every output element costs Cin/g × k... MACs
        return int(np.prod(out)) * int(np.prod(weight[1:]))
    if node.op_type == "ConvTranspose":  # weight [Cin, Cout/g, k...]; every input element is spread over k...
        return int(np.prod(shapes[node.input[0]])) * int(np.prod(weight[1:]))
    if node.op_type == "Gemm":
        trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
        inner = shapes[node.input[0]][0 if trans_a else 1]
        return int(np.prod(out)) * inner
    return int(np.prod(out)) * shapes[node.input[0]][-1]  # MatMul
