"""The segment stage: which pixels of the rendered crops are face skin, hair or an occluder — engine-agnostic.

The segmenter (``face_segmenter``, see :mod:`facefuse.analysis.segmentation` and its model card) sees the target's
aligned crop *as photographed* (not reshaped: an occluder stays exactly where it was, whatever the engine did to the
face under it), framed like its own crop (the engines' aligned crop), so those masks need only scaling. The new face
takes the source's parsing made once in the source's own photo (the segment stage's source half), carried along
the engine's :class:`~facefuse.fusion.engine.SourceMap` (:func:`carried_parsing`); an engine without one has the new
face (already in the target's geometry) parsed in the same batch as the target. They decide:
- what stays the target's on top of the output, pixel for pixel: its glasses, fringe, hands, mask, microphone
  (``target_keep``, with ``target_photo``: the unreshaped crop those pixels come from);
- which source pixels are not the source's face (its hair, glasses, a hand) and must not be used (``source_hidden``:
  the target's own skin, relit like the rest, shows there instead of a smear of the source's hair);
- where each photo's bare skin is (skin and nose), for the relight stage (``target_skin``, ``source_skin``).
Without the model (licence setting, or ``segmentation="off"``) the classic geometric masks of the engine are used.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import cv2
import numpy as np

from ..analysis.segmentation import (FACE_CLASSES, HAIR, NOSE, OCCLUDER, SEGMENT_SIZE, SKIN, FaceParsing,
                                     FaceSegmenter)
from ..geometry.regions import FACE_OVAL, LEFT_BROW, LEFT_EYE, RIGHT_BROW, RIGHT_EYE, polygon_mask
from .engine import CarryTurn, RenderedFace, SourceMap
from .relight import skin_shading


CORE_HAIR_FLOOR = 0.7  # hair probability from which the target's hair covers the new face's bare skin
# occluders (issue 17, measured on the occluder pairs of benchmarks/occluder_masks.py): kept from a probability of
# OCCLUDER_FLOOR on a ramp, and (segmentation="whole") kept whole out to OCCLUDER_EDGE wherever the region reaches
# OCCLUDER_SURE
OCCLUDER_FLOOR, OCCLUDER_EDGE, OCCLUDER_SURE = 0.35, 0.2, 0.65
# an occluder region (probability above OCCLUDER_EDGE) no larger than one eye's opening, with less than
# EYE_GLINT_OUTSIDE of its pixels outside the openings grown by EYE_MARGIN (of the segmenter's crop), is the eye
# itself — its lids' lashes, its whites, a catch light — not an occluder (issue 17; see :func:`_eye_parts`)
EYE_GLINT_OUTSIDE, EYE_MARGIN = 0.25, 4 / 128
# an occluder region with under BROW_OUTSIDE of its pixels outside the brows grown by BROW_MARGIN (of the
# segmenter's crop) and no larger than BROW_SIZE brows is a brow (see _brow_parts) — unless the face wears glasses:
# GLASSES_PIXELS occluder pixels or more round the eyes, within GLASSES_REACH of them
BROW_OUTSIDE, BROW_MARGIN, BROW_SIZE = 0.25, 2 / 128, 1.5
GLASSES_PIXELS, GLASSES_REACH = 12, 5 / 128
# an occluder region wholly inside the face's oval shrunk by FACE_EDGE (of the segmenter's crop), farther than
# ATTACHED from any region that reaches beyond it and with holes smaller than FRAME_HOLES (pixels, share of its
# area) floats on the face: a shadow or a brow, not an occluder (issue 19; see :func:`_floating`)
FACE_EDGE, ATTACHED, FRAME_HOLES = 3 / 128, 4 / 128, (8, 0.1)
# ... and deeper than PATCH_DEPTH (its inscribed radius, of the segmenter's crop): the pieces a pasted or real frame
# breaks into and a dark brow are thinner (at most 2.3 of 128 px on the naturalness sets), a socket's or a cheek's
# shadow deeper (2.7–5.1)
PATCH_DEPTH = 2.5 / 128
# an occluder region is the face's own shadow (see :func:`_shadows`) when, on the face, it is at most SHADOW_DARK as
# light as the bare skin within SHADOW_RING (of the segmenter's crop) round it, of the same chromaticity (r and g
# of sRGB over their sum within SHADOW_CHROMA: a shadow scales the three channels alike) and no more textured
# (median |Laplacian| of L* at most SHADOW_TEXTURE × the bare skin's)
SHADOW_DARK, SHADOW_RING, SHADOW_CHROMA, SHADOW_TEXTURE = 0.7, 4 / 128, 0.04, 1.3
# ... and its part on the face at least SHADOW_DEPTH deep (inscribed radius, of the segmenter's crop): the dark
# background a turned face's oval takes in beyond its cheek is a crescent (3.8 of 128 px on faces/hard/profile/03),
# the shadows beside a side-lit nose deeper (6.7–7.5)
SHADOW_DEPTH = 5 / 128
# ... on a colour photo only: its bare skin's chromaticity at least SKIN_COLOUR from grey (r or g off 1/3; the
# naturalness sets' colour photos: 0.06–0.09, greyscale ones 0.000–0.006)
SKIN_COLOUR = 0.02
# the source's own photo: a pixel within EDGE_BAND inside its face oval (of the face's width; and half as far
# outside, where the new face's feathered edge still reads it) that the network is
# not sure is face (face classes under EDGE_FACE) and whose colour is more than EDGE_DELTA_E (8-bit Lab) from its skin
# nearby (shading at EDGE_SKIN_SIGMA of the face's width) is not its face: a sideburn, the backdrop (see
# :func:`source_edge`)
EDGE_BAND, EDGE_FACE, EDGE_DELTA_E, EDGE_SKIN_SIGMA = 0.08, 0.7, 35.0, 0.08
# the source's hair probability is grown by this many pixels of the segmenter's 128 px crop before it is carried
# onto a new face (see :func:`carried_parsing`)
SOURCE_HAIR_GROWTH = 1
# a stream's segmenter output: the weight of each new group's probabilities in the track's running average
# (SegmenterPlanes.scaled's ``earlier``; issue 19, video flicker)
STREAM_WEIGHT = 0.5


@dataclass(frozen=True)
class OccluderRule:
    """How the target's occluder probability becomes the part of its keep mask that covers the new face: ``sure``
    (None: the ramp alone) is where a region counts as an occluder to its faint edge (:func:`occluders`), and the
    occluders are grown by 1/``grow_divisor`` of the crop's side (:func:`_grown`)."""

    sure: float | None
    grow_divisor: int


