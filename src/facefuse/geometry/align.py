"""Similarity alignment: the aligned crop every engine works in, and the matrices to get there and back."""

from __future__ import annotations

import cv2
import numpy as np

# The ArcFace 112×112 template (InsightFace's ``arcface_dst``): the five key points every alignment starts from —
# the gate's sharpness frame, the swappers' templates (fusion/templates.py), and the mesh engine's crop.
ARCFACE_112 = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                        [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float32)
CROP_FACE_SCALE = 0.55  # the ArcFace template shrunk so the whole head and its surroundings fit in the crop


def crop_template(size: int) -> np.ndarray:
    """The five key points' places in the aligned crop of side ``size`` that the mesh engine renders in and the
    segmenter reads (so their masks line up by a pure scale)."""
    return (ARCFACE_112 - 56.0) * (size / 112.0) * CROP_FACE_SCALE + size / 2.0


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
