"""Folds in the mesh engine's warp (issue 17, far-cheek streaks on turned targets): the share of the target's face
that takes the source's pixels from a triangle turned over in the source.

A piecewise-affine warp is only as good as its triangles: where a destination triangle's corners are in the other
winding order in the source photo, the source's texture there is mirrored and lands twice (its eye corner, brow or
hair as dark dots and a second contour). Measured with the faces' own points (degrees 0: no reshaping), on the
target's aligned crop, with the mouth left out (its interior stays the target's); the triangulation is a choice:
:func:`facefuse.fusion.mesh_engine.surface_triangles` (the engine's) or :func:`projection_triangles` (before).
With ``mirror``, the engine's mirror fill (with the source's parsing, as a fusion has it) is counted as it blends: a triangle whose vertices take weight ``w`` from
their mirror partners (its pixels' mean weight: the mean of its corners', the weight being interpolated linearly)
counts as ``(1 - w)`` × folded in the source + ``w`` × folded in the mirror partners' triangle (turned over in the
source: a reflection turns it once more).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from facefuse.fusion.engine import FusionOptions
from facefuse.fusion.mesh_engine import RING_SCALE, MeshFusionEngine, border_points, far_side_parsing, mirror_fill
from facefuse.geometry import align, mesh
from facefuse.geometry.regions import FACE_OVAL, MOUTH_GROUP, shrink
from facefuse.pipeline import Fuser

Triangulation = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def projection_triangles(target_3d: np.ndarray, dest: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """The engine's triangulation before issue 17's fix: Delaunay of the projected points, face and ring at once."""
    return mesh.triangulate(np.concatenate([dest, outer]))


def _winding(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    a, b, c = (points[triangles[:, k]] for k in range(3))
    return (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (c[:, 0] - a[:, 0]) * (b[:, 1] - a[:, 1])


def folded_share(fuser: Fuser, source: Path, target: Path, triangulate: Triangulation, mirror: bool = False) -> float:
    """Share of the target face's pixels (largest faces; mouth left out) warped from a folded source triangle."""
    target_face = max(fuser.analyze(target).faces, key=lambda f: f.area)
    # the source as a fusion prepares it: its face, and its parsing, which the mirror fill of a turned source asks
    prepared = fuser.prepare(source, FusionOptions(visible_label=False))
    source_face = prepared.prepared.face
    source_mesh = source_face.landmarks
    assert target_face.landmarks is not None and source_mesh is not None
    to_crop, size = MeshFusionEngine().crop_matrix(target_face, FusionOptions())
    target_3d = align.apply(to_crop, target_face.landmarks)
    target_pts = target_3d[:, :2]
    source_pts = align.apply(align.similarity(source_mesh[:, :2], target_pts), source_mesh)[:, :2]
    outer = np.concatenate([shrink(target_pts[FACE_OVAL], RING_SCALE), border_points(size)])
    destination = np.concatenate([target_pts, outer])
    origin = np.concatenate([source_pts, shrink(source_pts[FACE_OVAL], RING_SCALE), border_points(size)])
    triangles = triangulate(target_3d, target_pts, outer)
    owner = mesh.rasterize(destination, triangles, (size, size))
    owner = owner[owner >= 0]
    face = np.all(triangles < len(target_pts), axis=1) & ~np.isin(triangles, MOUTH_GROUP).any(axis=1)
    folded = (np.sign(_winding(destination, triangles)) != np.sign(_winding(origin, triangles))).astype(float)
    parsed = far_side_parsing(replace(prepared.prepared, parsing=prepared.source_parsing), target_face)
    fill = mirror_fill(source_face, target_face, parsed) if mirror else None
    if fill is not None:
        partners, weights = fill
        reflected = origin.copy()
        reflected[:len(partners)] = source_pts[partners]
        # a reflection turns a triangle over: the mirror partners' triangle is seen right when its winding is the
        # opposite of the destination's
        folded_mirror = np.sign(_winding(destination, triangles)) == np.sign(_winding(reflected, triangles))
        weight = np.where(face, np.concatenate([weights, np.zeros(len(outer))])[triangles].mean(1), 0.0)
        folded = (1.0 - weight) * folded + weight * folded_mirror
    return float(np.mean(folded[owner] * face[owner]) / np.mean(face[owner]))