# the choices of FusionOptions.segmentation that run the segmenter. auto: the ramp, grown 1/64 (identity margin
# +0.097 on the 36 ablation pairs, occluder pairs 19.6 dB); whole: regions it is sure of kept whole, grown 1/48
# (frames 21.4 → 52.5 dB, occluder pairs 22.9 dB, but the margin +0.050: its false occluders travel further)
OCCLUDER_RULES = MappingProxyType({"auto": OccluderRule(sure=None, grow_divisor=64),
                                   "whole": OccluderRule(sure=OCCLUDER_SURE, grow_divisor=48)})


@dataclass(frozen=True)
class OcclusionMasks:
    """Soft masks (float32, 0–1) at the rendered crop's size."""

    target_keep: np.ndarray
    target_photo: np.ndarray
    source_hidden: np.ndarray
    target_skin: np.ndarray
    source_skin: np.ndarray


@dataclass(frozen=True)
class SegmenterPlanes:
    """The segmenter's probabilities for one rendered face and the planes made of them at one crop size: all of
    :func:`occlusion_masks` that does not depend on the frame's own pixels or skin mask, so a stream's frames that
    carry one frame's segmenter output (:mod:`facefuse.video.parsing`) reuse it whole when their crop has the same
    size (issue 19: scaling the carried 128 px probabilities to each frame's crop again cost 4–5 ms a frame). Its
    arrays are read-only: several frames on several threads read them."""

    size: tuple[int, int]
    target: np.ndarray  # the target's class probabilities (128 px)
    source: np.ndarray  # the new face's
    hair: np.ndarray  # the target's hair (confident), at ``size``
    hair_any: np.ndarray | None  # its hair probability and its hair from CORE_HAIR_FLOOR (``core``: None without)
    hair_sure: np.ndarray | None
    target_skin: np.ndarray
    occluders: np.ndarray  # the target's occluders, grown by the rule
    source_hidden: np.ndarray
    source_skin: np.ndarray

    @classmethod
    def scaled(cls, target: np.ndarray, source: np.ndarray, size: tuple[int, int], rule: OccluderRule,
               core: bool, earlier: SegmenterPlanes | None = None) -> SegmenterPlanes:
        """The planes at ``size`` (width, height); ``core``: the rendered face marks its bare skin. ``earlier``: a
        stream's planes of the group before in the same track (:class:`~facefuse.video.parsing.ParsingCarry`,
        chained): the probabilities become a running average, these with :data:`STREAM_WEIGHT` — both are in the
        aligned crop, which follows the face, so a pixel is the same place on it."""
        if earlier is not None:
            weight = np.float32(STREAM_WEIGHT)
            target = earlier.target + weight * (target - earlier.target)
            source = earlier.source + weight * (source - earlier.source)

        def up(plane: np.ndarray) -> np.ndarray:
            return cv2.resize(plane, size, interpolation=cv2.INTER_LINEAR)

        planes = cls(size, target, source, hair=up(_confident(target[HAIR])),
                     hair_any=up(target[HAIR]) if core else None,
                     hair_sure=up(_confident(target[HAIR], CORE_HAIR_FLOOR)) if core else None,
                     # the nose is bare skin too, and its sides say most about light
                     target_skin=up(target[SKIN] + target[NOSE]),
                     # an occluder is grown (thin frames); hair is not: a grown fringe would take back the forehead
                     occluders=_grown(up(occluders(target[OCCLUDER], rule.sure)), size[0] // rule.grow_divisor),
                     source_hidden=up(_confident(source[HAIR] + source[OCCLUDER])),
                     source_skin=up(source[SKIN] + source[NOSE]))
        for plane in (planes.target, planes.source, planes.hair, planes.hair_any, planes.hair_sure,
                      planes.target_skin, planes.occluders, planes.source_hidden, planes.source_skin):
            if plane is not None:
                plane.setflags(write=False)
        return planes


def occlusion_masks(segmenter: FaceSegmenter, rendered: RenderedFace, photo: np.ndarray,
                    rule: OccluderRule, carry: CarryTurn | None = None,
                    target_turn: CarryTurn | None = None, target_points: np.ndarray | None = None,
                    source: FaceParsing | None = None) -> OcclusionMasks:
    """The masks of one rendered face; ``photo`` is the target's aligned crop as photographed (the align stage's),
    ``target_points`` its face's 468 points in that crop (with the rendered face's own points, they tell the eyes'
    whites from an occluder: :func:`without_false_occluders`),
    ``rule`` how the target's occluders are kept (the option's choice, :data:`OCCLUDER_RULES`). ``carry``: a stream
    frame's turn in its track's segmenter output (the segmenter runs on a group's first frame; the others take its
    :class:`SegmenterPlanes`, scaled anew only when their crop's size differs). ``target_turn``: a photo's turn in
    what is kept with its cached face (:meth:`facefuse.stages.segment.Segment.target_turn`): the target's half of
    the output is computed once (alone, so every fusion with it sees the same) and the new face's alone after.
    ``source``: the source face parsed in its own photo (the segment stage's source half); with the rendered face's
    ``source_map`` it is carried onto the new face, and the segmenter sees the target alone."""
    size = rendered.crop.shape[1], rendered.crop.shape[0]
    core = None if rendered.skin is None else rendered.skin.astype(np.float32)
    scale = SEGMENT_SIZE / size[0]

    def target_half() -> np.ndarray:
        return target_parsing(segmenter, photo, target_points)

    def measure(earlier: SegmenterPlanes | None = None) -> SegmenterPlanes:
        if source is not None and rendered.source_map is not None:
            target = target_half() if target_turn is None else target_turn(target_half)
            new_face = carried_parsing(source, rendered.source_map)
        else:
            new_crop = segmenter_crop(rendered.crop)
            if target_turn is None:
                crops = np.stack([segmenter_crop(photo), new_crop])
                target, new_face = segmenter.probabilities(crops)
                target = without_false_occluders(target, None if target_points is None else target_points * scale,
                                                 crops[0])
            else:
                target = target_turn(target_half)
                new_face = segmenter.probabilities(new_crop[None])[0]
            new_face = without_false_occluders(new_face, None if rendered.points is None else rendered.points * scale,
                                               new_crop)
        return SegmenterPlanes.scaled(target, new_face, size, rule, core is not None, earlier)

    planes = measure() if carry is None else carry(measure)
    if planes.size != size or (planes.hair_sure is None) != (core is None):
        planes = SegmenterPlanes.scaled(planes.target, planes.source, size, rule, core is not None)
    hair, target_skin = planes.hair, planes.target_skin
    if core is not None:
        assert planes.hair_sure is not None and planes.hair_any is not None
        # on the new face's bare skin (cheeks, forehead, nose: not the brows, not the jaw line where a beard or a
        # fringe sits) the target's hair stays on top only when the segmenter is sure: it called deep shadow on a
        # side-lit cheek "hair" and kept the whole shadowed half of the target's face (issue 17, sidelight/04);
        # what it is then not sure of counts as the target's skin, so the relight sees that shadow
        hair = hair * (1.0 - core) + planes.hair_sure * core
        target_skin = np.minimum(target_skin + planes.hair_any * core * (1.0 - planes.hair_sure), 1.0)
    return OcclusionMasks(
        target_keep=np.maximum(planes.occluders, hair),
        target_photo=photo,
        source_hidden=planes.source_hidden,
        target_skin=target_skin,
        source_skin=planes.source_skin,
    )


def target_parsing(segmenter: FaceSegmenter, photo: np.ndarray, target_points: np.ndarray | None) -> np.ndarray:
    """The target's half of the segmenter output: its aligned crop ``photo`` parsed alone, its eyes' glints not
    occluders (``target_points``: its face's 468 points in that crop). It needs nothing of the source, so a photo
    fusion computes it while the source is still being prepared (:meth:`facefuse.stages.segment.Segment.ahead`)."""
    crop = segmenter_crop(photo)
    target = segmenter.probabilities(crop[None])[0]
    scale = SEGMENT_SIZE / photo.shape[1]
    return without_false_occluders(target, None if target_points is None else target_points * scale, crop)


def carried_parsing(source: FaceParsing, source_map: SourceMap) -> np.ndarray:
    """The source's parsing in its own photo carried onto the new face (class probabilities at the segmenter's 128
    px), its hair grown by ``SOURCE_HAIR_GROWTH`` px first.

    Why grown: resampling a 128 px probability map once more lowers the peak of a strand of a fringe or a thin
    lock at the temple below the 0.5 from which it is hidden, and the photo's own pixels at the hairline are half
    hair. On face-api-js and the hard photos (140 cross pairs, one-off A/B against parsing the rendered face):
    not grown, the identity margin rose +0.161 → +0.168 but the mean largest smear 1.96 → 2.10 % and blotch
    2.07 → 2.17 %; hair grown 1 px: margin +0.165, smear 1.88 %, blotch 2.07 %, top-1 unchanged (82.9 %); hair
    and occluders grown: smear 1.84 %, but margin +0.160 and top-1 81.4 %."""
    probabilities = source.probabilities
    if SOURCE_HAIR_GROWTH > 0:
        probabilities = probabilities.copy()
        side = 2 * SOURCE_HAIR_GROWTH + 1
        probabilities[HAIR] = cv2.dilate(probabilities[HAIR], np.ones((side, side), np.uint8))
    return source_map.warp(probabilities, source.matrix, SEGMENT_SIZE)


def without_false_occluders(probabilities: np.ndarray, points: np.ndarray | None,
                            crop: np.ndarray | None = None) -> np.ndarray:
    """The segmenter's ``probabilities`` (classes × 128 × 128) with the occluder class taken out of four kinds of
    region it calls occluder that are not (``points``: the face's 468 points at the segmenter's scale; None:
    unchanged): the eyes' own parts (:func:`_eye_parts`), the brows of a face without glasses (:func:`_brow_parts`),
    patches that float on the face (:func:`_floating`) and,
    with ``crop`` (the segmenter's input, uint8 RGB), the face's own shadows (:func:`_shadows`), whose pixels on the
    face count as its skin."""
    if points is None:
        return probabilities
    occluder = probabilities[OCCLUDER]
    count, labels = cv2.connectedComponents((occluder > OCCLUDER_EDGE).astype(np.uint8), connectivity=8)
    if count <= 1:
        return probabilities
    total = np.bincount(labels.ravel(), minlength=count)
    eye_parts = _eye_parts(labels, total, points)
    false = np.union1d(np.union1d(eye_parts, _brow_parts(labels, total, points, eye_parts)),
                       _floating(labels, total, points))
    face = polygon_mask(points[FACE_OVAL, :2], labels.shape[0]) > 0.5
    shadows = _shadows(labels, probabilities, face, crop, false) if crop is not None else false[:0]
    if false.size == 0 and shadows.size == 0:
        return probabilities
    cleaned = probabilities.copy()
    cleaned[OCCLUDER][np.isin(labels, false)] = 0.0
    if shadows.size:
        shadow = np.isin(labels, shadows)
        on_face = shadow & face
        cleaned[SKIN][on_face] += cleaned[OCCLUDER][on_face]  # the relight sees the shadow as the skin it is
        cleaned[OCCLUDER][shadow] = 0.0
    return cleaned


def _depth(region: np.ndarray) -> float:
    """A region's inscribed radius in pixels (the largest distance of a pixel of ``region``, a boolean or 0/1
    mask, from its outside)."""
    x, y, w, h = cv2.boundingRect(region.astype(np.uint8))
    patch = np.pad(region[y:y + h, x:x + w].astype(np.uint8), 1)
    return float(cv2.distanceTransform(patch, cv2.DIST_L2, 3).max())


def _disc(radius: int) -> np.ndarray:
    return cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1,) * 2)


