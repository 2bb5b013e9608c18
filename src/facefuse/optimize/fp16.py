"""FP16 conversion for GPU providers, keeping float32 inputs and outputs so callers do not change.

On a CPU this is usually slower, not faster: ONNX Runtime's CPU kernels for most operators are float32 only, so
the converted graph gains Cast nodes around them (measured in BENCHMARKS.md). It halves the file and the
weights' memory, and CUDA/TensorRT/DirectML run the half-precision kernels natively.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnxruntime.transformers.float16 import convert_float_to_float16

from .quantize import check_excluded


def convert_fp16(model_path: Path, output: Path, exclude: tuple[str, ...] = ()) -> None:
    model = onnx.load(str(model_path))
    check_excluded(model, exclude)
    converted = convert_float_to_float16(model, keep_io_types=True, node_block_list=list(exclude) or None)
    onnx.save(converted, str(output))
