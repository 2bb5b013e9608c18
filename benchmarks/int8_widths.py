"""Where INT8 pays on this CPU (issue 21: "INT8 ≥ 1.5× faster than the FP32 student"): ONNX Runtime's QDQ U8S8
convolutions against FP32, by layer width, and the shipped restorer student node by node.

On a CPU without VNNI the student's INT8 variant measured no faster than FP32 (``benchmarks/restorer.py --int8``).
This says why, by measurement: (1) one 3×3 convolution + ReLU at widths 8–128 channels, FP32 against the same layer
quantized the way ``facefuse optimize --precision int8`` does it (QDQ, U8 activations, S8 weights), and (2) ONNX
Runtime's own profile of the shipped student at 256², FP32 and INT8, each convolution with its shape. The
calibration data are random (the scales do not change the speed). ONNX Runtime on 1 thread, medians of
interleaved runs, CPU time. Writes ``benchmarks/results/<section>.md``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from common import machine, median, write_section
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from facefuse.models.registry import WEIGHTS_DIR

WIDTHS = (8, 16, 32, 64, 128)


class RandomFeeds(CalibrationDataReader):
    def __init__(self, name: str, shape: tuple[int, ...], count: int = 4) -> None:
        rng = np.random.default_rng(0)
        self.feeds = iter({name: rng.random(shape, dtype=np.float32)} for _ in range(count))

    def get_next(self):
        return next(self.feeds, None)


def quantized(model: Path, out: Path, shape: tuple[int, ...]) -> Path:
    """``model`` as ``facefuse optimize --precision int8`` quantizes it (QDQ, U8 activations, S8 weights)."""
    prepared = out.with_suffix(".prepared.onnx")
    quant_pre_process(str(model), str(prepared), skip_optimization=True, skip_symbolic_shape=True)
    with contextlib.redirect_stdout(io.StringIO()):
        quantize_static(str(prepared), str(out), RandomFeeds("input", shape), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return out


def conv_layer(width_in: int, width_out: int, side: int, path: Path) -> Path:
    """One 3×3 convolution (padding 1) + ReLU on a (1, width_in, side, side) input."""
    rng = np.random.default_rng(1)
    weight = numpy_helper.from_array((rng.standard_normal((width_out, width_in, 3, 3)) * 0.1).astype(np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(width_out, np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["conv"], ["output"])], "layer",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, width_in, side, side])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, width_out, side, side])], [weight, bias])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def session(path: Path, profile: str | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def cpu_ms(sessions: dict[str, ort.InferenceSession], feed: dict[str, np.ndarray], runs: int) -> dict[str, float]:
    """Median CPU ms of each session's run, the sessions taking turns run by run."""
    for s in sessions.values():
        s.run(None, feed)
    spent: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(runs):
        for name, s in sessions.items():
            start = time.process_time()
            s.run(None, feed)
            spent[name].append(1e3 * (time.process_time() - start))
    return {name: median(v) for name, v in spent.items()}


def width_rows(work: Path, runs: int) -> list[str]:
    rows = []
    shapes = [(3, 8, 256), (8, 8, 256), (24, 8, 256), *((w, w, 64) for w in WIDTHS)]
    for width_in, width_out, side in shapes:
        fp32 = conv_layer(width_in, width_out, side, work / f"conv_{width_in}_{width_out}_{side}.onnx")
        int8 = quantized(fp32, work / f"conv_{width_in}_{width_out}_{side}.int8.onnx", (1, width_in, side, side))
        feed = {"input": np.random.default_rng(2).random((1, width_in, side, side), dtype=np.float32)}
        ms = cpu_ms({"fp32": session(fp32), "int8": session(int8)}, feed, runs)
        macs = side * side * width_out * width_in * 9 / 1e6
        rows.append(f"| {width_in} → {width_out} | {side}² | {macs:.0f} | {ms['fp32']:.2f} | {ms['int8']:.2f} | "
                    f"{ms['fp32'] / ms['int8']:.2f}× |")
    return rows


