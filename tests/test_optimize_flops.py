"""MAC counting on a graph whose cost is worked out by hand, including a size only known at run time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from facefuse_eval.flops import count_macs


def _init(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name)


def test_macs_of_each_layer_kind(tmp_path: Path):
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),               # 3→8, 3×3, 32×32
        helper.make_node("Conv", ["c1", "w2"], ["c2"], group=8, strides=[2, 2]),         # depthwise 2×2, → 16×16
        helper.make_node("ConvTranspose", ["c2", "w3"], ["c3"], strides=[2, 2]),         # 8→4, 2×2, → 32×32
        helper.make_node("Shape", ["c3"], ["s"]),                                         # a size known at run time
        helper.make_node("Resize", ["c3", "", "", "s"], ["r"], mode="nearest"),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Slice", ["f", "st", "en", "ax"], ["fs"]),                        # first 4096 values
        helper.make_node("Gemm", ["fs", "g"], ["o1"]),                                    # 4096 → 10
        helper.make_node("MatMul", ["o1", "m"], ["out"]),                                 # 10 → 5
    ]
    inits = [_init("w1", 8, 3, 3, 3), _init("w2", 8, 1, 2, 2), _init("w3", 8, 4, 2, 2), _init("g", 4096, 10),
             _init("m", 10, 5), numpy_helper.from_array(np.array([0], np.int64), "st"),
             numpy_helper.from_array(np.array([4096], np.int64), "en"),
             numpy_helper.from_array(np.array([1], np.int64), "ax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    cost = count_macs(tmp_path / "m.onnx", {"x": (1, 3, 32, 32)})
    conv = 8 * 32 * 32 * 3 * 3 * 3 + 8 * 16 * 16 * 1 * 2 * 2
    assert cost.by_op == {"Conv": conv, "ConvTranspose": 8 * 16 * 16 * 4 * 2 * 2, "Gemm": 10 * 4096, "MatMul": 5 * 10}
    assert cost.gflops == 2 * sum(cost.by_op.values()) / 1e9
