"""ONNX export with dynamic batch and spatial size, checked against PyTorch on real inputs.

Uses the dynamo exporter (``torch.export`` + onnxscript): the TorchScript exporter is deprecated and PyTorch will
remove it. ``torch.export`` traces symbolic shapes, so the spatial axes are declared as multiples of the network's
``multiple`` (a U-Net with three poolings takes 8·k × 8·j); the graph it writes is the same plain
Conv/Relu/MaxPool/Resize/Concat that ONNX Runtime's INT8 quantizer handles. The parity check runs the exported
file in ONNX Runtime on inputs of several shapes, so a wrongly fixed axis fails here rather than in the pipeline.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from torch import nn
from torch.export import Dim

INPUT_NAME = "input"
OUTPUT_NAME = "output"


@dataclass(frozen=True)
class Parity:
    max_abs_diff: float
    shapes: tuple[tuple[int, ...], ...]

    def ok(self, tolerance: float) -> bool:
        return self.max_abs_diff <= tolerance


def export_onnx(model: nn.Module, path: Path, example: torch.Tensor, multiple: int = 1, opset: int = 18) -> Path:
    """Write ``model`` (eval mode) to ``path`` with axes 0 (batch), 2 and 3 (height, width) dynamic, the spatial
    ones multiples of ``multiple``. The model's first ``forward`` argument takes the image."""
    model = model.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    batch = Dim("batch", min=1, max=1024)
    height, width = Dim("height", min=1, max=8192 // multiple), Dim("width", min=1, max=8192 // multiple)
    first = next(iter(inspect.signature(model.forward).parameters))
    shapes = {first: {0: batch, 2: multiple * height, 3: multiple * width}} if multiple > 1 else \
        {first: {0: batch, 2: height, 3: width}}
    with torch.no_grad():
        program = torch.onnx.export(model, (example,), dynamo=True, opset_version=opset, optimize=True,
                                    input_names=[INPUT_NAME], output_names=[OUTPUT_NAME], dynamic_shapes=shapes,
                                    verbose=False)
    program.save(str(path))
    return path


def check_parity(model: nn.Module, path: Path, inputs: list[np.ndarray]) -> Parity:
    """Largest |PyTorch − ONNX Runtime| over ``inputs`` (float32 NCHW arrays of any shapes)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    worst = 0.0
    model = model.eval()
    for array in inputs:
        with torch.no_grad():
            expected = model(torch.from_numpy(array)).numpy()
        got = session.run(None, {session.get_inputs()[0].name: array})[0]
        if got.shape != expected.shape:
            raise AssertionError(f"ONNX output shape {got.shape} != PyTorch {expected.shape} for input {array.shape}")
        worst = max(worst, float(np.max(np.abs(got - expected))))
    return Parity(max_abs_diff=worst, shapes=tuple(a.shape for a in inputs))
