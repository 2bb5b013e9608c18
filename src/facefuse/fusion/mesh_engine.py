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

from typing import Any, NamedTuple

import cv2
import numpy as np
from scipy.interpolate import RBFInterpolator
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist

from ..analysis.pose import face_axes
from ..analysis.segmentation import FACE_CLASSES, FaceParsing
from ..analysis.types import Face
from ..geometry import align, mesh
from ..geometry.align import crop_template
from ..geometry.regions import (FACE_OVAL, IDENTITY_POINTS, LIPS_INNER, LIPS_OUTER, MOUTH_GROUP, RIGID_POINTS,
                                face_masks, feather, kept_interior, polygon_mask, shrink, skin_mask)
from .albedo import apply_toning, tone_makeup
from .blend import changed_box
from .engine import FusionOptions, RenderedFace, SourceFace, SourceMap, StreamCarry
from .eyes import gaze_moved, source_eyes
from .shading import mirrored, normal_maps, vertex_normals

RING_SCALE = 1.45  # fixed ring around the face oval where the geometric warp fades to nothing
BORDER_POINTS = 5  # fixed points per crop side
# the oval the source's face covers (1: all of it). Measured on 36 cross pairs (benchmarks/identity_ablation.py):
# 0.95 → identity 63.9 % / 63.9 % (MobileFaceNet / dlib), 1.0 → 69.4 % / 72.2 %, blotch 1.98 % → 2.07 %: a ring
# of the target's own skin inside its jaw line and hairline is gone
MASK_SCALE = 1.0
NOSE_TIP = 1  # FaceMesh vertex nearest the camera in any pose a face is fused in
FILTERED_FROM = 2.5  # photo pixels per crop pixel on the source's face from which the source is filtered at all
MAX_LEVELS = 3  # pyramid levels one warp blends at most (a warp each)
MAP_STEP = 4  # remap tables at 1/4 resolution (see geometry.mesh.remap_tables): within 46 dB of 1/2, 3 ms less


def reposed_shape(source_mesh: np.ndarray, target_mesh: np.ndarray) -> np.ndarray:
    """The source's 3-D face shape turned into the target's head pose (then only its 2-D projection is used): the
    rotation that maps its :data:`RIGID_POINTS` best onto the target's, in the least-squares sense (Kabsch).

    Without this, a source photographed turned 20° would lend its *pose* to the target along with its shape. Why
    the rigid points and not each face's own axes (:func:`~facefuse.analysis.pose.face_axes`, six points: eye and
    cheek corners, forehead, chin): the chin moves with the mouth, so an open mouth read as a nod and tilted the
    source's features against the target's (``tests/test_fusion.py``); fitted on ~400 points that an expression
    leaves alone, the independent pose judge's error fell on most sets (BENCHMARKS.md, "Thirtieth stop: the source
    re-posed by its rigid points")."""
    source, target = source_mesh[RIGID_POINTS], target_mesh[RIGID_POINTS]
    source_centre, target_centre = source.mean(0), target.mean(0)
    u, _, vt = np.linalg.svd((source - source_centre).T @ (target - target_centre))
    rotation = vt.T @ np.diag([1.0, 1.0, np.sign(np.linalg.det(vt.T @ u.T))]) @ u.T
    return (source_mesh - source_centre) @ rotation.T + target_centre


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


def frontal(mesh_3d: np.ndarray) -> np.ndarray:
    """The face's mesh turned frontal (in its own axes, centred): the frame its surface is triangulated in."""
    return (mesh_3d - mesh_3d.mean(0)) @ face_axes(mesh_3d)


def face_topology(target_3d: np.ndarray) -> np.ndarray:
    """The face's own triangles (:func:`surface_triangles`): Delaunay's of its mesh turned frontal — the same
    person's from frame to frame of a stream, whatever the pose, so a track carries them (:mod:`facefuse.video.turns`)."""
    return mesh.triangulate(frontal(target_3d)[:, :2])


