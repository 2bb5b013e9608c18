"""A bar or seam across a face's forehead (issue 17: the mirror fill of a turned source showed one), measured on the
band between the brows and the hairline of the face it was fused onto. Evaluation only: the pipeline never uses it."""

from __future__ import annotations

import cv2
import numpy as np

BROW_TOPS = (105, 334)  # mesh points on the brows' upper edges, beside their inner ends: the band's sides
FOREHEAD_TOP, BROW_LINE = 151, 9  # mesh points up the midline: the band's top and bottom


def forehead_band(landmarks: np.ndarray) -> tuple[slice, slice]:
    """The rows and columns of the forehead band of a face with these (image-coordinate) mesh ``landmarks``."""
    left, right = sorted(landmarks[list(BROW_TOPS), 0])
    top, bottom = landmarks[FOREHEAD_TOP, 1], landmarks[BROW_LINE, 1]
    return slice(int(top), int(np.ceil(bottom))), slice(int(left), int(np.ceil(right)))


def bar_and_seam(image: np.ndarray, band: tuple[slice, slice]) -> tuple[float, float]:
    """Of the column means of lightness (CIELAB L, 0–255) across the forehead ``band`` of an RGB ``image``: how far
    the darkest column falls below their median (a dark bar), and the largest jump between columns 2 px apart (a
    seam)."""
    lightness = cv2.cvtColor(image, cv2.COLOR_RGB2LAB)[..., 0].astype(np.float64)
    profile = lightness[band].mean(axis=0)
    return float(np.median(profile) - profile.min()), float(np.abs(profile[2:] - profile[:-2]).max())
