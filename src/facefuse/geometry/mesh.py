"""Piecewise-affine warping over a triangulated point set, as one dense map and a single ``cv2.remap``.

Why not one ``warpAffine`` per triangle: a face mesh has ~1,000 triangles and per-triangle warps cost tens of ms
in Python; rasterising triangle ids once and evaluating every pixel's affine map with NumPy costs a few ms.
"""

from __future__ import annotations

import cv2
import numpy as np
from scipy.spatial import Delaunay


def triangulate(points: np.ndarray) -> np.ndarray:
    """(T, 3) vertex indices of the Delaunay triangulation of 2-D ``points``."""
    return Delaunay(points).simplices.astype(np.int32)


def triangle_affines(src: np.ndarray, dst: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(T, 2, 3) affine maps sending each destination triangle onto its source triangle."""
    d = dst[triangles]  # (T, 3, 2)
    s = src[triangles]
    ones = np.ones((len(triangles), 3, 1))
    d_h = np.concatenate([d, ones], axis=2)  # (T, 3, 3)
    # Solve d_h @ M^T = s for each triangle; degenerate triangles get a least-squares answer instead of NaNs.
    det = np.linalg.det(d_h)
    safe = np.abs(det) > 1e-9
    maps = np.zeros((len(triangles), 2, 3))
    maps[safe] = np.transpose(np.linalg.solve(d_h[safe], s[safe]), (0, 2, 1))
    maps[~safe] = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    return maps


def rasterize(dst: np.ndarray, triangles: np.ndarray, size: tuple[int, int], step: int = 1) -> np.ndarray:
    """(h/step, w/step) int32 map of the triangle covering each pixel centre (-1 outside), shared by every warp
    onto ``dst``."""
    ids = np.full((size[0] // step, size[1] // step), -1, dtype=np.int32)
    # 4 bits of sub-pixel precision for the rasteriser; pixel centres of the coarse grid sit at (i + 0.5) * step - 0.5
    dst_px = np.round(((dst + 0.5) / step - 0.5) * 16).astype(np.int32)
    for index, tri in enumerate(triangles):
        cv2.fillConvexPoly(ids, dst_px[tri], int(index), lineType=cv2.LINE_8, shift=4)
    return ids


def remap_tables(ids: np.ndarray, sources: list[np.ndarray], dst: np.ndarray, triangles: np.ndarray,
                 step: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each point set in ``sources``, remap tables (map_x, map_y) so ``cv2.remap(img, map_x, map_y)`` moves it
    onto ``dst``; pixels outside every triangle map to themselves. ``ids`` may be rasterised at 1/``step``
    resolution: the tables are evaluated there and upsampled, exact inside each triangle (the maps are affine) and
    within a fraction of a pixel at edges. Several sources share one pass over the pixels.
    """
    height, width = ids.shape
    ys, xs = (np.mgrid[0:height, 0:width].astype(np.float32) + 0.5) * step - 0.5
    inside = ids >= 0
    owner = ids[inside]
    px, py = xs[inside], ys[inside]
    full = (width * step, height * step)
    tables = []
    for src in sources:
        m = triangle_affines(src, dst, triangles).astype(np.float32)[owner]  # (P, 2, 3)
        map_x, map_y = xs.copy(), ys.copy()
        map_x[inside] = m[:, 0, 0] * px + m[:, 0, 1] * py + m[:, 0, 2]
        map_y[inside] = m[:, 1, 0] * px + m[:, 1, 1] * py + m[:, 1, 2]
        if step != 1:
            map_x = cv2.resize(map_x, full, interpolation=cv2.INTER_LINEAR)
            map_y = cv2.resize(map_y, full, interpolation=cv2.INTER_LINEAR)
        tables.append((map_x, map_y))
    return tables


def warp(image: np.ndarray, map_x: np.ndarray, map_y: np.ndarray) -> np.ndarray:
    """``image`` remapped by the tables, bicubic: the skin's fine detail survives the resampling (issue 17)."""
    return cv2.remap(image, map_x, map_y, interpolation=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REFLECT101)
