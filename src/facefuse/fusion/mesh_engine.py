"""The default engine: geometric fusion on the 468-point mesh, fully offline and a few ms on a CPU.

In an aligned crop of the target face it builds a destination geometry — face contour moved toward the source's by
``profile_degree``, features moved by ``feature_degree`` — then warps both photos onto it:
- the target (its own skin, hair and background) so the jaw line and cheeks move consistently with the new
  contour and no double contour can appear; a ring of fixed points around the face fades the warp out;
- the source, whose appearance then replaces the target's inside the face by ``feature_degree``.
Pose and expression stay the target's: the source's 3-D mesh is first turned into the target's head pose, and the
eyes and lips only take the source's position and width, never its opening (eye interiors and the mouth interior
are kept from the target by the ``keep_target`` mask).
"""

from __future__ import annotations

import cv2
import numpy as np
from scipy.interpolate import RBFInterpolator
from scipy.spatial import cKDTree

from ..analysis.pose import face_axes
from ..analysis.types import Face
from ..geometry import align, mesh
from ..geometry.align import crop_template
from ..geometry.regions import (FACE_OVAL, IDENTITY_POINTS, LIPS_INNER, LIPS_OUTER, MOUTH_GROUP, face_masks, feather,
                                polygon_mask, shrink, skin_mask)
from .engine import FusionOptions, RenderedFace, SourceFace

RING_SCALE = 1.45  # fixed ring around the face oval where the geometric warp fades to nothing
BORDER_POINTS = 5  # fixed points per crop side
MAP_STEP = 4  # remap tables at 1/4 resolution (see geometry.mesh.remap_tables): within 46 dB of 1/2, 3 ms less


def reposed_shape(source_mesh: np.ndarray, target_mesh: np.ndarray) -> np.ndarray:
    """The source's 3-D face shape turned into the target's head pose (then only its 2-D projection is used).

    Without this, a source photographed turned 20° would lend its *pose* to the target along with its shape.
    """
    centred = source_mesh - source_mesh.mean(0)
    canonical = centred @ face_axes(source_mesh)
    return canonical @ face_axes(target_mesh).T + target_mesh.mean(0)


def border_points(size: int) -> np.ndarray:
    edge = np.linspace(0, size - 1, BORDER_POINTS)
    last = float(size - 1)
    return np.concatenate([np.column_stack([edge, np.zeros_like(edge)]), np.column_stack([edge, np.full_like(edge, last)]),
                           np.column_stack([np.zeros_like(edge[1:-1]), edge[1:-1]]),
                           np.column_stack([np.full_like(edge[1:-1], last), edge[1:-1]])])


def destination_geometry(target: np.ndarray, source_shape: np.ndarray, anchors: np.ndarray, profile: float,
                         feature: float) -> np.ndarray:
    """Target mesh points moved toward the source shape, as one smooth (thin-plate spline) displacement field.

    Control points: the face contour moves by ``profile``; eye corners, brows and nose by ``feature``; the mouth
    only by its centre, since a smile's width and an open mouth are expression, not identity; ``anchors`` (the
    ring around the face and the crop border) stay put. Everything else — eyelids, lips, cheeks — follows the
    spline, so the target's expression is carried along and neighbouring triangles do not fold over each other.
    """
    controls = [target[FACE_OVAL], target[IDENTITY_POINTS], target[MOUTH_GROUP].mean(0, keepdims=True), anchors]
    shifts = [profile * (source_shape[FACE_OVAL] - target[FACE_OVAL]),
              feature * (source_shape[IDENTITY_POINTS] - target[IDENTITY_POINTS]),
              feature * (source_shape[MOUTH_GROUP].mean(0, keepdims=True) - target[MOUTH_GROUP].mean(0, keepdims=True)),
              np.zeros_like(anchors)]
    field = RBFInterpolator(np.concatenate(controls), np.concatenate(shifts), kernel="thin_plate_spline",
                            smoothing=1.0)
    return target + field(target)


