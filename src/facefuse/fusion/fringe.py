"""The source's fringe on its forehead: dark strands the segmenter calls skin (issue 17, "Hair").

The small segmenter gives a strand of hair that falls over the forehead or the temple a hair probability of ≈ 0
(jay_chou/01 in ../shared/faces/hard: its dark fringe, labelled skin, came out as a grey-violet smear on the
forehead of every target). What is clearly hair there is found by the pixels themselves: on the new face's forehead
(above the brows, inside the pasted region), much darker than the source's own bare skin — relative to that skin,
so a dark-skinned face keeps its forehead — and connected to the hair the segmenter did find, so a shadow in the
middle of the forehead, a brow or an eye is not taken. Those pixels join ``source_hidden``: the target's own forehead
shows there instead. Not taken either: a strand where it crosses the brow's tail (below the brow line darkness
cannot tell it from the brow; a first version that reached the brows hid them on many sources and cost identity,
BENCHMARKS.md *Source fringe hidden*).
"""

from __future__ import annotations

import cv2
import numpy as np

# lightness (L*) as a share of the median of the source's bare skin: a strand is what is darker than DARK_FROM,
# hidden fully from DARK_SURE, its rim from DARK_RIM. jay_chou/01's fringe is at 0.29–0.38 of its skin's 86 L*;
# its side-lit cheek and nose shadow at 0.55–0.7 (and not connected to the hair).
DARK_FROM, DARK_SURE, DARK_RIM = 0.5, 0.4, 0.65
BROW_BAND = 0.06  # of the face's height: how far the source's brows reach above the new geometry's brow holes


def source_fringe(crop: np.ndarray, skin: np.ndarray, bare: np.ndarray, mask: np.ndarray,
                  hair: np.ndarray) -> np.ndarray:
    """The fringe to hide (float32, 0–1, the crop's size) of the rendered ``crop`` (RGB uint8): ``skin`` is the new
    geometry's bare-skin mask (its holes are the brows and eyes), ``bare`` the segmenter's source skin, ``mask``
    where the new face replaces the target, ``hair`` the source's hair already hidden. The work runs on the pasted
    region's box only, not the whole crop."""
    hidden = np.zeros(mask.shape, np.float32)
    pasted = mask > 0.5
    rows, cols = np.flatnonzero(pasted.any(axis=1)), np.flatnonzero(pasted.any(axis=0))
    if rows.size == 0:
        return hidden
    face = slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1)
    on_skin = skin[face] > 0.5
    reference = on_skin & (bare[face] > 0.5)
    if not reference.any():
        return hidden
    holes = _holes(on_skin)
    brow_line = _brow_line(holes, on_skin)
    if brow_line is None or brow_line <= 0:
        return hidden
    box = slice(0, brow_line)
    lightness = cv2.cvtColor(crop[face], cv2.COLOR_RGB2Lab)[:, :, 0].astype(np.float32)
    level = float(np.median(lightness[reference]))
    # the forehead: inside the pasted region, above the brow line, not on the brows and eyes (the skin's holes)
    forehead = pasted[face][box] & ~_grown(holes[box], max(2, mask.shape[0] // 128))
    dark = forehead & (lightness[box] < DARK_FROM * level)
    if not dark.any():
        return hidden
    # connected to the source's hair (where a fringe comes from; the region's edge also reaches the brows' tails)
    seed = _grown(hair[face][box] > 0.0, max(2, mask.shape[0] // 64)) & dark
    _, regions = cv2.connectedComponents(dark.astype(np.uint8), connectivity=8)
    fringe = np.isin(regions, np.unique(regions[seed])) & (regions > 0)
    # its dim rim (the strand's edge, anti-aliased into the skin) from DARK_RIM on, a few pixels around it
    rim = _grown(fringe, max(2, mask.shape[0] // 128)) & forehead
    ramp = np.clip((DARK_RIM * level - lightness[box]) / ((DARK_RIM - DARK_SURE) * level), 0.0, 1.0)
    # a soft edge (two pixels at the segmenter's scale) that also runs past the brow line, so the target's
    # forehead blends in and the line leaves no edge
    sigma = mask.shape[0] / 128
    below = min(int(3 * sigma), lightness.shape[0] - brow_line)
    strands = np.zeros((brow_line + below, lightness.shape[1]), np.float32)
    strands[:brow_line] = np.where(rim, ramp, 0.0)
    grown = cv2.dilate(strands, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (3, 3)))
    top, left = face[0].start, face[1].start
    hidden[top:top + strands.shape[0], left:left + strands.shape[1]] = np.clip(
        cv2.GaussianBlur(grown, (0, 0), sigma) * 1.5, 0.0, 1.0)
    return hidden


def _holes(on_skin: np.ndarray) -> np.ndarray:
    """The skin mask's holes (brows with eyes, the mouth): what is not skin and not reachable from outside."""
    outside = (~on_skin).astype(np.uint8)
    _, regions = cv2.connectedComponents(np.pad(outside, 1, constant_values=1), connectivity=4)
    return (regions[1:-1, 1:-1] > 0) & (regions[1:-1, 1:-1] != regions[0, 0])  # not the ring around the box


def _brow_line(holes: np.ndarray, on_skin: np.ndarray) -> int | None:
    """The row above the brows, where the forehead ends: the top of the skin's upper holes (the brows with the
    eyes) less BROW_BAND of the face's height, since the source's brows reach above those holes (its brows and the
    new geometry's differ); None without such holes."""
    count, _, stats, centres = cv2.connectedComponentsWithStats(holes.astype(np.uint8), connectivity=8)
    rows = np.flatnonzero(on_skin.any(axis=1))
    middle = (rows[0] + rows[-1]) / 2
    tops = [stats[i, cv2.CC_STAT_TOP] for i in range(1, count) if centres[i][1] < middle]
    return int(min(tops) - BROW_BAND * on_skin.shape[0]) if tops else None


def _grown(mask: np.ndarray, radius: int) -> np.ndarray:
    """The boolean ``mask`` grown by ``radius`` px."""
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))
    return cv2.dilate(mask.astype(np.uint8), kernel).astype(bool)