def surface_triangles(target_3d: np.ndarray, dest: np.ndarray, outer: np.ndarray,
                      face: np.ndarray | None = None) -> np.ndarray:
    """Triangles over ``dest`` (the new face's 468 points) followed by ``outer`` (the fixed ring and crop border),
    in the order they are rasterised: the later one wins where two overlap.

    The face's triangles are the surface's own: a Delaunay triangulation of the target's mesh turned frontal, not of
    its projection. On a turned target the projection packs the far cheek, temple and eye corner into a sliver
    where Delaunay joined points that are not neighbours on the face (e.g. an eye corner to the jaw line); in a
    frontal source those triangles fold over and paste the source's eye, brow or hair as dark dots and a second
    contour on the far cheek (issue 17: 3.26 % of face-api-js amy1's face, turned 20°, was warped from folded
    triangles, 0.72 % now; ``benchmarks/turned_folds.py``). The region between the face oval and the ring is
    Delaunay's of those points as projected (drawn first, under the face). Face triangles the projection turns
    over (the far side past the silhouette) are drawn next, then the rest far to near, so what the target's
    camera sees of the face is what is warped. ``face``: the face's triangles (:func:`face_topology`) when known.
    """
    count = len(dest)
    canonical = frontal(target_3d)
    if face is None:
        face = mesh.triangulate(canonical[:, :2])
    around = np.concatenate([FACE_OVAL, count + np.arange(len(outer))])
    ring = around[mesh.triangulate(np.concatenate([dest[FACE_OVAL], outer]))]
    turned_over = np.sign(_winding(dest, face)) != np.sign(_winding(canonical[:, :2], face))
    depth = target_3d[face, 2].mean(1)
    if target_3d[NOSE_TIP, 2] > np.median(target_3d[:, 2]):
        depth = -depth  # larger depth = farther from the camera, whichever way the mesh's z points
    order = np.lexsort((-depth, ~turned_over))
    return np.concatenate([ring, face[order]]).astype(np.int32)


