"""Similarity alignment: the aligned crop every engine works in, and the matrices to get there and back."""

from __future__ import annotations

import cv2
import numpy as np


def similarity(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """2×3 least-squares similarity (rotation, uniform scale, shift) mapping ``src`` points onto ``dst``.

    Umeyama's closed form: exact for any number of points and never a shear, so faces keep their proportions.
    """
    src = np.asarray(src, dtype=np.float64)
    dst = np.asarray(dst, dtype=np.float64)
    mu_s, mu_d = src.mean(0), dst.mean(0)
    s_c, d_c = src - mu_s, dst - mu_d
    cov = d_c.T @ s_c / len(src)
    u, sig, vt = np.linalg.svd(cov)
    sign = np.eye(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[1, 1] = -1
    rotation = u @ sign @ vt
    scale = np.trace(np.diag(sig) @ sign) / max(s_c.var(0).sum(), 1e-12)
    matrix = np.zeros((2, 3))
    matrix[:, :2] = scale * rotation
    matrix[:, 2] = mu_d - matrix[:, :2] @ mu_s
    return matrix


def apply(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Transform (N, 2+) points; extra columns (depth) are scaled by the matrix's scale."""
    xy = points[:, :2] @ matrix[:, :2].T + matrix[:, 2]
    if points.shape[1] == 2:
        return xy
    scale = np.sqrt(abs(np.linalg.det(matrix[:, :2])))
    return np.column_stack([xy, points[:, 2:] * scale])


def aligned_crop(image: np.ndarray, matrix: np.ndarray, size: int) -> np.ndarray:
    """The ``size``×``size`` crop that ``matrix`` (image → crop) defines; borders reflect so blends see no black."""
    return cv2.warpAffine(image, matrix, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT101)
