"""Whose eyes the new face shows: the source's (its iris, sclera and the eye's own shape inside the lids), or the
target's — and, where the source looks elsewhere than the target, the source's eyes with their irises moved to the
target's gaze.

Why not always the target's, as before: the eyes are a large part of a likeness, and keeping the target's irises
cost identity on every set (issue 17; ``benchmarks/naturalness.py --eyes``, BENCHMARKS.md "Naturalness, eyes=…").
Why not the source's as they are: a source looking aside would turn the target's gaze, and gaze is the target's
expression. So by default (``eyes="auto"``) the source's eyes are used where both eyes are open; where the irises —
found as the darkest band of each eye's opening in the two crops warped onto the same geometry — sit more than
``GAZE_AGREEMENT`` of the eye's width apart (on average over the two eyes), each source iris is moved along its
opening to where the target's sits (:func:`gaze_moved`): the source's eye, the target's gaze. (Until round 3's
twelfth stop the target's eyes stayed there: on a singer who looks aside, a third of the fused frames were closer
to the singer than to the source.) A stream decides once per group of frames, and a face's gaze check keeps its
last answer until the shift is ``GAZE_HYSTERESIS`` past the limit the other way (:func:`choose_eyes`), so a
measurement near the limit cannot switch between moved and unmoved irises back and forth.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from ..geometry.regions import LEFT_EYE, RIGHT_EYE, polygon_mask
from .albedo import CAST_RED
from .engine import FusionOptions, StreamCarry

GAZE_AGREEMENT = 0.10  # of the eye's width: the most the irises may shift (mean of both eyes) for the source's eyes
# in a stream, how far past GAZE_AGREEMENT the shift must go to change a face's answer: on the portrait clips of
# benchmarks/video.py the shift read 0.06–0.09 and once 0.104, which swapped the eyes for three frames (issue 19)
GAZE_HYSTERESIS = 0.04
OPEN_EYE = 0.08  # an eye's opening (its contour's area ÷ width²) below which it counts as closed (the lids kept)
IRIS_WIDTH = 0.4  # an iris's visible width as a share of the eye's, corner to corner
EYE_CORNERS = {"right": (33, 133), "left": (263, 362)}  # FaceMesh's outer and inner corner of each eye
WHITES_SHARE = 0.4  # the brightest share of the eyes' openings taken as their whites
MOVABLE_EYE = 12  # crop pixels, corner to corner: the narrowest eyes whose irises are moved to the target's gaze


def iris_position(grey: np.ndarray, eye: np.ndarray, width: float) -> float | None:
    """Where along the eye's opening (``eye``: its contour in ``grey``'s pixels; ``width``: corner to corner) the
    iris sits, in crop pixels along x (the crop is levelled on the eyes): the centre of the darkest band of the
    opening's columns, as wide as an iris (``IRIS_WIDTH``). Columns are summed, so the lash line and the lid's
    shadow, which run along the whole opening, weigh alike everywhere and do not move the peak."""
    x0, y0 = np.maximum(np.floor(eye.min(0)).astype(int), 0)
    x1, y1 = np.minimum(np.ceil(eye.max(0)).astype(int) + 1, (grey.shape[1], grey.shape[0]))
    if x1 - x0 < 4 or y1 - y0 < 2:
        return None
    inside = polygon_mask(eye - (x0, y0), (y1 - y0, x1 - x0)) > 0.5
    values = grey[y0:y1, x0:x1].astype(np.float32)
    if inside.sum() < 8:
        return None
    darkness = np.where(inside, np.maximum(np.percentile(values[inside], 80) - values, 0.0), 0.0).sum(axis=0)
    band = max(1, int(round(IRIS_WIDTH * width)))
    profile = np.convolve(darkness, np.ones(band), mode="same")
    return float(x0 + np.argmax(profile)) if profile.max() > 0 else None


def source_eyes(options: FusionOptions, new_face: np.ndarray, target: np.ndarray, points: np.ndarray,
                skin: np.ndarray, carry: StreamCarry | None = None) -> EyesChoice:
    """Whose eyes the new face shows, by ``options.eyes``; "auto" asks :func:`choose_eyes` (``skin``: the bare-skin
    mask of ``points``); a stream asks on a group's first frame, with the group before's choice, and its other
    frames follow. "source" shows the source's eyes as they are (its gaze too), "target" the target's."""
    if options.eyes != "auto":
        return EyesChoice(True, options.eyes == "source")
    decide = lambda earlier=None: choose_eyes(new_face, target, points, skin, earlier)  # noqa: E731
    return decide() if carry is None else carry.eyes(decide)


@dataclass(frozen=True)
class EyesChoice:
    """One frame's (a stream: one group's) answers: whether the two gazes agree, and whether the source's eyes are
    shown (they need both eyes open and no coloured light's cast on the source's whites); shown where the gazes do
    not agree, their irises are moved to the target's (:func:`gaze_moved`)."""

    gazes_agree: bool
    source: bool


