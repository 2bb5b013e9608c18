"""Piecewise-affine warping over a triangulated point set, as one dense map and a single ``cv2.remap``.

Why not one ``warpAffine`` per triangle: a face mesh has ~1,000 triangles and per-triangle warps cost tens of ms
in Python; rasterising triangle ids once and evaluating every pixel's affine map with NumPy costs a few ms.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

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


SLACK = 2.0  # px: how far outside its own triangle in a photo a node's reading may fall before it is placed again


@dataclass(frozen=True)
class MeshNodes:
    """The nodes of a 1/``step`` grid over the crop that lie in a (non-degenerate) triangle of the mesh: their mask
    (h, w), each one's triangle (P,) and the point it is read at (P, 2: the node itself, or the nearest point of
    its triangle where it lies in none), with the triangles (T, 3), their corner inverses by row (3, T, 3) and
    which are not degenerate (T,). Shared by every value interpolated over the mesh (remap tables, normal maps)."""

    inside: np.ndarray
    owner: np.ndarray
    points: np.ndarray
    triangles: np.ndarray
    inverse: np.ndarray
    safe: np.ndarray
    step: int

    def at_nodes(self, values: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per-vertex ``values`` (V, C) interpolated at the nodes (P, C, float32), or at the nodes ``rows`` only:
        each triangle's affine map of them (one small product per triangle), read at its nodes."""
        owner, points = (self.owner, self.points) if rows is None else (self.owner[rows], self.points[rows])
        corners = values[self.triangles].astype(np.float64)  # (T, 3, C)
        maps = [np.einsum("tk,tkc->tc", row, corners).astype(np.float32) for row in self.inverse]  # x, y, 1
        out = points[:, :1] * _rows(maps[0], owner)
        out += points[:, 1:] * _rows(maps[1], owner)
        out += _rows(maps[2], owner)
        return out

    def upsampled(self, grid: np.ndarray) -> np.ndarray:
        """A map on the node grid brought to the crop's pixels (bilinear)."""
        if self.step == 1:
            return grid
        height, width = self.inside.shape
        return cv2.resize(grid, (width * self.step, height * self.step), interpolation=cv2.INTER_LINEAR)


def mesh_nodes(ids: np.ndarray, dst: np.ndarray, triangles: np.ndarray, step: int = 1) -> MeshNodes:
    """The :class:`MeshNodes` of ``ids`` (:func:`rasterize` at 1/``step``) over ``dst``, each node in the triangle the
    rasteriser drew last over it (see :func:`placed_nodes`)."""
    inverse, safe = corner_inverses(dst, triangles)
    inverse = np.ascontiguousarray(inverse.transpose(1, 0, 2))  # rows by x, y, 1: (3, T, 3)
    inside = ids >= 0
    inside[inside] = safe[ids[inside]]  # a degenerate triangle's nodes stay in place, like those outside
    node_rows, node_columns = np.nonzero(inside)
    points = ((np.column_stack([node_columns, node_rows]) + 0.5) * step - 0.5).astype(np.float32)
    return MeshNodes(inside, ids[inside], points, triangles, inverse, safe, step)


def off_their_triangles(nodes: MeshNodes, photo: np.ndarray, read: np.ndarray) -> np.ndarray:
    """Which nodes' reading ``read`` in the point set ``photo`` (:meth:`MeshNodes.at_nodes`) falls more than
    :data:`SLACK` px outside their triangle's box there."""
    low, high = _corner_box(photo, nodes.triangles)
    off = np.zeros(len(nodes.owner), bool)
    for axis in range(2):  # column by column: a reduction over an axis of 2 cost 4× more
        off |= read[:, axis] < np.take(low[:, axis] - SLACK, nodes.owner)
        off |= read[:, axis] > np.take(high[:, axis] + SLACK, nodes.owner)
    return off


def placed_nodes(nodes: MeshNodes, stray: np.ndarray, ids: np.ndarray, dst: np.ndarray) -> MeshNodes:
    """``nodes`` with the nodes ``stray`` (indices) each in the triangle of ``dst`` that holds it.

    Why: the rasteriser gives a node on an edge to whichever triangle it drew last, and a sliver (a turned face's
    far jaw, squeezed to a fraction of a pixel) owns nodes up to a few pixels outside itself, where its affine map —
    a wide source triangle onto the sliver — reads far off in the source photo: on almost every fusion of the shared
    hard photos some node did, up to thousands of pixels off (``benchmarks/remap_nodes.py``), and the upsampled table
    spread it into a round blot of whatever lay there (elon_musk's blue backdrop on yang_mi's jaw line). Such a node
    goes to the last-drawn triangle (the rasteriser's order, the render's where triangles overlap) that holds it
    among its neighbours' triangles, or among all whose box holds it; in none (the rim's rounding), it is read at
    its own triangle's nearest corner-weighted point. The others keep the rasteriser's triangle: a node a little
    outside it reads the neighbour's map to within a fraction of a pixel wherever the warp is smooth (placing every
    node cost ~5 ms a render)."""
    height, width = ids.shape
    triangles, inverse, safe = nodes.triangles, nodes.inverse, nodes.safe
    owner, points = nodes.owner.copy(), nodes.points.copy()
    at = points[stray].astype(np.float64)
    rows, columns = (axis[stray] for axis in np.nonzero(nodes.inside))
    near = np.stack([ids[np.clip(rows + dy, 0, height - 1), np.clip(columns + dx, 0, width - 1)]
                     for dy in (-1, 0, 1) for dx in (-1, 0, 1)], axis=1)  # (S, 9) the neighbours' triangles
    pair_node, pair_triangle = np.nonzero(near >= 0)
    holding = _holding(at, pair_node, near[pair_node, pair_triangle], inverse, safe)
    lost = np.nonzero(holding < 0)[0]  # in a triangle that owns no node near it: every triangle whose box holds it
    if len(lost):
        low, high = _corner_box(dst, triangles)
        x, y = at[lost, :1], at[lost, 1:]
        pair_node, pair_triangle = np.nonzero((x >= low[:, 0] - 1e-6) & (x <= high[:, 0] + 1e-6) &
                                              (y >= low[:, 1] - 1e-6) & (y <= high[:, 1] + 1e-6))
        holding[lost] = _holding(at[lost], pair_node, pair_triangle, inverse, safe)
    nowhere = holding < 0  # in no triangle at all: read at its own triangle's nearest corner-weighted point
    if nowhere.any():
        own = owner[stray[nowhere]]
        weights = np.clip(_barycentric(at[nowhere], inverse, own), 0.0, None)
        weights /= np.maximum(weights.sum(1, keepdims=True), 1e-12)
        points[stray[nowhere]] = np.einsum("sk,skd->sd", weights, dst[triangles[own]])
    owner[stray[~nowhere]] = holding[~nowhere]
    return replace(nodes, owner=owner, points=points)


