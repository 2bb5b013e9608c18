"""Named FaceMesh vertex groups (MediaPipe's published contour lists) and the masks drawn from them."""

from __future__ import annotations

import cv2
import numpy as np

FACE_OVAL = np.array([10, 338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377, 152,
                      148, 176, 149, 150, 136, 172, 58, 132, 93, 234, 127, 162, 21, 54, 103, 67, 109])
LIPS_OUTER = np.array([61, 146, 91, 181, 84, 17, 314, 405, 321, 375, 291, 409, 270, 269, 267, 0, 37, 39, 40, 185])
LIPS_INNER = np.array([78, 95, 88, 178, 87, 14, 317, 402, 318, 324, 308, 415, 310, 311, 312, 13, 82, 81, 80, 191])
RIGHT_EYE = np.array([33, 7, 163, 144, 145, 153, 154, 155, 133, 173, 157, 158, 159, 160, 161, 246])
LEFT_EYE = np.array([263, 249, 390, 373, 374, 380, 381, 382, 362, 398, 384, 385, 386, 387, 388, 466])
RIGHT_BROW = np.array([46, 53, 52, 65, 55, 70, 63, 105, 66, 107])
LEFT_BROW = np.array([276, 283, 282, 295, 285, 300, 293, 334, 296, 336])

FEATURE_GROWTH = 0.04  # of the face width: how far lashes, eye shadow and lip edges reach beyond the features' points

MOUTH_GROUP = np.union1d(LIPS_OUTER, LIPS_INNER)
# the face oval below the nose tip on a level face, from below one ear round the chin to below the other: the jaw
# line, which an open mouth or a smile moves
JAW_LINE = FACE_OVAL[10:27]
# the 468 points whose layout a change of expression leaves nearly alone: all but the lips and the jaw line
RIGID_POINTS = np.setdiff1d(np.arange(468), np.union1d(MOUTH_GROUP, JAW_LINE))
# Points whose layout is identity rather than expression: eye corners, brows, nose bridge, tip and wings.
IDENTITY_POINTS = np.concatenate([[33, 133, 362, 263], RIGHT_BROW, LEFT_BROW,
                                  [168, 6, 197, 195, 5, 4, 1, 19, 94, 98, 327, 48, 278, 64, 294]])


def polygon_mask(points: np.ndarray, size: int | tuple[int, int], *more: np.ndarray) -> np.ndarray:
    """Filled polygon (float32 0/1) of ``points`` given in crop pixels, rasterised with sub-pixel precision; with
    ``more``, the union of several polygons that do not touch (eyes, mouth) drawn in one pass. ``size``: the
    crop's side, or (height, width) of a part of it."""
    mask = np.zeros((size, size) if np.ndim(size) == 0 else size, np.uint8)
    cv2.fillPoly(mask, [np.round(p[:, :2] * 16).astype(np.int32) for p in (points, *more)], 255,
                 lineType=cv2.LINE_AA, shift=4)
    return mask.astype(np.float32) / 255.0


def feather(mask: np.ndarray, radius: float) -> np.ndarray:
    """Soft edge of about ``radius`` pixels, used for every blend so no seam is a hard line (stack blur: a
    Gaussian look-alike whose cost does not grow with the radius)."""
    if radius <= 0:
        return mask
    k = int(radius * 2) | 1
    return cv2.stackBlur(mask, (k, k))


def feathered_polygons(size: int, radius: float, *polygons: np.ndarray) -> np.ndarray:
    """``feather(polygon_mask(polygons[0], size, *polygons[1:]), radius)``, computed only in the polygons' box grown
    by the feather's reach (everything beyond is 0 either way): the same pixels for a fraction of the work — a
    face oval covers ~40 % of its crop, the mouth and eyes far less (issue 19: the render's masks, per frame)."""
    reach = (int(radius * 2) | 1) // 2 + 2 if radius > 0 else 1
    corners = np.concatenate([p[:, :2] for p in polygons])
    x0, y0 = np.maximum(np.floor(corners.min(0)).astype(int) - reach, 0)
    x1, y1 = np.minimum(np.ceil(corners.max(0)).astype(int) + reach + 1, size)
    out = np.zeros((size, size), np.float32)
    if x1 <= x0 or y1 <= y0:
        return out
    offset = np.array([x0, y0], np.float64)
    drawn = polygon_mask(polygons[0][:, :2] - offset, (y1 - y0, x1 - x0), *(p[:, :2] - offset for p in polygons[1:]))
    out[y0:y1, x0:x1] = feather(drawn, radius)
    return out