def close_mouth(crop: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The source crop with its mouth interior painted in lip colour.

    FaceMesh's inner-lip contour runs inside the teeth of a wide smile, so an open source mouth would leave teeth
    on the target's lips once squeezed into a closed target mouth; the target's own interior is kept anyway.
    """
    size = crop.shape[0]
    inner = polygon_mask(points[LIPS_INNER], size)
    lips = polygon_mask(points[LIPS_OUTER], size) * (1.0 - inner)
    if inner.sum() < 4 or lips.sum() < 4:
        return crop
    colour = np.median(crop[lips > 0.5], axis=0)
    x0, y0 = np.maximum(np.floor(points[LIPS_OUTER].min(0)).astype(int) - 8, 0)
    x1, y1 = np.ceil(points[LIPS_OUTER].max(0)).astype(int) + 8
    box = (slice(y0, y1), slice(x0, x1))
    grown = feather(cv2.dilate(inner[box], np.ones((5, 5), np.uint8)), 2.0)[..., None]
    out = crop.copy()
    out[box] = (crop[box] * (1.0 - grown) + colour * grown + 0.5).astype(np.uint8)
    return out


MIRROR_FROM_YAW = 30.0  # below this the source shows both sides of its face well enough
FORESHORTENED = (0.3, 0.6)  # relative projected area at which a vertex is fully / not at all filled by its mirror


def mirror_fill(mesh_3d: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """For a turned source face: each vertex's mirror partner and how much of its texture to take from there.

    A face is nearly symmetric, so the side a turned head hides (seen foreshortened: its triangles project much
    smaller than they are) is better taken from the visible side, mirrored, than stretched from a sliver of pixels.
    Foreshortening is measured per vertex as the projected area of its triangles in the photo over their area in
    the face's own frontal frame, relative to the face's median; no sign convention of the pose is needed.
    """
    canonical = (mesh_3d - mesh_3d.mean(0)) @ face_axes(mesh_3d)
    partners = cKDTree(canonical).query(canonical * np.array([-1.0, 1.0, 1.0]))[1]
    triangles = mesh.triangulate(canonical[:, :2])

    def areas(points: np.ndarray) -> np.ndarray:
        corners = points[triangles]
        a, b, c = corners[:, 0], corners[:, 1], corners[:, 2]
        return 0.5 * np.abs((b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (c[:, 0] - a[:, 0]) * (b[:, 1] - a[:, 1]))

    ratio = areas(mesh_3d[:, :2]) / np.maximum(areas(canonical[:, :2]), 1e-9)
    ratio /= np.median(ratio)
    per_vertex = np.bincount(triangles.ravel(), np.repeat(ratio, 3), len(mesh_3d)) / np.maximum(
        np.bincount(triangles.ravel(), minlength=len(mesh_3d)), 1)
    low, high = FORESHORTENED
    weights = np.clip((high - per_vertex) / (high - low), 0.0, 1.0)
    weights *= per_vertex[partners] > per_vertex  # only where the mirror side is the better-seen one
    return (partners, weights) if weights.max() > 0.05 else None


class MeshFusionEngine:
    name = "mesh"

    def prepare_source(self, image: np.ndarray, face: Face) -> SourceFace:
        assert face.landmarks is not None, "the analyzer gives every accepted face a mesh"
        turned = face.pose is not None and abs(face.pose.yaw) > MIRROR_FROM_YAW
        return SourceFace(face, {"image": image, "mesh": face.landmarks,
                                 "mirror": mirror_fill(face.landmarks) if turned else None})

    def crop_matrix(self, face: Face, options: FusionOptions) -> tuple[np.ndarray, int]:
        size = options.crop_size
        return align.similarity(face.keypoints, crop_template(size)), size

    def render(self, source: SourceFace, target_crop: np.ndarray, to_crop: np.ndarray, target_face: Face,
               options: FusionOptions) -> RenderedFace:
        assert target_face.landmarks is not None
        size = target_crop.shape[0]
        profile, feature = options.profile_degree / 100.0, options.feature_degree / 100.0
        target_pts = align.apply(to_crop, target_face.landmarks)[:, :2]

        source_mesh = source.payload["mesh"]
        shape = reposed_shape(source_mesh, target_face.landmarks)[:, :2]
        shape = align.apply(align.similarity(shape, target_pts), shape)
        source_to_crop = align.similarity(source_mesh[:, :2], target_pts)
        source_crop = align.aligned_crop(source.payload["image"], source_to_crop, size)
        source_pts = align.apply(source_to_crop, source_mesh)[:, :2]
        source_crop = close_mouth(source_crop, source_pts)

        ring_t = shrink(target_pts[FACE_OVAL], RING_SCALE)
        ring_s = shrink(source_pts[FACE_OVAL], RING_SCALE)
        fixed = border_points(size)
        dest = destination_geometry(target_pts, shape, np.concatenate([ring_t, fixed]), profile, feature)
        dst_all = np.concatenate([dest, ring_t, fixed])
        triangles = mesh.triangulate(dst_all)
        ids = mesh.rasterize(dst_all, triangles, (size, size), MAP_STEP)
        sources = [np.concatenate([target_pts, ring_t, fixed]), np.concatenate([source_pts, ring_s, fixed])]
        mirror = source.payload.get("mirror")
        if mirror is not None:
            partners, weights = mirror
            # the mirrored texture, and the per-vertex weights interpolated over the triangles by the same affine
            # maps (a "point set" whose x is the weight): one extra table each, no second rasterisation
            sources.append(np.concatenate([source_pts[partners], ring_s, fixed]))
            sources.append(np.concatenate([np.column_stack([weights, np.zeros_like(weights)]),
                                           np.zeros((len(ring_s) + len(fixed), 2))]))
        tables = mesh.remap_tables(ids, sources, dst_all, triangles, MAP_STEP)
        warped_target = mesh.warp(target_crop, *tables[0])
        warped_source = mesh.warp(source_crop, *tables[1])
        if mirror is not None:
            mirrored = mesh.warp(source_crop, *tables[2])
            weight = np.clip(tables[3][0], 0.0, 1.0)
            warped_source = cv2.blendLinear(mirrored, warped_source, weight, 1.0 - weight)

        # the target's pixels move up to the ring, so the region that may change reaches half way to it
        mask, keep, region = face_masks(dest, size, feature, region_scale=(1 + RING_SCALE) / 2, region_feather=2)
        return RenderedFace(crop=warped_source, target_crop=warped_target, mask=mask, matrix=to_crop,
                            keep_target=keep, region=region, skin=skin_mask(dest, size))