def choose_eyes(new_face: np.ndarray, target: np.ndarray, points: np.ndarray, skin: np.ndarray,
                earlier: EyesChoice | None = None) -> EyesChoice:
    """The eyes for ``new_face`` on ``target`` (crops on one geometry, ``points``); ``earlier``: the stream's choice
    for the frames before, whose gaze answer holds until the shift is ``GAZE_HYSTERESIS`` past the limit the
    other way, and holds through closed eyes (a blink says nothing about the gaze)."""
    shift = gaze_shift(new_face, target, points)
    if shift is None:
        return EyesChoice(earlier is not None and earlier.gazes_agree, False)
    limit = GAZE_AGREEMENT
    if earlier is not None:
        limit += GAZE_HYSTERESIS if earlier.gazes_agree else -GAZE_HYSTERESIS
    agree = abs(shift) <= limit
    return EyesChoice(agree, (agree or movable(points)) and not whites_cast(new_face, points, skin))


def movable(points: np.ndarray) -> bool:
    """Whether both eyes are wide enough in the crop (``MOVABLE_EYE`` px) for :func:`gaze_moved`: on faces/hard/poor's
    tiny JPEG portrait (eyes 13 and 11 px in its crop) a moved iris and its drawn-in sclera were a smudge that
    turned the pair to the wrong person (one-off A/B); 20 px would also have excluded the real clip's singers
    (faces 70–90 px in a 640×360 frame), whose fused faces closer to the source went 78 → 86 % with 12 (one-off)."""
    return all(np.linalg.norm(points[outer, :2] - points[inner, :2]) >= MOVABLE_EYE
               for outer, inner in EYE_CORNERS.values())


def whites_cast(face: np.ndarray, points: np.ndarray, skin: np.ndarray) -> bool:
    """Whether the whites of ``face``'s eyes (the brightest ``WHITES_SHARE`` of their openings) are redder than its
    bare skin by ``CAST_RED`` a* levels or more: whites are never redder than skin in a neutral light, a coloured
    light's cast makes them so (jay_chou's violet-lit studio portrait: +10; Biden, Obama, Musk, Johansson: −2 to −8),
    and the colour match, fitted to the skin, would leave that cast in the eyes (one-off measurements). Read on the
    eyes' box and on every fourth pixel of the skin: the whole crop in Lab cost a millisecond."""
    corners = np.concatenate([points[RIGHT_EYE, :2], points[LEFT_EYE, :2]])
    x0, y0 = np.maximum(np.floor(corners.min(0)).astype(int), 0)
    x1, y1 = np.minimum(np.ceil(corners.max(0)).astype(int) + 1, (face.shape[1], face.shape[0]))
    bare = skin[::4, ::4] > 0.5
    if x1 - x0 < 4 or y1 - y0 < 2 or not bare.any():
        return False
    offset = np.array([x0, y0], np.float64)
    openings = polygon_mask(points[RIGHT_EYE, :2] - offset, (y1 - y0, x1 - x0), points[LEFT_EYE, :2] - offset) > 0.5
    if openings.sum() < 8:
        return False
    lab = cv2.cvtColor(np.ascontiguousarray(face[y0:y1, x0:x1]), cv2.COLOR_RGB2Lab)
    whites = openings & (lab[..., 0] >= np.percentile(lab[..., 0][openings], 100 * (1 - WHITES_SHARE)))
    skin_red = np.median(cv2.cvtColor(np.ascontiguousarray(face[::4, ::4]), cv2.COLOR_RGB2Lab)[..., 1][bare])
    return float(lab[..., 1][whites].mean()) - float(skin_red) >= CAST_RED