def shrink(points: np.ndarray, factor: float, centre: np.ndarray | None = None) -> np.ndarray:
    """Points pulled toward ``centre`` (default: their mean) by ``factor`` (< 1 shrinks, > 1 grows)."""
    centre = points[:, :2].mean(0) if centre is None else centre
    return centre + (points[:, :2] - centre) * factor


def skin_mask(points: np.ndarray, size: int) -> np.ndarray:
    """Bare skin of a face mesh in crop pixels (float32 0/1): the oval without brows, eyes and lips, each feature
    grown by ~4 % of the face width so lashes, eye shadow and lip edges do not count as skin. Drawn in the mesh's
    box grown by the features' growth only: the same pixels for about half the work on a face-sized crop."""
    reach = int(FEATURE_GROWTH * float(np.ptp(points[FACE_OVAL, 0]))) + 2
    x0, y0 = np.maximum(np.floor(points[:, :2].min(0)).astype(int) - reach, 0)
    x1, y1 = np.minimum(np.ceil(points[:, :2].max(0)).astype(int) + reach + 1, size)
    out = np.zeros((size, size), np.float32)
    if x1 <= x0 or y1 <= y0:
        return out
    offset = np.array([x0, y0], np.float64)
    local = points[:, :2] - offset
    out[y0:y1, x0:x1] = polygon_mask(shrink(points[FACE_OVAL], 0.92) - offset, (y1 - y0, x1 - x0)) * (
        1.0 - feature_zone(local, (y1 - y0, x1 - x0)))
    return out


def feature_zone(points: np.ndarray, size: int | tuple[int, int], grow_fraction: float = FEATURE_GROWTH
                 ) -> np.ndarray:
    """The brows, eyes and lips of a face mesh in crop pixels (uint8 0/1), each grown by ``grow_fraction`` of the
    face width. ``size``: the crop's side, or (height, width) of a part of it."""
    grow = max(1, int(grow_fraction * float(np.ptp(points[FACE_OVAL, 0]))))
    features = np.zeros((size, size) if np.ndim(size) == 0 else size, np.uint8)
    for group in (RIGHT_BROW, LEFT_BROW, RIGHT_EYE, LEFT_EYE, LIPS_OUTER):
        hull = cv2.convexHull(np.round(points[group, :2]).astype(np.int32))
        cv2.fillConvexPoly(features, hull, 1)
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * grow + 1, 2 * grow + 1))
    return cv2.dilate(features, kernel)


def face_masks(points: np.ndarray, size: int, feature: float, region_scale: float = 1.0,
               region_feather: float = 1.0, mask_scale: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mask, keep_target, region) of a rendered face, in crop pixels, from its 468 points in the crop — the one
    definition every engine uses.

    ``mask``: the face oval (shrunk by ``mask_scale``) feathered, scaled by ``feature`` (0–1); ``keep_target``: the eyes
    and mouth interior, which stay the target's (gaze, teeth); ``region``: every pixel that may change — the oval
    (widened by ``region_scale`` for an engine that also moves the target's own pixels around the face) feathered
    by ``region_feather`` edges, and never less than the mask.
    """
    edge = size / 40.0
    mask = feathered_polygons(size, edge, shrink(points[FACE_OVAL], mask_scale))
    region = feathered_polygons(size, edge * region_feather, shrink(points[FACE_OVAL], region_scale))
    return mask * feature, kept_interior(points, size), np.maximum(region, mask)


def kept_interior(points: np.ndarray, size: int, eyes: bool = True) -> np.ndarray:
    """What stays the target's inside the face (feathered): its mouth interior (teeth, tongue) and, with ``eyes``,
    its eyes' openings (:mod:`facefuse.fusion.eyes` says when the source's eyes are used instead)."""
    openings = (points[LEFT_EYE], points[RIGHT_EYE]) if eyes else ()
    return feathered_polygons(size, size / 160.0, points[LIPS_INNER], *openings)
