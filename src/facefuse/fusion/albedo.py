"""Make-up is albedo, not identity: the source's lipstick and eye shadow toned to the target's lips and eyelids.

Why: a woman's red lipstick and smoky eye shadow landed on a bearded man's mouth and eyes (issue 17). The lips'
and eyelids' *shape* is the source's (the geometry moves them), and so is their fine texture and their lightness
(the eye sockets' shading is identity: toning lightness too cost 3.6 points of MobileFaceNet top-1 on face-api-js
cross pairs, 75.0 % against 78.6 %); only their broad colour — what lipstick and eye shadow change most — is
taken from the target's own lips and eyelids, which the engine has already warped onto the same geometry. ``FusionOptions.makeup = "source"`` keeps the source's make-up (a
make-up try-on wants exactly that).

The brows get the same colour-only toning, on their own and only where they are redder than their skin (natural hair
never is): their shape, darkness and natural colour are identity, but a cast is the source's light, not the person (jay_chou's studio portrait under a violet light gave yang_mi blue-purple
brows, a* +16 / b* −9 after the colour match: the skin-fitted match moves skin, not the cast on dark hair).
"""

from __future__ import annotations

from typing import NamedTuple

import cv2
import numpy as np

from ..geometry.regions import (FACE_OVAL, LEFT_BROW, LEFT_EYE, LIPS_INNER, LIPS_OUTER, RIGHT_BROW, RIGHT_EYE, feather,
                                polygon_mask)
from .relight import skin_shading

MAKEUP_SIGMA_FRACTION = 0.03  # of the face width: colour broader than this is make-up; finer is the lips' texture
LIP_GROWTH = 0.015  # of the face width
LOCAL_SKIN_FRACTION = 0.08  # of the face width: the skin a zone's colour is measured against
SHIFT_LIMIT = 40.0  # 8-bit Lab levels: the most toning may move a pixel's colour
CAST_RED = 4.0  # Lab a* levels above the skin's from which brows are toned in full (see ``tone_zone``)
MIN_EXCESS = 1.0  # Lab levels: a make-up zone whose broad colour is this close to its skin's is left as it is


ZONE_POINTS = np.concatenate([LIPS_OUTER, RIGHT_EYE, RIGHT_BROW, LEFT_EYE, LEFT_BROW])


def makeup_zones(points: np.ndarray, size: int) -> np.ndarray:
    """Soft mask (float32 0–1, crop pixels) of the lips and the eyelids between each eye and its brow, without the
    eyes and brows themselves (those are identity and stay the source's).

    Drawn on the zones' box only (grown by every dilation and the feather, so nothing reaches its edge), then put
    in the crop: the same pixels for about a third of the full-crop work."""
    width = float(np.ptp(points[FACE_OVAL, 0]))
    lip_grow = max(1, int(LIP_GROWTH * width))  # lipstick runs a little past the mesh's lip contour
    brow_grow = max(1, int(0.02 * width))
    radius = max(1.0, 0.01 * width)
    margin = lip_grow + brow_grow + int(radius * 2) + 2
    x0, y0 = np.maximum(np.floor(points[ZONE_POINTS, :2].min(0)).astype(int) - margin, 0)
    x1, y1 = np.minimum(np.ceil(points[ZONE_POINTS, :2].max(0)).astype(int) + margin + 1, size)
    zones = np.zeros((size, size), np.float32)
    if x1 <= x0 or y1 <= y0:
        return zones
    local = points[:, :2] - (x0, y0)  # integer shift: the same rasterisation as in the whole crop
    shape = (int(y1 - y0), int(x1 - x0))
    lips = cv2.dilate(polygon_mask(local[LIPS_OUTER], shape), np.ones((2 * lip_grow + 1, 2 * lip_grow + 1), np.uint8))
    lips = lips * (1.0 - polygon_mask(local[LIPS_INNER], shape))
    lids = np.zeros(shape, np.float32)
    for eye, brow in ((RIGHT_EYE, RIGHT_BROW), (LEFT_EYE, LEFT_BROW)):
        hull = cv2.convexHull(np.round(np.concatenate([points[eye, :2], points[brow, :2]])).astype(np.int32) - (x0, y0))
        zone = np.zeros(shape, np.uint8)
        cv2.fillConvexPoly(zone, hull, 1)
        brow_mask = cv2.dilate(polygon_mask(local[brow], shape),
                               np.ones((2 * brow_grow + 1, 2 * brow_grow + 1), np.uint8))
        lids = np.maximum(lids, zone * (1.0 - brow_mask) * (1.0 - polygon_mask(local[eye], shape)))
    zones[y0:y1, x0:x1] = feather(np.maximum(lips, lids), radius)
    return zones


