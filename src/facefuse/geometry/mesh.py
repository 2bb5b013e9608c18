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


def corner_inverses(dst: np.ndarray, triangles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T, 3, 3) inverses of each destination triangle's homogeneous corner matrix ``[[x, y, 1], …]`` and (T,)
    whether it is invertible, in closed form (adjugate over determinant).

    Why not ``np.linalg.solve``: for ~1,000 3×3 systems its per-matrix dispatch cost 1.4 ms per point set; this is
    0.4 ms, and it is computed once per destination and shared by every source warped onto it (the same maps to
    float32 precision)."""
    d = dst[triangles].astype(np.float64)  # (T, 3, 2)
    x, y = d[..., 0], d[..., 1]
    x0, x1, x2 = x[:, 0], x[:, 1], x[:, 2]
    y0, y1, y2 = y[:, 0], y[:, 1], y[:, 2]
    # adjugate of [[x0, y0, 1], [x1, y1, 1], [x2, y2, 1]], row by row
    adjugate = np.stack([
        np.stack([y1 - y2, y2 - y0, y0 - y1], axis=1),
        np.stack([x2 - x1, x0 - x2, x1 - x0], axis=1),
        np.stack([x1 * y2 - x2 * y1, x2 * y0 - x0 * y2, x0 * y1 - x1 * y0], axis=1),
    ], axis=1)
    det = x0 * (y1 - y2) + x1 * (y2 - y0) + x2 * (y0 - y1)
    safe = np.abs(det) > 1e-9
    return adjugate / np.where(safe, det, 1.0)[:, None, None], safe


def triangle_affines(src: np.ndarray, dst: np.ndarray, triangles: np.ndarray,
                     inverses: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """(T, 2, 3) affine maps sending each destination triangle onto its source triangle (``inverses``: the
    destination's :func:`corner_inverses`, when several sources share it). Degenerate triangles get the identity."""
    inverse, safe = inverses if inverses is not None else corner_inverses(dst, triangles)
    maps = np.transpose(inverse @ src[triangles].astype(np.float64), (0, 2, 1))
    maps[~safe] = np.array([[1.0, 0, 0], [0, 1.0, 0]])
    return maps


def rasterize(dst: np.ndarray, triangles: np.ndarray, size: tuple[int, int], step: int = 1) -> np.ndarray:
    """(h/step, w/step) int32 map of the triangle covering each pixel centre (-1 outside), shared by every warp
    onto ``dst``."""
    ids = np.full((size[0] // step, size[1] // step), -1, dtype=np.int32)
    # 4 bits of sub-pixel precision for the rasteriser; pixel centres of the coarse grid sit at (i + 0.5) * step - 0.5
    # the corners gathered once: indexing the points per triangle inside the loop cost more than the drawing
    corners = np.round(((dst + 0.5) / step - 0.5) * 16).astype(np.int32)[triangles]
    for index in range(len(corners)):
        cv2.fillConvexPoly(ids, corners[index], index, lineType=cv2.LINE_8, shift=4)
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
    inverses = corner_inverses(dst, triangles)
    tables = []
    for src in sources:
        m = triangle_affines(src, dst, triangles, inverses).astype(np.float32)[owner]  # (P, 2, 3)
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
