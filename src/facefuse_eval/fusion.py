"""Measures of a fusion's quality, shared by the tests and benchmarks/quality.py.

The identity judge is MobileFaceNet, a recognizer the pipeline itself never uses, so a high score cannot come from
the fusion optimising the very model that grades it.
"""

from __future__ import annotations

import cv2
import numpy as np

from facefuse.analysis.types import Face
from facefuse.geometry.regions import FACE_OVAL, LEFT_EYE, LIPS_INNER, RIGHT_EYE, polygon_mask, shrink
from facefuse.models import ModelStore
from facefuse.runtime import Runtime
from facefuse.fusion.recognizer import RECOGNIZERS, Recognizer, l2_normalise


class IdentityJudge:
    """L2-normalised MobileFaceNet embeddings of arcface-112 aligned faces (cosine = dot product)."""

    def __init__(self, store: ModelStore, runtime: Runtime) -> None:
        self.recognizer = Recognizer(runtime.session(store.ensure("mobilefacenet")), RECOGNIZERS["mobilefacenet"])

    def embed(self, image: np.ndarray, face: Face) -> np.ndarray:
        return l2_normalise(self.recognizer.embed(image, [face.keypoints]))[0]


def openness(face: Face) -> dict[str, float]:
    """Mouth and eye opening as a fraction of their width: expression measures independent of face size."""
    mesh = face.landmarks
    assert mesh is not None

    def ratio(group: np.ndarray, top: int, bottom: int) -> float:
        width = np.linalg.norm(mesh[group[0], :2] - mesh[group[len(group) // 2], :2])
        return float(np.linalg.norm(mesh[top, :2] - mesh[bottom, :2]) / max(width, 1e-6))

    eyes = (ratio(RIGHT_EYE, 159, 145) + ratio(LEFT_EYE, 386, 374)) / 2
    return {"mouth": ratio(LIPS_INNER, 13, 14), "eyes": eyes}


def face_region(face: Face, shape: tuple[int, ...], dilation: float = 1.6) -> np.ndarray:
    """Boolean mask of the face oval grown by ``dilation`` around its centre, in image pixels."""
    assert face.landmarks is not None
    oval = shrink(face.landmarks[FACE_OVAL, :2], dilation)
    height, width = shape[:2]
    side = max(height, width)
    return polygon_mask(oval, side)[:height, :width] > 0


def psnr_outside(output: np.ndarray, target: np.ndarray, region: np.ndarray) -> float:
    """PSNR (dB) over the pixels outside ``region``; ``inf`` when they are identical."""
    outside = ~region
    diff = output[outside].astype(np.float64) - target[outside].astype(np.float64)
    mse = float(np.mean(diff ** 2)) if diff.size else 0.0
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def seam_score(output: np.ndarray, target: np.ndarray, face: Face, band: float = 0.06) -> float:
    """Mean gradient magnitude of the output in a band around the blend's outer edge, over the target's in the same
    band: 1.0 means the blend added no edge; a visible seam or double contour pushes it above 1."""
    assert face.landmarks is not None
    oval = face.landmarks[FACE_OVAL, :2]
    height, width = output.shape[:2]
    side = max(height, width)
    outer = polygon_mask(shrink(oval, 1.0 + band), side)[:height, :width]
    inner = polygon_mask(shrink(oval, 1.0 - band), side)[:height, :width]
    ring = (outer - inner) > 0.5

    def gradient(image: np.ndarray) -> np.ndarray:
        grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
        return np.hypot(cv2.Sobel(grey, cv2.CV_32F, 1, 0), cv2.Sobel(grey, cv2.CV_32F, 0, 1))

    return float(gradient(output)[ring].mean() / max(gradient(target)[ring].mean(), 1e-6))
