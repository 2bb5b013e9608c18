"""Does the fused face carry the target's lighting? A low-pass Lab comparison inside the target's face hull.

Defined in issue 8: inside the target's face hull (eroded by 5 % of the face width) compare the low-pass Lab of
output and target (Gaussian σ = 8 % of the face width), subtract the region's median difference (a global tone
shift is allowed), and report mean |ΔL|, the share of pixels with |ΔL| > 8 (the "blotch share": patches a person
sees as wrong light), and the same for chroma √(Δa² + Δb²). On a self-swap (source = another photo of the target's
own person) the output should reproduce the target, so any blotch is the fusion's doing.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from facefuse.analysis.types import Face

BLOTCH_LEVEL = 8.0  # CIE L* (0–100) units: a lightness step most people notice on skin


@dataclass(frozen=True)
class LightingError:
    mean_dl: float
    blotch_share: float
    mean_dc: float
    chroma_blotch_share: float


def face_hull(face: Face, shape: tuple[int, ...], erode_fraction: float = 0.05) -> np.ndarray:
    """Boolean mask of the convex hull of the face's 468 points, eroded by ``erode_fraction`` of its width."""
    assert face.landmarks is not None
    points = face.landmarks[:, :2]
    width = float(np.ptp(points[:, 0]))
    mask = np.zeros(shape[:2], np.uint8)
    cv2.fillConvexPoly(mask, np.round(cv2.convexHull(points.astype(np.float32))[:, 0]).astype(np.int32), 1)
    radius = max(1, int(round(erode_fraction * width)))
    return cv2.erode(mask, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))) > 0


def low_pass_lab(image: np.ndarray, sigma: float) -> np.ndarray:
    lab = cv2.cvtColor(image.astype(np.float32) / 255.0, cv2.COLOR_RGB2Lab)
    return cv2.GaussianBlur(lab, (0, 0), sigma)


def lighting_error(output: np.ndarray, target: np.ndarray, target_face: Face) -> LightingError:
    assert target_face.landmarks is not None
    width = float(np.ptp(target_face.landmarks[:, 0]))
    region = face_hull(target_face, target.shape)
    if region.sum() < 16:
        return LightingError(0.0, 0.0, 0.0, 0.0)
    diff = (low_pass_lab(output, 0.08 * width) - low_pass_lab(target, 0.08 * width))[region]
    diff -= np.median(diff, axis=0)
    dl = np.abs(diff[:, 0])
    dc = np.hypot(diff[:, 1], diff[:, 2])
    return LightingError(float(dl.mean()), float((dl > BLOTCH_LEVEL).mean()), float(dc.mean()),
                         float((dc > BLOTCH_LEVEL).mean()))