def brow_zones(points: np.ndarray, size: int) -> np.ndarray:
    """Soft mask (float32 0–1, crop pixels) of both brows, grown as :func:`makeup_zones` cuts them out; drawn on
    the brows' box only, like the make-up zones."""
    width = float(np.ptp(points[FACE_OVAL, 0]))
    grow, radius = max(1, int(0.02 * width)), max(1.0, 0.01 * width)
    margin = grow + int(radius * 2) + 2
    brows = np.concatenate([RIGHT_BROW, LEFT_BROW])
    x0, y0 = np.maximum(np.floor(points[brows, :2].min(0)).astype(int) - margin, 0)
    x1, y1 = np.minimum(np.ceil(points[brows, :2].max(0)).astype(int) + margin + 1, size)
    zones = np.zeros((size, size), np.float32)
    if x1 <= x0 or y1 <= y0:
        return zones
    local = points[:, :2] - (x0, y0)
    drawn = polygon_mask(local[RIGHT_BROW], (int(y1 - y0), int(x1 - x0)), local[LEFT_BROW])
    zones[y0:y1, x0:x1] = feather(cv2.dilate(drawn, np.ones((2 * grow + 1, 2 * grow + 1), np.uint8)), radius)
    return zones


class ZoneToning(NamedTuple):
    """One zone's toning as measured, on the crop box ``sub``: for the brows a Lab offset per pixel (``offset``);
    for the make-up zones the skin's a*, b* per pixel and the factor each pixel's colour over it is scaled by."""

    sub: tuple[slice, slice]
    offset: np.ndarray | None
    skin_ab: np.ndarray | None = None
    scale_ab: np.ndarray | None = None


def tone_makeup(face: np.ndarray, target: np.ndarray, points: np.ndarray, skin: np.ndarray
                ) -> tuple[np.ndarray, tuple[ZoneToning, ...]]:
    """The lips and eyelids, then the brows, each toned by :func:`tone_zone` (colour only); and the tonings as
    measured, which :func:`apply_toning` repeats on a stream's next frames (a video or live track carries them,
    :mod:`facefuse.video.turns`: the zones' colours are the same person's from frame to frame)."""
    size = face.shape[0]
    tonings = []
    for zones, hairs in ((makeup_zones(points, size), False), (brow_zones(points, size), True)):
        toning = tone_zone(face, target, points, skin, zones, hairs)
        if toning is not None:
            face = apply_toning(face, (toning,))
            tonings.append(toning)
    return face, tuple(tonings)


def apply_toning(face: np.ndarray, tonings: tuple[ZoneToning, ...]) -> np.ndarray:
    """``face`` with each zone's Lab offset added (in order), its pixels outside the boxes untouched; in a make-up
    zone each pixel's colour over its skin's is scaled instead."""
    for sub, offset, skin_ab, scale_ab in tonings:
        face_lab = cv2.cvtColor(face[sub], cv2.COLOR_RGB2Lab).astype(np.float32)
        if offset is not None:
            face_lab += offset
        else:
            ab = face_lab[..., 1:]  # a view: scaled in place about the skin's colour
            ab -= skin_ab
            ab *= scale_ab
            ab += skin_ab
        toned = np.clip(face_lab + 0.5, 0, 255).astype(np.uint8)
        face = face.copy()
        face[sub] = cv2.cvtColor(toned, cv2.COLOR_Lab2RGB)
    return face


def excess_scale(excess: np.ndarray, shift: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per pixel and channel, the factor a pixel's colour over its skin's is scaled by so that the zone's broad
    ``excess`` (its make-up over its skin) moves by ``shift``: (excess + shift) ÷ excess, within 0–1 (make-up is only
    ever toned down, never turned into its opposite), 1 where the zone has no colour of its own to speak of;
    feathered by the zone's ``weight``.

    Why a factor and not the shift itself: the shift is one broad field (σ = 3 % of the face width) over a zone
    grown past the lipstick, and added to every pixel it turned the bare skin in the lips' rim, the teeth and the
    lipstick's white highlights green-cyan (a red-lipped source onto an open-mouthed target: a cyan ring round the
    new lips, cyan specks on them). Scaled, a pixel with less make-up moves less and one with none keeps its colour;
    the lips' mean colour is toned as much as before (``tests/test_naturalness.py``)."""
    ratio = np.divide(excess + shift, excess, out=np.ones_like(excess), where=np.abs(excess) > MIN_EXCESS)
    np.clip(ratio, 0.0, 1.0, out=ratio)
    ratio -= 1.0
    ratio *= weight[..., None]
    ratio += 1.0
    return ratio


