"""Held-out report: IoU per class of an exported ONNX file on the fixed held-out synthetic set.

NumPy + ONNX Runtime only (through ``facefuse.runtime``, like the pipeline), so the benchmark scores the shipped
file exactly as the pipeline will run it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from facefuse.analysis.segmentation import FaceSegmenter
from facefuse.config import RuntimeConfig
from facefuse.runtime import Runtime

from .data import held_out_samples
from .labels import LabelSet
from .metrics import confusion, iou_table


def predict(segmenter: FaceSegmenter, images: np.ndarray, batch: int = 16) -> np.ndarray:
    return np.concatenate([segmenter.logits(images[i:i + batch]).argmax(1) for i in range(0, len(images), batch)])


def held_out_report(onnx_path: Path, held_out: LabelSet, samples: int = 400) -> dict[str, float]:
    """IoU of every class and of "face" (skin + brows + eyes + nose + lips) on ``samples`` composed samples."""
    segmenter = FaceSegmenter(Runtime(RuntimeConfig(intra_op_threads=1)).session(onnx_path))
    images, truth = held_out_samples(held_out, samples)
    table = iou_table(confusion(predict(segmenter, images), truth))
    return {name: round(value, 4) for name, value in table.items()} | {"samples": samples}
