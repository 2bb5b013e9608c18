"""Static INT8 quantisation (QDQ) with ONNX Runtime's calibrators.

Why QDQ: the same file runs quantised on ONNX Runtime's CPU kernels and is what TensorRT's explicit-precision
path consumes, so one artefact serves both. Activations are unsigned 8-bit, weights signed 8-bit (the "U8S8"
layout that VNNI/AMX CPUs execute natively). Entropy calibration picks the clipping range that minimises the
KL divergence between the FP32 and the quantised histograms, as TensorRT's ``IInt8EntropyCalibrator2`` does.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import version_converter
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data
from onnxruntime.quantization.shape_inference import quant_pre_process

from ..errors import ErrorCode, FacefuseError
from .calibration import FeedReader

METHODS: dict[str, CalibrationMethod] = {
    "minmax": CalibrationMethod.MinMax,
    "entropy": CalibrationMethod.Entropy,
    "percentile": CalibrationMethod.Percentile,
}


@dataclass(frozen=True)
class Int8Options:
    method: str = "minmax"
    per_channel: bool = False
    exclude: tuple[str, ...] = ()
    keep_heads: bool = True


# DequantizeLinear gained the ``axis`` attribute that per-channel weights need in opset 13; TFLite conversions
# are opset 11, so they are upgraded first.
MIN_OPSET = 13


def node_names(model: onnx.ModelProto) -> list[str]:
    return [node.name for node in model.graph.node]


def check_excluded(model: onnx.ModelProto, exclude: tuple[str, ...]) -> None:
    """An excluded name that is not in the graph is a typo the user must hear about, not a silent no-op."""
    known = set(node_names(model))
    unknown = [name for name in exclude if name not in known]
    if unknown:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"--exclude names no node of the model: {', '.join(unknown)}",
                            "list the node names with `facefuse optimize MODEL --list-nodes`",
                            {"unknown": unknown, "example_nodes": sorted(known)[:20]})


def output_heads(model: onnx.ModelProto) -> list[str]:
    """The last Conv/Gemm/MatMul before each graph output (walking back through reshapes, concats, activations).

    Why keep them in float: they produce box offsets and logits directly; one 8-bit step of a logit range of
    hundreds moves a face's score by tenths, while the heads are a small share of the compute.
    """
    producer = {out: node for node in model.graph.node for out in node.output}
    heads: set[str] = set()
    pending = [out.name for out in model.graph.output]
    seen: set[str] = set()
    while pending:
        tensor = pending.pop()
        node = producer.get(tensor)
        if node is None or tensor in seen:
            continue
        seen.add(tensor)
        if node.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            heads.add(node.name)
        else:
            pending.extend(node.input)
    return sorted(heads)


def _prepare(model_path: Path, prepared: Path) -> onnx.ModelProto:
    """Opset ≥ 13 and inferred shapes; no graph fusions, so node names stay the ones the user can exclude."""
    model = onnx.load(str(model_path))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), MIN_OPSET)
    if opset < MIN_OPSET:
        model = version_converter.convert_version(model, MIN_OPSET)
    upgraded = prepared.with_name("upgraded.onnx")
    onnx.save(model, str(upgraded))
    quant_pre_process(str(upgraded), str(prepared), skip_optimization=True, skip_symbolic_shape=True)
    return onnx.load(str(prepared))


# TensorRT's entropy calibrator: a 2048-bin histogram searched for the 128-level clipping range with the least KL
# divergence. ``quantize_static`` builds its entropy calibrator with 128 bins for 128 levels, which leaves one
# candidate range, the full one, so it silently equals min/max; the ranges are therefore computed here.
ENTROPY_BINS = {"num_bins": 2048, "num_quantized_bins": 128}


def entropy_ranges(prepared: Path, feeds: list[dict[str, np.ndarray]], work: Path) -> Path:
    """KL-calibrated activation ranges, saved as the calibration cache ``quantize_static`` reads."""
    if "calibration_cache_path" not in inspect.signature(quantize_static).parameters:
        raise FacefuseError(ErrorCode.INVALID_OPTION, "entropy calibration needs a newer onnxruntime",
                            "upgrade onnxruntime, or use --method minmax/percentile", {})
    calibrator = create_calibrator(prepared, augmented_model_path=str(work / "augmented.onnx"),
                                   calibrate_method=CalibrationMethod.Entropy, extra_options=ENTROPY_BINS)
    with contextlib.redirect_stdout(io.StringIO()):  # the calibrator prints progress; --json output must stay clean
        calibrator.collect_data(FeedReader(feeds))
        ranges = calibrator.compute_data()
    cache = work / "ranges.json"
    save_tensors_data(ranges, cache)
    return cache


def quantize_int8(model_path: Path, output: Path, feeds: list[dict[str, np.ndarray]], options: Int8Options) -> None:
    """Write the INT8 QDQ model calibrated on ``feeds`` (tensors the pipeline really feeds this model)."""
    if options.method not in METHODS:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"unknown calibration method '{options.method}'",
                            f"choose one of: {', '.join(METHODS)}", {"method": options.method})
    with tempfile.TemporaryDirectory(prefix="facefuse-quant-") as work:
        prepared = Path(work) / "prepared.onnx"
        model = _prepare(model_path, prepared)
        check_excluded(model, options.exclude)
        exclude = sorted(set(options.exclude) | set(output_heads(model) if options.keep_heads else ()))
        cache = {"calibration_cache_path": entropy_ranges(prepared, feeds, Path(work))} \
            if options.method == "entropy" else {}
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_static(
                str(prepared),
                str(output),
                FeedReader(feeds),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                per_channel=options.per_channel,
                nodes_to_exclude=exclude,
                calibrate_method=METHODS[options.method],
                **cache,
            )