def _winding(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """Twice the signed area of each triangle of 2-D ``points`` (its sign: the winding)."""
    a, b, c = (points[triangles[:, k], :2] for k in range(3))
    return (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (c[:, 0] - a[:, 0]) * (b[:, 1] - a[:, 1])


def close_mouth(image: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, tuple[slice, slice] | None]:
    """The source photo with its mouth interior painted in lip colour (``points``: its mesh in image pixels), and
    the box it painted in (None: nothing painted, the photo itself returned).

    FaceMesh's inner-lip contour runs inside the teeth of a wide smile, so an open source mouth would leave teeth
    on the target's lips once squeezed into a closed target mouth; the target's own interior is kept anyway.
    Done once per source photo, on the mouth's box only.
    """
    height, width = image.shape[:2]
    mouth_width = float(np.ptp(points[LIPS_OUTER, 0]))
    pad = max(8, int(mouth_width / 6))
    x0, y0 = np.maximum(np.floor(points[LIPS_OUTER, :2].min(0)).astype(int) - pad, 0)
    x1, y1 = np.minimum(np.ceil(points[LIPS_OUTER, :2].max(0)).astype(int) + pad, [width, height])
    if x1 - x0 < 4 or y1 - y0 < 4:
        return image, None
    local = points[:, :2] - (x0, y0)
    side = max(x1 - x0, y1 - y0)
    inner = polygon_mask(local[LIPS_INNER], side)[:y1 - y0, :x1 - x0]
    lips = polygon_mask(local[LIPS_OUTER], side)[:y1 - y0, :x1 - x0] * (1.0 - inner)
    if inner.sum() < 4 or lips.sum() < 4:
        return image, None
    box = (slice(y0, y1), slice(x0, x1))
    colour = np.median(image[box][lips > 0.5], axis=0)
    grow = max(2, int(round(mouth_width / 30)))
    grown = feather(cv2.dilate(inner, np.ones((2 * grow + 1, 2 * grow + 1), np.uint8)), grow)[..., None]
    out = image.copy()
    out[box] = (image[box] * (1.0 - grown) + colour * grown + 0.5).astype(np.uint8)
    return out, box


CLOSING_RAMP = 0.04  # mouth openness (see mouth_openness) by which the source's exceeds the target's where its
# interior is painted closed fully (none where the target's mouth is as open as the source's)


def mouth_openness(points: np.ndarray) -> float:
    """The inner lips' area over the square of the mouth's width: about 0 for closed lips, 0.1–0.2 for a smile that
    shows teeth; independent of the face's size."""
    inner, width = points[LIPS_INNER, :2], float(np.ptp(points[LIPS_OUTER, 0]))
    area = 0.5 * abs(float(np.dot(inner[:, 0], np.roll(inner[:, 1], 1)) - np.dot(inner[:, 1], np.roll(inner[:, 0], 1))))
    return area / max(width * width, 1e-6)


def source_texture(payload: dict[str, Any], target_points: np.ndarray) -> np.ndarray:
    """The source photo the render samples for a target face: its mouth interior painted closed
    (:func:`close_mouth`) as far as the source's mouth is more open than the target's, by ``CLOSING_RAMP``.

    Why not always closed: the paint reaches past the inner lips (FaceMesh's inner contour runs inside the teeth of
    a smile) and flattens them, so a photo fused with itself came back with a doubled lower lip where its lips were
    parted at one corner (hard/same-person/jay_chou/01, 2.5 levels of mean change over the lower face against 1.3
    unpainted). Where the target's mouth is as open as the source's, the source's interior lands in the target's
    interior, which the target keeps anyway. A stream's frames move the weight with the target's mouth, smoothly."""
    closing = float(np.clip((payload["mouth_open"] - mouth_openness(target_points)) / CLOSING_RAMP, 0.0, 1.0))
    box = payload["mouth"]
    if closing >= 1.0 or box is None:
        return payload["closed"]
    if closing <= 0.0:
        return payload["image"]
    partly = payload["image"].copy()  # the two differ in the mouth's box only
    partly[box] = cv2.addWeighted(payload["closed"][box], closing, payload["image"][box], 1.0 - closing, 0.0)
    return partly


MIRROR_FROM_TURN = 30.0  # yaw between source and target below which the source shows what the target shows
# source yaw from which its far side's points are FaceMesh's guess: checked against the source's parsing, and the
# mirror fill decided by what the target shows whatever MIRROR_FROM_TURN says (see far_side_parsing, mirror_fill);
# a source turned SHOWN_FROM_TURN or more is checked when the target is turned UNCOVERED_BY more than it away from it
GUESSED_FROM_TURN = 20.0
SHOWN_FROM_TURN, UNCOVERED_BY = 10.0, 15.0
ON_FACE = 0.5  # share of face classes under a source point from which the photo shows it (see mirror_fill)
FORESHORTENED = (0.3, 0.6)  # source's visibility relative to the target's at which a vertex is fully / not at all
# filled by its mirror


def visibility(mesh_3d: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """How well a photo shows each vertex: the projected area of its ``triangles`` (the face's frontal
    triangulation) over their area in the face's own frontal frame, relative to the face's median, signed —
    negative where the triangles are turned over (back-facing). Areas are summed per vertex before the ratio, so a
    sliver of a triangle cannot swing it. No sign convention of the pose is needed."""
    canonical = (mesh_3d - mesh_3d.mean(0)) @ face_axes(mesh_3d)
    frontal = _winding(canonical, triangles)
    projected = _winding(mesh_3d, triangles) * np.sign(frontal)  # same corner order: the sign is the turn
    corners = triangles.ravel()
    ratio = np.bincount(corners, np.repeat(projected, 3), len(mesh_3d)) / np.maximum(
        np.bincount(corners, np.repeat(np.abs(frontal), 3), len(mesh_3d)), 1e-9)
    return ratio / np.median(ratio)


def mirror_partners(mesh_3d: np.ndarray) -> np.ndarray:
    """Each vertex's mirror partner across the face's mid-plane: the pairing (a permutation, its own inverse on a
    symmetric face) nearest to the face's reflection. Nearest neighbours alone paired a third of the vertices
    differently from face to face and sent lip vertices to the chin on smiling or turned faces (a pale lower lip once
    mirrored); one assignment over the 468 points costs 4–10 ms, paid only where the mirror is used."""
    canonical = (mesh_3d - mesh_3d.mean(0)) @ face_axes(mesh_3d)
    return linear_sum_assignment(cdist(canonical, canonical * np.array([-1.0, 1.0, 1.0])))[1]


def far_side_parsing(source: SourceFace, target: Face) -> FaceParsing | None:
    """The source's parsing in its own photo when its far side's points are FaceMesh's guess and the target shows
    that side (see :func:`mirror_fill`): the source turned ``GUESSED_FROM_TURN`` or more, or ``SHOWN_FROM_TURN`` or
    more with the target's yaw ``UNCOVERED_BY`` or more from it; else None without asking — a photo fusion parses the
    source on a thread of its own, and asking waits for it (the usual source, biden.jpg turned 12° onto a frontal
    720p portrait, waited 5 ms a fusion when every source turned 10° asked)."""
    pose, turn = source.face.pose, target.pose
    if source.parsing is None or pose is None or turn is None:
        return None
    if abs(pose.yaw) < GUESSED_FROM_TURN and (abs(pose.yaw) < SHOWN_FROM_TURN
                                              or abs(pose.yaw - turn.yaw) < UNCOVERED_BY):
        return None
    return source.parsing()


class SourceMirror(NamedTuple):
    """What the mirror fill needs of the source alone: its points in the face's own frame, their triangulation,
    each point's mirror partner and how well the photo shows it (:func:`visibility`)."""

    canonical: np.ndarray
    triangles: np.ndarray
    partners: np.ndarray
    seen: np.ndarray


def source_mirror(mesh_3d: np.ndarray) -> SourceMirror:
    """The source's half of :func:`mirror_fill` (~4 ms: the partners' assignment, a triangulation): a source turned
    ``GUESSED_FROM_TURN`` or more, whose fill is always decided, has it made once with its payload
    (:meth:`MeshFusionEngine.prepare_source`), on the thread that prepares the source while the target is analysed."""
    canonical = (mesh_3d - mesh_3d.mean(0)) @ face_axes(mesh_3d)
    triangles = mesh.triangulate(canonical[:, :2])
    return SourceMirror(canonical, triangles, mirror_partners(mesh_3d), visibility(mesh_3d, triangles))


def mirror_fill(source: Face, target: Face, parsed: FaceParsing | None = None,
                prepared: SourceMirror | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Each vertex's mirror partner and how much of its texture to take from there, for ``source`` fused onto
    ``target``; ``None`` when the two poses are close enough that the source shows what the target shows.
    ``prepared``: the source's half, made already (:func:`source_mirror`).

    A face is nearly symmetric, so a part the target shows well but the source shows foreshortened or hides (the
    source turned the other way) is better taken from its mirror partner, when the source shows that one better,
    than stretched from a sliver of pixels or from triangles turned over in the source (issue 17: amy1, turned
    +20°, onto profiles at −35…−47° warped 16.9–24.5 % of the target's face from folded triangles; the rule before
    only looked at the source's own turn past 30°). The weight follows the source's :func:`visibility` relative
    to the target's.

    A turned source has its far side's points checked against the photo (:func:`far_side_parsing` says when):
    ``parsed`` (the source's parsing in its own photo) tells which of them lie on its face; one it
    puts off the face (on the background or the hair beyond the far cheek) counts as not seen. Why: FaceMesh places
    a whole face even where the photo hides it, and on a turned source it put the far eye and brow partly on the dark
    background beyond the cheek, where its mesh is barely foreshortened, so the rule above kept them: dark streaks
    through the new far eye and brow (issue 17, hard/profile/01 and 03 — 45° and 30° — onto a selfie turned 11° the
    same way); on a source turned 14° its earring and the hair by its far cheek came out as smudges on the new cheek
    (hard/same-person/scarlett_johansson/03, jay_chou/01).
    """
    if source.pose is None or target.pose is None:
        return None
    if parsed is None and abs(source.pose.yaw - target.pose.yaw) <= MIRROR_FROM_TURN:
        return None
    assert source.landmarks is not None and target.landmarks is not None
    canonical, triangles, partners, seen = prepared or source_mirror(source.landmarks)
    if parsed is not None:
        seen = seen * np.clip(parsed.at(source.landmarks[:, :2], *FACE_CLASSES) / ON_FACE, 0.0, 1.0)
    relative = seen / np.maximum(visibility(target.landmarks, triangles), 0.1)
    low, high = FORESHORTENED
    weights = np.clip((high - relative) / (high - low), 0.0, 1.0)
    better = seen[partners] > seen  # only where the mirror side is the better-seen one
    weights = mirror_side(canonical[:, 0], weights * better) * better
    return (partners, weights) if weights.max() > 0.05 else None


def mirror_box(weight: np.ndarray, box: tuple[slice, slice]) -> tuple[slice, slice] | None:
    """The part of ``box`` (rows, columns of the crop) where the mirror ``weight`` table is above 1/512: the same
    pixels as the whole box, mirrored where the weight counts; None where it never does."""
    rows, columns = np.nonzero(weight[box] > 1.0 / 512)
    if not len(rows):
        return None
    top, left = box[0].start + rows.min(), box[1].start + columns.min()
    return slice(top, box[0].start + rows.max() + 1), slice(left, box[1].start + columns.max() + 1)


MIRROR_FEATHER = 0.25  # width of the mirror fill's seam, in units of the face's half-width


def mirror_side(across: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The per-vertex mirror ``weights`` made one side of a line across the face (``across``: each vertex's
    coordinate across the face): the step that best fits them, feathered over ``MIRROR_FEATHER`` of the half-width
    onto the side the source shows.

    Per vertex, the foreshortening rule took the mirror for some vertices of a band and not for their neighbours
    (hard/profile/01, turned 41°, onto a frontal face: in the band from ¼ to ½ of the half-width on the far side,
    median weight 0.54, tenth and ninetieth percentiles 0 and 1): patches of the far side's own pixels — its fringe
    over the far temple, a sliver of nose — showed between mirrored ones, with a seam around each (a dark bar on the
    forehead, a dark mirrored patch over one eye; benchmarks/mirror_seam.py). One boundary, placed where the step
    matches the weights best, leaves one soft seam; the feather lies on the seen side, so no fringe that reaches the
    boundary is half blended in. (:func:`mirror_fill` still leaves a vertex whose partner the source shows worse its
    own pixels: without that, frontal sources on the +41° target of benchmarks/turned_folds.py warped up to 4.7 %
    of its face from folded triangles instead of 3.1 %.)"""
    depth = across / max(np.abs(across).max(), 1e-9)
    depth = depth * np.sign(np.sum(weights * depth) or 1.0)  # growing towards the mirrored side
    order = np.argsort(depth)
    sorted_w = weights[order]
    # cost of the step at each position: mirror weight given up inside it, own texture given up outside it
    given_up_outside = np.concatenate([np.cumsum((1.0 - sorted_w)[::-1])[::-1], [0.0]])
    cut = int(np.argmin(np.concatenate([[0.0], np.cumsum(sorted_w)]) + given_up_outside))
    if cut == len(depth):
        return np.zeros_like(weights)
    edge = depth[order[cut]] if cut == 0 else (depth[order[cut - 1]] + depth[order[cut]]) / 2
    return np.clip((depth - edge) / MIRROR_FEATHER + 1.0, 0.0, 1.0)


CROP_OVERSAMPLE = 1.0  # crop pixels per photo pixel on the face: the photo's own resolution, neither less nor more
CROP_STEP = 16  # crop sides are multiples of this (the coarse grids divide them evenly)
MIN_CROP = 128


def face_crop_size(keypoints: np.ndarray, largest: int) -> int:
    """The side of the crop that holds the face at the photo's own resolution, within [``MIN_CROP``, ``largest``].

    A fixed 512 px crop rendered a 330 px face at half its resolution (self-fusion kept 0.15–0.33 of the skin's
    fine detail, issue 17) and a 100 px face at 1.7× (work spent on pixels the paste-back throws away)."""
    scale = np.sqrt(abs(np.linalg.det(align.similarity(keypoints, crop_template(largest))[:, :2])))
    native = largest / max(scale, 1e-6) * CROP_OVERSAMPLE
    return int(np.clip(np.ceil(native / CROP_STEP) * CROP_STEP, MIN_CROP, largest))


class PyramidParts:
    """The part of ``image`` that the ``size`` px crop (``to_crop``: image → crop) sees, at each level of its
    Gaussian pyramid up to ``coarsest`` (:meth:`level`): only the crop's part is filtered, a few hundred pixels a side,
    not the whole photo, and each level is halved from the one before, once: levels 1–3 each made from the photo
    again took up to six halvings where the chain takes three (issue 19; ~6 ms of a fusion from a phone-sized source)."""

    def __init__(self, image: np.ndarray, to_crop: np.ndarray, size: int, coarsest: int) -> None:
        corners = align.apply(cv2.invertAffineTransform(to_crop), np.array([[0, 0], [size, 0], [0, size], [size, size]],
                                                                            dtype=np.float64))
        margin = 4 << coarsest  # the cubic kernel's reach and the pyramid's border at the coarsest level, photo pixels
        x0, y0 = np.maximum(np.floor(corners.min(0)).astype(int) - margin, 0)
        x1, y1 = np.minimum(np.ceil(corners.max(0)).astype(int) + margin, [image.shape[1], image.shape[0]])
        self.image, self.to_crop, self.origin = image, to_crop, (int(x0), int(y0))
        self.parts = [image[y0:y1, x0:x1]]  # level n: the part halved n times

    def level(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Level ``n`` (0: the photo itself) and the image → crop matrix for it; a part too small to halve again
        stands for the levels past it."""
        if n < 1:
            return self.image, self.to_crop
        while len(self.parts) <= n and min(self.parts[-1].shape[:2]) >= 4:
            self.parts.append(cv2.pyrDown(self.parts[-1]))  # output pixel j sits on input pixel 2j
        level = min(n, len(self.parts) - 1)
        factor = float(1 << level)
        to_part = np.array([[factor, 0.0, self.origin[0]], [0.0, factor, self.origin[1]], [0.0, 0.0, 1.0]])
        return self.parts[level], self.to_crop @ to_part  # the part's pixels → the photo's → the crop's


def footprint_levels(table: tuple[np.ndarray, np.ndarray], scale: float) -> np.ndarray:
    """log2 of how many photo pixels (a side) one crop pixel's sample spans, on every ``MAP_STEP``-th pixel of
    ``table`` (crop → the source's crop coordinates; ``scale`` the source's crop pixels per photo pixel): 0 where
    the photo is sampled at its own resolution, 1 where it is squeezed 2×. From the table's Jacobian on that grid
    (the table is affine inside each triangle and was evaluated there)."""
    map_x, map_y = (m[::MAP_STEP, ::MAP_STEP] for m in table)
    dx_dr, dx_dc = np.gradient(map_x, MAP_STEP)
    dy_dr, dy_dc = np.gradient(map_y, MAP_STEP)
    area = np.abs(dx_dc * dy_dr - dx_dr * dy_dc) / (scale * scale)
    return (0.5 * np.log2(np.maximum(area, 1e-6))).astype(np.float32)


def source_warp(image: np.ndarray, to_crop: np.ndarray, table: tuple[np.ndarray, np.ndarray],
                size: int, box: tuple[slice, slice], pyramids: dict[int, PyramidParts] | None = None) -> np.ndarray:
    """The source photo warped onto the crop by ``table`` (:func:`photo_warp`); a source face ``FILTERED_FROM``× or
    more the crop's is sampled pixel by pixel from the pyramid level that holds as many photo pixels as the crop
    gives it (trilinear: two levels blended linearly, each further level warped only over the box where it counts).

    Why: the warp samples the photo once, bicubic, with no filter before it. biden.jpg's 318 px face onto a
    singer's 86 px face in a 640×360 video (3.1–3.7 photo pixels per crop pixel) aliased its skin into speckles: a
    mottled face, and dotted streaks where a turned target's far cheek squeezes the photo 2× more (issue 19's "skin
    looks mottled up close"). One level for the whole face left the streaks or softened the near cheek; filtering
    every source from 2× lowered the photo sets' skin sharpness ratio (knn_examples 0.89 → 0.85), where aliasing
    at 2–2.5× reads as the photo's grain (benchmarks/naturalness.py, docs/quality.md). Below ``FILTERED_FROM`` —
    a photo's usual case — one warp, as before.

    Only the crop's ``box`` (rows, columns) is computed, and returned: the crop's pixels outside the box that
    changes (:func:`~facefuse.fusion.blend.changed_box`) are never read (issue 19: the box is ~40 % of the crop;
    the same pixels inside it). ``pyramids``: the pyramids made so far for ``image`` in this crop, by their coarsest
    level — the mirror fill's warp of the same photo reuses the face's (a phone-sized source's ~3 ms)."""
    rows, columns = box
    scale = float(np.sqrt(abs(np.linalg.det(to_crop[:, :2]))))
    if scale * FILTERED_FROM > 1.0:
        return photo_warp(image, to_crop, (table[0][box], table[1][box]))
    levels = footprint_levels(table, scale)  # the level each pixel wants (mipmapping), on the MAP_STEP grid
    finest = max(0, int(np.floor(levels.min())))
    coarsest = finest + MAX_LEVELS - 1
    pyramid = (pyramids or {}).get(coarsest) or PyramidParts(image, to_crop, size, coarsest)
    if pyramids is not None:
        pyramids[coarsest] = pyramid
    out = photo_warp(*pyramid.level(finest), (table[0][box], table[1][box]))
    for level in range(finest + 1, finest + MAX_LEVELS):
        weight = levels - np.float32(level - 1)  # between two levels, linearly
        grid_rows, grid_columns = np.nonzero(weight > 0.05)
        if not len(grid_rows):
            break
        top, left = max(grid_rows.min() - 1, 0), max(grid_columns.min() - 1, 0)
        bottom, right = grid_rows.max() + 2, grid_columns.max() + 2
        # the level's own box, as before, then only its part inside ``box``
        y0, x0 = top * MAP_STEP, left * MAP_STEP
        y1, x1 = min(bottom * MAP_STEP, size), min(right * MAP_STEP, size)
        blend = cv2.resize(np.clip(weight[top:bottom, left:right], 0.0, 1.0), (x1 - x0, y1 - y0),
                           interpolation=cv2.INTER_LINEAR)
        iy0, iy1 = max(y0, rows.start), min(y1, rows.stop)
        ix0, ix1 = max(x0, columns.start), min(x1, columns.stop)
        if iy1 <= iy0 or ix1 <= ix0:
            continue
        part = np.s_[iy0:iy1, ix0:ix1]
        coarser = photo_warp(*pyramid.level(level), (table[0][part], table[1][part]))
        blend = np.ascontiguousarray(blend[iy0 - y0:iy1 - y0, ix0 - x0:ix1 - x0])
        inside = np.s_[iy0 - rows.start:iy1 - rows.start, ix0 - columns.start:ix1 - columns.start]
        out[inside] = cv2.blendLinear(coarser, out[inside], blend, 1.0 - blend)
    return out


def photo_warp(image: np.ndarray, to_crop: np.ndarray, table: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """``image`` resampled once (bicubic) onto the crop by remap ``table``, given in the coordinates of the aligned
    crop that ``to_crop`` (image → crop) defines."""
    inverse = cv2.invertAffineTransform(to_crop).astype(np.float32)
    map_x, map_y = table
    image_x = inverse[0, 0] * map_x + inverse[0, 1] * map_y + inverse[0, 2]
    image_y = inverse[1, 0] * map_x + inverse[1, 1] * map_y + inverse[1, 2]
    return cv2.remap(image, image_x, image_y, interpolation=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REFLECT101)


class MeshFusionEngine:
    name = "mesh"
    maps_source = True

    def prepare_source(self, image: np.ndarray, face: Face) -> SourceFace:
        assert face.landmarks is not None, "the analyzer gives every accepted face a mesh"
        closed, mouth = close_mouth(image, face.landmarks)
        turned = face.pose is not None and abs(face.pose.yaw) >= GUESSED_FROM_TURN
        return SourceFace(face, {"image": image, "closed": closed, "mouth": mouth, "mesh": face.landmarks,
                                 "mouth_open": mouth_openness(face.landmarks),
                                 "mirror": source_mirror(face.landmarks) if turned else None})

    def crop_matrix(self, face: Face, options: FusionOptions) -> tuple[np.ndarray, int]:
        """The face-sized crop (:func:`face_crop_size`): the photo's own resolution, ``crop_size`` at most."""
        size = face_crop_size(face.keypoints, options.crop_size)
        return align.similarity(face.keypoints, crop_template(size)), size

    def render(self, source: SourceFace, target_crop: np.ndarray, to_crop: np.ndarray, target_face: Face,
               options: FusionOptions, photo: np.ndarray | None = None,
               carry: StreamCarry | None = None) -> RenderedFace:
        assert target_face.landmarks is not None
        size = target_crop.shape[0]
        profile, feature = options.profile_degree / 100.0, options.feature_degree / 100.0
        target_3d = align.apply(to_crop, target_face.landmarks)
        target_pts = target_3d[:, :2]

        source_mesh = source.payload["mesh"]
        shape_3d = reposed_shape(source_mesh, target_face.landmarks)
        # scaled and placed on the target by the same rigid points: a smiling source's wider jaw must not shrink its
        # eyes and nose onto the target's
        shape_3d = align.apply(align.similarity(shape_3d[RIGID_POINTS, :2], target_pts[RIGID_POINTS]), shape_3d)
        shape = shape_3d[:, :2]
        source_to_crop = align.similarity(source_mesh[:, :2], target_pts)
        source_3d = align.apply(source_to_crop, source_mesh)
        source_pts = source_3d[:, :2]

        ring_t = shrink(target_pts[FACE_OVAL], RING_SCALE)
        ring_s = shrink(source_pts[FACE_OVAL], RING_SCALE)
        fixed = border_points(size)
        dest = destination_geometry(target_pts, shape, np.concatenate([ring_t, fixed]), profile, feature)
        dst_all = np.concatenate([dest, ring_t, fixed])
        topology = None if carry is None else carry.topology(lambda: face_topology(target_3d))
        triangles = surface_triangles(target_3d, dest, np.concatenate([ring_t, fixed]), topology)
        sources = [np.concatenate([target_pts, ring_t, fixed]), np.concatenate([source_pts, ring_s, fixed])]
        parsed = far_side_parsing(source, target_face)
        prepared = source.payload.get("mirror")
        mirror = mirror_fill(source.face, target_face, parsed, prepared) if carry is None else \
            carry.mirror(lambda: mirror_fill(source.face, target_face, parsed, prepared))
        if mirror is not None:
            partners, weights = mirror
            # the mirrored texture, and the per-vertex weights interpolated over the triangles by the same affine
            # maps (a "point set" whose x is the weight): one extra table each, no second rasterisation
            sources.append(np.concatenate([source_pts[partners], ring_s, fixed]))
            sources.append(np.concatenate([np.column_stack([weights, np.zeros_like(weights)]),
                                           np.zeros((len(ring_s) + len(fixed), 2))]))
        # the target, the source and its mirror are photos' points (the mirror's weights are not): a node whose
        # reading falls off its triangle in one of them is placed again (mesh.placed_nodes: a blot otherwise)
        ids = mesh.rasterize(dst_all, triangles, (size, size), MAP_STEP)
        tables, nodes = mesh.remap_tables(ids, sources, dst_all, triangles, MAP_STEP, photos=min(len(sources), 3))
        # the target's pixels move up to the ring, so the region that may change reaches half way to it; the
        # source's face covers the whole oval: the target's jaw line and cheeks reshaped, not its skin
        mask, keep, region = face_masks(dest, size, feature, region_scale=(1 + RING_SCALE) / 2, region_feather=2,
                                        mask_scale=MASK_SCALE)
        # both photos are resampled once, straight from their own pixels (crop tables composed with the crop's
        # inverse alignment), bicubic: an aligned crop warped again lost a third of the skin's fine detail per
        # resampling; without the target ``photo`` its aligned crop is remapped. The reshaped target is only ever
        # read inside the changed region's box (relight, blend, make-up zones), so only that box is resampled
        # (the same pixels there; 5.6 → 2.3 CPU ms at 720p); the new face is needed whole (the segmenter sees it)
        # the new face likewise: only that box is read (relight, blend, eyes, make-up zones; the segmenter sees the
        # source parsed in its own photo), so outside it the crop holds the target's pixels
        warped_target = target_crop.copy()
        box = changed_box(region)
        if box is not None:
            table = (tables[0][0][box], tables[0][1][box])
            warped_target[box] = mesh.warp(target_crop, *table) if photo is None else photo_warp(photo, to_crop, table)
        else:
            box = np.s_[0:size, 0:size]
        texture = source_texture(source.payload, target_face.landmarks)
        warped_source = warped_target.copy()
        pyramids: dict[int, PyramidParts] = {}  # the texture's, shared by its two warps
        warped_source[box] = source_warp(texture, source_to_crop, tables[1], size, box, pyramids)
        if mirror is not None:
            # only where the mirror has weight (the far side: a third of the box or so)
            taken = mirror_box(tables[3][0], box)
            if taken is not None:
                mirror_texture = source_warp(texture, source_to_crop, tables[2], size, taken, pyramids)
                weight = np.ascontiguousarray(np.clip(tables[3][0][taken], 0.0, 1.0))
                warped_source[taken] = cv2.blendLinear(mirror_texture, warped_source[taken], weight, 1.0 - weight)
        skin = skin_mask(dest, size)
        eyes = source_eyes(options, warped_source, warped_target, dest, skin, carry)
        if eyes.source:
            keep = kept_interior(dest, size, eyes=False)
            if not eyes.gazes_agree:
                warped_source = gaze_moved(warped_source, warped_target, dest)
        if options.makeup == "target":
            if carry is None:
                warped_source = tone_makeup(warped_source, warped_target, dest, skin)[0]
            else:
                warped_source = carry.toning(size, lambda: tone_makeup(warped_source, warped_target, dest, skin),
                                             lambda tonings: apply_toning(warped_source, tonings))

        normals = None
        if options.light == "shape":
            # the new face's surface: the source's 3-D shape in the target's pose, as far as the degrees move it
            new_3d = target_3d + feature * (shape_3d - target_3d)
            face_tris = triangles[np.all(triangles < len(dest), axis=1)]
            vertex = [vertex_normals(points, face_tris) for points in (new_3d, source_3d, target_3d)]
            if mirror is not None:
                vertex[1] = mirrored(vertex[1], face_axes(source_3d), *mirror)
            normals = normal_maps(nodes, vertex)
        source_map = SourceMap(tables[1], source_to_crop) if mirror is None else \
            SourceMap(tables[1], source_to_crop, tables[2], tables[3][0])
        return RenderedFace(crop=warped_source, target_crop=warped_target, mask=mask, matrix=to_crop,
                            keep_target=keep, region=region, skin=skin, normals=normals, points=dest,
                            source_map=source_map)