def node_profile(path: Path, feed: dict[str, np.ndarray], runs: int, prefix: str) -> dict[str, float]:
    """Mean ms per node over ``runs`` runs from ONNX Runtime's profile, keyed by the node's name."""
    s = session(path, prefix)
    for _ in range(runs):
        s.run(None, feed)
    events = json.loads(Path(s.end_profiling()).read_text())
    spent: dict[str, float] = collections.defaultdict(float)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            spent[event["name"][: -len("_kernel_time")]] += event["dur"] / 1e3 / runs
    return spent


def student_rows(work: Path, runs: int) -> tuple[list[str], dict[str, float]]:
    """The student's convolutions in graph order: shape, FP32 ms, INT8 ms (ONNX Runtime's profile; the FP32 graph
    fuses each ReLU into its convolution, the INT8 graph each convolution into a QLinearConv)."""
    student = WEIGHTS_DIR / "restorer.onnx"  # the shipped student
    int8 = quantized(student, work / "student.int8.onnx", (1, 3, 128, 128))
    model = onnx.load(str(student))
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    feed = {"input": np.random.default_rng(3).random((1, 3, 256, 256), dtype=np.float32)}
    sides, side = {}, 256
    for node in model.graph.node:  # the spatial size each convolution works at, from the pooling and resizing
        if node.op_type == "MaxPool":
            side //= 2
        elif node.op_type == "Resize":
            side *= 2
        elif node.op_type == "Conv":
            sides[node.name] = side
    fp32_nodes = node_profile(student, feed, runs, str(work / "fp32"))
    int8_nodes = node_profile(int8, feed, runs, str(work / "int8"))
    totals = {"fp32": sum(fp32_nodes.values()), "int8": sum(int8_nodes.values())}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    rows = []
    for index, node in enumerate(convs):
        out_c, in_c = weights[node.input[1]][:2]
        # ORT names the fused FP32 node after the ReLU it absorbed (the last convolution, without one, after itself),
        # the INT8 one after the convolution with a token: matched by the convolution's index in the graph
        suffix = f"_{index}" if index else ""
        fp32 = sum(v for k, v in fp32_nodes.items() if k.removesuffix("_nchwc") in (f"relu{suffix}", f"conv2d{suffix}"))
        int8_ms = sum(v for k, v in int8_nodes.items() if k.startswith(f"node_conv2d{suffix}_token_"))
        side = sides[node.name]
        macs = side * side * out_c * in_c * 9 / 1e6
        rows.append(f"| {index} | {in_c} → {out_c} | {side}² | {macs:.0f} | {fp32:.2f} | {int8_ms:.2f} | "
                    f"{(fp32 / int8_ms) if int8_ms else float('nan'):.2f}× |")
    return rows, totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=40, help="runs of each model (interleaved)")
    parser.add_argument("--section", default="int8_widths", help="results section to write")
    parser.add_argument("--title", default="INT8 against FP32 by layer width on this CPU (issue 21)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="int8-widths-") as folder:
        work = Path(folder)
        widths = width_rows(work, args.runs)
        student, totals = student_rows(work, args.runs)
    lines = [f"## {args.title} (`benchmarks/int8_widths.py`)", "",
             f"Machine: {machine()}. ONNX Runtime {ort.__version__}, 1 thread; INT8 = QDQ, U8 activations, S8 "
             "weights, as `facefuse optimize --precision int8` quantizes (random calibration: the scales do not "
             f"change the speed). {args.runs} runs of each, interleaved; median CPU ms.", "",
             "One 3×3 convolution + ReLU (the first three: the shapes of the student's full-resolution layers):", "",
             "| channels | input | MMACs | FP32 ms | INT8 ms | INT8 speed-up |", "|---|---|---|---|---|---|", *widths, "",
             "The shipped restorer student at 256², each convolution (with its ReLU) from ONNX Runtime's profile "
             "(mean over the runs):", "",
             "| conv | channels | at | MMACs | FP32 ms | INT8 ms | INT8 speed-up |", "|---|---|---|---|---|---|---|",
             *student,
             f"| **all nodes** | | | | {totals['fp32']:.2f} | {totals['int8']:.2f} | "
             f"{totals['fp32'] / totals['int8']:.2f}× |"]
    print(write_section(args.section, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