def gaze_shift(new_face: np.ndarray, target: np.ndarray, points: np.ndarray) -> float | None:
    """The irises' shift from the target's to the new face's, in eye widths, averaged over the two eyes:
    ``new_face`` and ``target`` (RGB crops) warped onto the same ``points`` (the 468-point mesh in the crop); None
    where an eye is closed in that geometry or no iris is found.

    Averaged with its sign: a gaze moves both irises the same way, while each eye's own measuring error (a lid's
    shadow, a catch light) does not — on portraits that all look into the camera one eye alone was off by up to
    0.2 of its width, the mean by at most 0.09; a source looking aside 0.14–0.30 (one-off, knn_examples against
    faces/hard's yang_mi selfie)."""
    new_grey, target_grey = (cv2.cvtColor(c, cv2.COLOR_RGB2GRAY) for c in (new_face, target))
    shifts = []
    for side, contour in (("right", RIGHT_EYE), ("left", LEFT_EYE)):
        eye = points[contour, :2]
        outer, inner = EYE_CORNERS[side]
        width = float(np.linalg.norm(points[outer, :2] - points[inner, :2]))
        if width < 4 or cv2.contourArea(eye.astype(np.float32)) / width ** 2 < OPEN_EYE:
            return None
        ours, theirs = iris_position(new_grey, eye, width), iris_position(target_grey, eye, width)
        if ours is None or theirs is None:
            return None
        shifts.append((ours - theirs) / width)
    return float(np.mean(shifts))


def gaze_moved(new_face: np.ndarray, target: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``new_face`` with each eye's iris moved along its opening to where ``target``'s iris sits (both crops warped
    onto ``points``, levelled on the eyes): the iris — the opening's band as wide as an iris (``IRIS_WIDTH``)
    around where :func:`iris_position` finds it — is taken out and the sclera drawn in from both sides of it
    (inpainting, so the white keeps its shading under the lid and toward the corners), then laid back in the
    opening at the target's place. The lids, the lashes and everything outside the openings stay as they were. An
    eye whose iris is not found in either crop is left as it is."""
    out = new_face.copy()
    grey, target_grey = (cv2.cvtColor(c, cv2.COLOR_RGB2GRAY) for c in (new_face, target))
    for side, contour in (("right", RIGHT_EYE), ("left", LEFT_EYE)):
        eye = points[contour, :2]
        outer, inner = EYE_CORNERS[side]
        width = float(np.linalg.norm(points[outer, :2] - points[inner, :2]))
        ours, theirs = iris_position(grey, eye, width), iris_position(target_grey, eye, width)
        if ours is None or theirs is None:
            continue
        x0, y0 = np.maximum(np.floor(eye.min(0)).astype(int) - 3, 0)
        x1, y1 = np.minimum(np.ceil(eye.max(0)).astype(int) + 4, (out.shape[1], out.shape[0]))
        opening = polygon_mask(eye - (x0, y0), (y1 - y0, x1 - x0))
        if (opening > 0.5).sum() < 8:
            continue
        columns = np.arange(x1 - x0, dtype=np.float32)[None, :] + x0
        half = IRIS_WIDTH * width / 2
        iris = np.clip(half + 1.0 - np.abs(columns - ours), 0.0, 1.0) * opening  # soft band, 1 px ramp
        box = np.ascontiguousarray(new_face[y0:y1, x0:x1])
        without = cv2.inpaint(box, (iris > 0.05).astype(np.uint8), max(2.0, half / 2), cv2.INPAINT_TELEA)
        shift = np.float32([[1, 0, theirs - ours], [0, 1, 0]])
        moved_iris = cv2.warpAffine(box, shift, (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR,
                                    borderMode=cv2.BORDER_REPLICATE)
        moved_band = cv2.warpAffine(iris, shift, (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR) * opening
        eye_now = without * (1.0 - moved_band[..., None]) + moved_iris * moved_band[..., None]
        weight = opening[..., None].astype(np.float32)
        out[y0:y1, x0:x1] = (eye_now * weight + box * (1.0 - weight) + 0.5).astype(np.uint8)
    return out