def _eye_parts(labels: np.ndarray, total: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The occluder regions (``labels``' ids, ``total``: their sizes) that are an eye itself.

    Why: the small network calls the whites of some eyes and their catch lights "occluder" (glasses glare), so the
    target's eyes were kept on top of every fusion onto those photos, whatever ``eyes`` chose, and the source's eyes
    hidden: on Obama's photos in ../shared the target's occluder mask alone cost 0.05–0.08 of the judge's cosine to
    the source (a one-off ablation at the tenth stop). A region counts as the eye when less than
    ``EYE_GLINT_OUTSIDE`` of it lies outside the openings grown by ``EYE_MARGIN`` and it is no larger than one eye's
    opening: the dark frame benchmarks/naturalness.py pastes round a smiling face's narrow eyes lies within a 5 px
    margin for 85 % of its pixels but is over seven times one eye's opening; sunglasses and real frames reach beyond the
    openings and stay occluders."""
    side = labels.shape[0]
    eyes = polygon_mask(points[RIGHT_EYE, :2], side, points[LEFT_EYE, :2]) > 0.5
    one_eye = int(eyes.sum()) / 2
    eyes = cv2.dilate(eyes.astype(np.uint8), _disc(max(1, round(EYE_MARGIN * side)))) > 0
    outside = np.bincount(labels[~eyes], minlength=len(total))
    return np.flatnonzero((outside < EYE_GLINT_OUTSIDE * total) & (total <= one_eye) & (np.arange(len(total)) > 0))


def _brow_parts(labels: np.ndarray, total: np.ndarray, points: np.ndarray, eye_parts: np.ndarray) -> np.ndarray:
    """The occluder regions that are a brow itself: under ``BROW_OUTSIDE`` of the region outside the brows grown by
    ``BROW_MARGIN``, no larger than ``BROW_SIZE`` brows, on a face without glasses — fewer than ``GLASSES_PIXELS``
    occluder pixels (the eyes' own parts aside) round the eyes, within ``GLASSES_REACH`` of them and outside the
    brows.

    Why: the network calls some dark brows "occluder" (att-faces s9/1: both; hard/makeup/01's arched brows): a
    target's brows then stayed on top of every new face fused onto it, and a source's were hidden. A frame's top rim on the brows breaks into pieces of just that shape,
    but a frame also lies round the eyes: with the rule blind to that, a frame pasted on elon_musk/01 and on howard1
    lost its top rims (the pasted occluders' worst pair 16.5 → 13.5 dB)."""
    side = labels.shape[0]
    brows = polygon_mask(points[RIGHT_BROW, :2], side, points[LEFT_BROW, :2]) > 0.5
    one_brow = int(brows.sum()) / 2
    brows = cv2.dilate(brows.astype(np.uint8), _disc(max(1, round(BROW_MARGIN * side)))) > 0
    outside = np.bincount(labels[~brows], minlength=len(total))
    candidates = np.flatnonzero((outside < BROW_OUTSIDE * total) & (total <= BROW_SIZE * one_brow)
                                & (np.arange(len(total)) > 0))
    if candidates.size == 0:
        return candidates
    eyes = polygon_mask(points[RIGHT_EYE, :2], side, points[LEFT_EYE, :2]) > 0.5
    around = (cv2.dilate(eyes.astype(np.uint8), _disc(max(1, round(GLASSES_REACH * side)))) > 0) & ~brows
    frame = (labels > 0) & ~np.isin(labels, np.union1d(candidates, eye_parts)) & around
    return candidates if int(frame.sum()) < GLASSES_PIXELS else candidates[:0]


def _floating(labels: np.ndarray, total: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The occluder regions that float on the face: wholly inside its oval (shrunk by ``FACE_EDGE``), not within
    ``ATTACHED`` of a region that reaches beyond it, deeper than ``PATCH_DEPTH`` and no frame (a region with holes,
    ``FRAME_HOLES``, is one).

    Why: what covers a face reaches it from outside — a hand, a microphone, a cup, glasses' temples, a fringe from
    the hairline — while the network also calls "occluder" the deep shadow in a side-lit eye socket or beside the
    nose. Kept on top, those patches put the target's own shadowed eye and cheek into the new face: on the shared
    concert clip (a singer side-lit behind a microphone) 13 of 147 fused frames were closer to the singer than to
    the source for that alone (issue 19). A patch within ``ATTACHED`` of a region that does reach outside is part of
    it (a glasses bridge between its rims); a frame pasted on the face is a ring round the eyes, or breaks into thin
    pieces, like a dark brow the network half calls occluder (those stay: dropping them lost the pasted frames'
    worst pair 16.5 → 13.3 dB, and a brow is the next rule's trade, docs/quality.md)."""
    side = labels.shape[0]
    face = polygon_mask(points[FACE_OVAL, :2], side) > 0.5
    face = cv2.erode(face.astype(np.uint8), _disc(max(1, round(FACE_EDGE * side)))) > 0
    ids = np.arange(len(total))
    inside = (np.bincount(labels[~face], minlength=len(total)) == 0) & (ids > 0)
    if not inside.any():
        return ids[:0]
    reaching = (labels > 0) & ~inside[labels]
    near = cv2.dilate(reaching.astype(np.uint8), _disc(max(1, round(ATTACHED * side)))) > 0
    inside[np.unique(labels[near])] = False
    floating = []
    for region in np.flatnonzero(inside):
        x, y, w, h = cv2.boundingRect((labels == region).astype(np.uint8))
        patch = np.pad((labels[y:y + h, x:x + w] == region).astype(np.uint8), 1)
        if _depth(patch) < PATCH_DEPTH * side:
            continue  # a thin piece: a frame's rim, a brow
        cv2.floodFill(patch, None, (0, 0), 2)
        if (patch == 0).sum() < max(FRAME_HOLES[0], FRAME_HOLES[1] * total[region]):
            floating.append(region)
    return np.array(floating, dtype=ids.dtype)


def _shadows(labels: np.ndarray, probabilities: np.ndarray, face: np.ndarray, crop: np.ndarray,
             false: np.ndarray) -> np.ndarray:
    """The occluder regions (``labels``' ids; those in ``false`` already taken out) that are the face's own shadow
    where they cover it (``face``: its oval at the segmenter's scale): darker than the bare skin round them, of its
    chromaticity and no more textured (:data:`SHADOW_DARK`, :data:`SHADOW_CHROMA`, :data:`SHADOW_TEXTURE`).

    Why: the network calls deep shadow on a side-lit face "occluder" where it reaches the face's edge — beside the
    nose down to the jaw (faces/hard/sidelight/01), a shadowed half into the dark background (/02) — so
    :func:`_floating` keeps it, and the target's own shadowed cheek stayed on top of the new face: the black streak
    beside the nose of issue 17. What covers a face differs from its shadow in one of the three: a hat or a grey
    beard in colour, glasses' frames, sunglasses, a microphone and strands of hair in texture, a hand or fingers in
    lightness (measured on faces/hard, docs/quality.md); a glasses frame is also thinner than ``PATCH_DEPTH``. A greyscale photo has no chromaticity to tell by (the network's dark hair over howard1's
    forehead, face-api-js, passed the other two), so there no region is taken for a shadow."""
    side = labels.shape[0]
    candidates = [region for region in np.setdiff1d(np.unique(labels[face]), np.append(false, 0))
                  if _depth(labels == region) >= PATCH_DEPTH * side]  # not a thin piece: a glasses frame, a strand
    skin = face & (probabilities[SKIN] + probabilities[NOSE] > 0.5)
    if not candidates or not skin.any():
        return labels[:0, 0]
    def chromaticity(mask: np.ndarray) -> np.ndarray:
        """r and g of the pixels' summed sRGB over its total: the zones are large enough to average the noise out,
        at half a median's cost."""
        total = crop[mask].sum(axis=0, dtype=np.float64)
        return total[:2] / max(total.sum(), 1.0)

    skin_colour = chromaticity(skin)
    if np.abs(skin_colour - 1 / 3).max() < SKIN_COLOUR:
        return labels[:0, 0]  # a greyscale photo: no chromaticity to tell by
    lightness = cv2.cvtColor(crop, cv2.COLOR_RGB2Lab)[..., 0].astype(np.float32)
    texture = np.abs(cv2.Laplacian(lightness, cv2.CV_32F))
    skin_texture = max(float(np.median(texture[skin])), 1.0)
    ring = _disc(max(1, round(SHADOW_RING * side)))
    shadows = []
    for region in candidates:
        inside = labels == region
        on_face = inside & face
        if _depth(on_face) < SHADOW_DEPTH * side:
            continue  # a crescent along the face's edge: the background beyond a turned cheek
        around = (cv2.dilate(inside.astype(np.uint8), ring) > 0) & skin & ~inside
        if around.sum() < 6:
            continue  # no bare skin beside it to compare with
        dark = np.median(lightness[on_face]) <= SHADOW_DARK * np.median(lightness[around])
        same_colour = np.abs(chromaticity(on_face) - chromaticity(around)).max() <= SHADOW_CHROMA
        smooth = np.median(texture[on_face]) <= SHADOW_TEXTURE * skin_texture
        if dark and same_colour and smooth:
            shadows.append(region)
    return np.array(shadows, dtype=labels.dtype)


def source_edge(probabilities: np.ndarray, points: np.ndarray, crop: np.ndarray) -> np.ndarray:
    """The source face's ``probabilities`` (in its own photo, ``crop`` the segmenter's input, ``points`` its 468
    points at that scale) with what lies in the outer band of its oval and is not its face — unsure to the network,
    far from the skin's colour beside it — moved to the occluder class, so the new face does not take it
    (``source_hidden``).

    Why: the network's hair and occluder stop short of a sideburn or a thin lock by the ear and of a coloured
    backdrop where the face oval reaches past the cheek (faces/hard/same-person/jay_chou/01 and elon_musk/01), and
    those pixels came onto the new face's edge as dark dots and blue streaks at the temple (issue 17)."""
    oval = polygon_mask(points[FACE_OVAL, :2], crop.shape[0]) > 0.5
    width = float(np.ptp(points[FACE_OVAL, 0]))
    # the oval's rim: a sideburn or a lock lies on it, half outside
    band = (cv2.dilate(oval.astype(np.uint8), _disc(max(1, round(EDGE_BAND * width / 2)))) > 0) & \
        ~(cv2.erode(oval.astype(np.uint8), _disc(max(1, round(EDGE_BAND * width)))) > 0)
    face = probabilities[list(FACE_CLASSES)].sum(axis=0)
    unsure = band & (face < EDGE_FACE)
    if not unsure.any():
        return probabilities
    lab = cv2.cvtColor(crop, cv2.COLOR_RGB2Lab).astype(np.float32)
    skin = (oval & (probabilities[SKIN] + probabilities[NOSE] > 0.5)).astype(np.float32)
    rows, cols = np.nonzero(unsure)
    far = np.linalg.norm(lab[rows, cols] - skin_shading(lab, skin, EDGE_SKIN_SIGMA * width)[rows, cols],
                         axis=-1) > EDGE_DELTA_E
    if not far.any():
        return probabilities
    rows, cols = rows[far], cols[far]
    moved = probabilities.copy()
    pixels = moved[:, rows, cols]
    pixels[OCCLUDER] = 1.0 - pixels[HAIR]  # all but its hair is occluder now
    pixels[[c for c in range(len(moved)) if c not in (HAIR, OCCLUDER)]] = 0.0
    moved[:, rows, cols] = pixels
    return moved


def segmenter_crop(crop: np.ndarray) -> np.ndarray:
    """An aligned crop at the segmenter's input size (its framing is the segmenter's own, so only scaled)."""
    return cv2.resize(crop, (SEGMENT_SIZE, SEGMENT_SIZE), interpolation=cv2.INTER_AREA)


def occluders(probability: np.ndarray, sure_from: float | None) -> np.ndarray:
    """The target's occluders at the segmenter's size: the confident ramp from ``OCCLUDER_FLOOR``, and, whole (1.0),
    every connected region above ``OCCLUDER_EDGE`` that somewhere reaches ``sure_from`` (None: the ramp alone).

    Why: the small network's probability falls off over a pixel or two at a thin occluder's edge and dips along it,
    so a glasses frame it had found came back half-blended with the new face (ramp only: 21.4 dB inside the pasted
    frame, 49 % of its pixels kept whole); a region it is sure of somewhere is an occluder to its faint edge. A region
    that never reaches ``sure_from`` (the haze on a beard or a shadow) keeps the ramp. Not the default (the option's
    "whole"): the segmenter's false occluders (a fringe, a temple) travel as far, and cost identity."""
    soft = _confident(probability, OCCLUDER_FLOOR)
    if sure_from is None:
        return soft
    sure = probability > sure_from
    if not sure.any():
        return soft
    _, regions = cv2.connectedComponents((probability > OCCLUDER_EDGE).astype(np.uint8), connectivity=8)
    whole = np.isin(regions, np.unique(regions[sure]))
    return np.where(whole, np.float32(1.0), soft)


def _grown(mask: np.ndarray, radius: int) -> np.ndarray:
    """The mask grown by ``radius`` px (1/64 or 1/48 of the crop, the rule's): a thin glasses frame is a pixel or two
    at the segmenter's 128 px, and its anti-aliased edge must come from the photo too, not half from the new face.

    Thresholds chosen by measurement: occluders from a probability of 0.35 and grown (glasses drawn on a real photo
    come through at ≥ 35 dB); hair from 0.5 and not grown — hair at 0.35 and grown kept more of the target and cost
    5.6 points of identity top-1 (86.1 % against 91.7 % on the colour set) for no visible gain. Grown by 1/48 of the
    crop rather than 1/64 with the whole regions of :func:`occluders`: the pasted frame 30.8 → 44.5 dB."""
    radius = max(1, radius)
    rows, cols = np.flatnonzero(mask.max(axis=1) > 0), np.flatnonzero(mask.max(axis=0) > 0)
    if rows.size == 0:  # no occluder (the common case): nothing to grow
        return mask
    # the dilation's own cost grows with its kernel (17 px at a 512 px crop): run it on the occluders' box grown by
    # the radius only, which gives the same pixels (outside that box the grown mask is 0 anyway)
    y0, y1 = max(rows[0] - radius, 0), min(rows[-1] + radius + 1, mask.shape[0])
    x0, x1 = max(cols[0] - radius, 0), min(cols[-1] + radius + 1, mask.shape[1])
    grown = np.zeros_like(mask)
    grown[y0:y1, x0:x1] = cv2.dilate(mask[y0:y1, x0:x1],
                                     cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1)))
    return grown


def _confident(probability: np.ndarray, floor: float = 0.5) -> np.ndarray:
    """A soft mask that ignores the low-probability haze a small network leaves around every edge."""
    return np.clip((probability - floor) / 0.3, 0.0, 1.0).astype(np.float32)