def _rows(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``table[index]`` for a 2-D table: ``np.take`` along the rows, 13× faster here than fancy indexing."""
    return np.take(table, index, axis=0)


def _corner_box(points: np.ndarray, triangles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each triangle's bounding box in ``points``: (T, 2) lows and highs (NumPy's min over an axis of 3 was 5×
    slower than two elementwise minima)."""
    a, b, c = (_rows(points, triangles[:, corner]) for corner in range(3))
    return np.minimum(np.minimum(a, b), c), np.maximum(np.maximum(a, b), c)


def _barycentric(points: np.ndarray, inverse: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(P, 3) barycentric weights of ``points`` (P, 2) in ``triangles`` (P indices), from the corner inverses laid
    out by row (3, T, 3): x · row 0 + y · row 1 + row 2."""
    weights = points[:, :1] * _rows(inverse[0], triangles)
    weights += points[:, 1:] * _rows(inverse[1], triangles)
    weights += _rows(inverse[2], triangles)
    return weights


def _holding(points: np.ndarray, pair_point: np.ndarray, pair_triangle: np.ndarray, inverse: np.ndarray,
             safe: np.ndarray) -> np.ndarray:
    """For each of ``points``, the last-drawn of its candidate triangles (pairs ``pair_point`` p, ``pair_triangle``
    t) that holds it — the rasteriser's order: where triangles overlap (a fold, a closed mouth) the one the render
    shows — or -1 where none does."""
    weights = _barycentric(points[pair_point], inverse, pair_triangle)
    holds = safe[pair_triangle] & (np.minimum(np.minimum(weights[:, 0], weights[:, 1]), weights[:, 2]) >= -1e-9)
    best = np.full(len(points), -1, np.int64)
    np.maximum.at(best, pair_point[holds], pair_triangle[holds])
    return best


@functools.lru_cache(maxsize=8)
def _grid(height: int, width: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """The node grid's pixel positions (rows, columns; float32), read-only: the same for every crop of a size."""
    ys, xs = (np.mgrid[0:height, 0:width].astype(np.float32) + 0.5) * step - 0.5
    ys.flags.writeable = xs.flags.writeable = False
    return ys, xs


def remap_tables(ids: np.ndarray, sources: list[np.ndarray], dst: np.ndarray, triangles: np.ndarray,
                 step: int = 1, photos: int = 0) -> tuple[list[tuple[np.ndarray, np.ndarray]], MeshNodes]:
    """For each point set in ``sources`` (vertex order = ``dst``'s), remap tables (map_x, map_y) so
    ``cv2.remap(img, map_x, map_y)`` moves it onto ``dst``; pixels outside every triangle map to themselves; and the
    grid's :class:`MeshNodes`, for other values interpolated over the mesh. ``ids`` may be rasterised at 1/``step``
    resolution: the tables are evaluated there and upsampled, exact inside each triangle (the maps are affine) and
    within a fraction of a pixel at edges. The first ``photos`` point sets are photos' points (not a value such as
    a blend weight): a node whose reading in one of them falls off its triangle is placed again
    (:func:`placed_nodes`) and read again in every set.
    """
    nodes = mesh_nodes(ids, dst, triangles, step)
    reads = [nodes.at_nodes(points) for points in sources]
    off = np.zeros(len(nodes.owner), bool)
    for points, read in zip(sources[:photos], reads):
        off |= off_their_triangles(nodes, points, read)
    stray = np.nonzero(off)[0]
    if len(stray):
        nodes = placed_nodes(nodes, stray, ids, dst)
        for points, read in zip(sources, reads):
            read[stray] = nodes.at_nodes(points, stray)
    ys, xs = _grid(*nodes.inside.shape, step)
    tables = []
    for read in reads:
        map_x, map_y = xs.copy(), ys.copy()
        map_x[nodes.inside], map_y[nodes.inside] = read[:, 0], read[:, 1]
        tables.append((nodes.upsampled(map_x), nodes.upsampled(map_y)))
    return tables, nodes


def warp(image: np.ndarray, map_x: np.ndarray, map_y: np.ndarray) -> np.ndarray:
    """``image`` remapped by the tables, bicubic: the skin's fine detail survives the resampling (issue 17)."""
    return cv2.remap(image, map_x, map_y, interpolation=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REFLECT101)
