"""Intersection over union per class, plus the merged "face" class (skin + brows + eyes + nose + lips).

NumPy only, so the benchmark can score the shipped ONNX file without importing PyTorch.
"""

from __future__ import annotations

import numpy as np

from .labels import CLASSES, FACE_CLASSES, IGNORE


def confusion(pred: np.ndarray, truth: np.ndarray, classes: int = len(CLASSES)) -> np.ndarray:
    """(classes × classes) pixel counts, rows = truth; IGNORE pixels are left out."""
    known = truth != IGNORE
    index = truth[known].astype(np.int64) * classes + pred[known].astype(np.int64)
    return np.bincount(index, minlength=classes * classes).reshape(classes, classes)


def iou_table(matrix: np.ndarray) -> dict[str, float]:
    """IoU of every class and of "face" (the five face classes merged)."""
    out = {}
    for cls, name in enumerate(CLASSES):
        inter = matrix[cls, cls]
        union = matrix[cls].sum() + matrix[:, cls].sum() - inter
        out[name] = float(inter / union) if union else float("nan")
    face = list(FACE_CLASSES)
    inter = matrix[np.ix_(face, face)].sum()
    union = matrix[face].sum() + matrix[:, face].sum() - inter
    out["face"] = float(inter / union) if union else float("nan")
    return out