def _hair_share(lab: np.ndarray, skin_lab: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """How much of each pixel is dark hair rather than the skin between the hairs (0–1), from its lightness between
    the skin's nearby and the zone's darkest: a brow's colour is its hairs', and the skin in and around it must not
    take their shift (a skin-wide shift turned the skin round yang_mi's new brows olive)."""
    darkest = np.percentile(lab[..., 0][inside > 0], 5) if inside.any() else 0.0
    span = np.maximum(skin_lab[..., 0] - darkest, 8.0)
    return np.clip((skin_lab[..., 0] - lab[..., 0]) / span, 0.0, 1.0)


def tone_zone(face: np.ndarray, target: np.ndarray, points: np.ndarray, skin: np.ndarray,
              zones: np.ndarray, hairs: bool = False) -> ZoneToning | None:
    """The toning (None: nothing to tone) that sets ``face``'s (uint8 RGB, in the destination geometry ``points``) broad Lab of its make-up zones set to
    ``target``'s (the target warped onto the same geometry) *relative to each one's skin nearby* (``skin``: the bare
    skin mask, averaged at ``LOCAL_SKIN_FRACTION`` of the face width): the colour match that follows moves the skin
    to the target's and the lips and lids follow it there — toning to the target's absolute colour would shift them
    twice (cyan lips on a grey photo) — and a side light's shadow on one eyelid is not taken for eye shadow.
    With ``hairs`` (the brows) each pixel counts, and is toned, by its share of hair (:func:`_hair_share`)."""
    box = cv2.boundingRect((zones > 0.01).astype(np.uint8))
    if box[2] < 4 or box[3] < 4:
        return None
    x, y, w, h = box
    sub = (slice(y, y + h), slice(x, x + w))
    weight = zones[sub]
    width = float(np.ptp(points[FACE_OVAL, 0]))
    face_lab = cv2.cvtColor(face[sub], cv2.COLOR_RGB2Lab).astype(np.float32)
    inside = (weight > 0.5).astype(np.float32)
    around = skin[sub].astype(np.float32)

    def makeup(lab: np.ndarray) -> tuple[np.ndarray, np.ndarray | float, np.ndarray]:
        """The zones' broad colour over the skin's around them; how much of each pixel it is about; the skin's
        colour."""
        skin_lab = skin_shading(lab, around, LOCAL_SKIN_FRACTION * width)
        share = _hair_share(lab, skin_lab, inside) if hairs else 1.0
        return (skin_shading(lab, inside * share, MAKEUP_SIGMA_FRACTION * width, robust=False) - skin_lab, share,
                skin_lab)

    own, share, skin = makeup(face_lab)
    cast: np.ndarray | float = 1.0
    if hairs:
        # hair is less red than the skin it grows from (Obama's brows: a* −12, b* −19 against his skin): brows
        # redder than their skin (jay_chou's under a violet light: a* +10.7, b* −19) wear the light's cast, and only
        # those are toned; toning natural brows too cost 0.018 of MobileFaceNet cosine to the source (obama → biden)
        cast = np.clip(own[..., 1:2] / CAST_RED, 0.0, 1.0)
        if not np.any(cast[..., 0] * weight * share > 0):
            return None  # natural brows (the common case): nothing to tone, and no Lab round trip of their pixels
    theirs = makeup(cv2.cvtColor(target[sub], cv2.COLOR_RGB2Lab).astype(np.float32))[0]
    # make-up is only ever toned down: where the target's zone stands out more than the source's (its own lipstick,
    # a strand of hair across a lid) the source's colour stays
    shift = np.clip(np.where(np.abs(theirs) < np.abs(own), theirs, own) - own, -SHIFT_LIMIT, SHIFT_LIMIT)
    shift[..., 0] = 0.0  # colour only: toning the lids' lightness too cost 3.6 points of identity (eye sockets)
    shift *= cast
    if hairs:  # each brow pixel toned by its share of hair, by a coloured light's cast on it
        return ZoneToning(sub, shift * (weight * share)[..., None])
    return ZoneToning(sub, None, skin[..., 1:], excess_scale(own[..., 1:], shift[..., 1:], weight))
