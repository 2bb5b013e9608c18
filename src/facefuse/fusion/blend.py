"""Shared post-processing for every engine: colour and light matching, multi-band blending, sharpening, paste-back.

Choices, by measurement (benchmarks/quality.py, seam metric and timings):
- Colour: histogram matching per channel in Lab inside the face, then the target's low-frequency lightness (its
  shading) replaces the new face's, so a face lit from the left stays lit from the left while the source's
  features keep their detail.
- Blending: a Laplacian-pyramid (multi-band) blend by default; Poisson cloning (cv2.seamlessClone,
  ``blend="poisson"``) is available and compared in BENCHMARKS.md (seam score, identity and time).
- Sharpening: a small unsharp mask with the difference clipped, so edges gain crispness without halos.
- Paste-back: only the bounding box of the changed region is resampled (bicubic) at the photo's own resolution, so
  a 4K photo costs about what a 720p one does and every pixel outside the region is left byte-identical; the
  pasted skin's fine detail is then matched to the photo's (:mod:`.detail`, issue 17).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import cv2
import numpy as np

from .detail import match_detail
from .engine import FusionOptions, RenderedFace
from .occlusion import OcclusionMasks
from .relight import relight, skin_chroma
from .shading import ShapeNormals, relight_sh

PYRAMID_LEVELS = 5
CONTRAST_LIMITS = (0.8, 1.25)  # the most colour matching may shrink or stretch the face's contrast, locally
GREY_CHROMA_SPREAD = 3.0  # 8-bit a*/b* levels: a target face whose chroma spans less is a black-and-white photo

# A video passes one of these to carry the colour transfer over time: it gets this frame's float lookup tables
# (256×3) and returns the ones to apply, so the colour correction cannot flicker from frame to frame.
LutSmoother = Callable[[np.ndarray], np.ndarray]


def _uint8_quantiles(values: np.ndarray, quantiles: np.ndarray) -> np.ndarray:
    """Quantiles of 8-bit values from their histogram (linear within a level): no sort, ~50× faster."""
    cdf = np.cumsum(np.bincount(values, minlength=256)).astype(np.float64)
    cdf /= cdf[-1]
    return np.interp(quantiles, cdf, np.arange(256, dtype=np.float64) + 0.5)


def _histogram_luts(face_lab: np.ndarray, target_lab: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per-channel 256-entry lookup tables (float, 256×3) mapping the face's Lab histogram inside ``weight`` onto
    the target's.

    The mapping's slope is held within ``CONTRAST_LIMITS`` everywhere (then re-anchored at the median): a skin
    histogram is peaked, and unlimited matching stretches that peak, turning JPEG noise and pores into blotches.
    """
    inside = weight[::2, ::2] > 0
    levels = np.arange(256, dtype=np.float64)
    quantiles = np.linspace(0.02, 0.98, 49)
    luts = []
    for channel in range(3):
        face_q = _uint8_quantiles(face_lab[::2, ::2, channel][inside], quantiles)
        target_q = _uint8_quantiles(target_lab[::2, ::2, channel][inside], quantiles)
        matched = np.interp(levels, face_q + np.arange(len(quantiles)) * 1e-6, target_q)
        if channel > 0 and np.ptp(target_q) < GREY_CHROMA_SPREAD:
            # a black-and-white target: the new face is too (the contrast floor kept 80 % of a colour source's
            # chroma, and its eyes and lips came out tinted on a grey photo)
            luts.append(np.full(256, float(np.median(target_q))))
            continue
        slopes = np.clip(np.diff(matched), *CONTRAST_LIMITS)
        lut = np.concatenate([[0.0], np.cumsum(slopes)])
        median = int(round(face_q[len(face_q) // 2]))
        luts.append(lut + (matched[median] - lut[median]))
    return np.stack(luts, axis=1)


def match_colour(face: np.ndarray, target: np.ndarray, mask: np.ndarray, face_skin: np.ndarray | None = None,
                 target_skin: np.ndarray | None = None, smooth_luts: LutSmoother | None = None,
                 normals: ShapeNormals | None = None, robust: bool = True) -> np.ndarray:
    """The face's colours and lighting moved to the target's inside ``mask`` (both uint8 RGB crops).

    Histogram matching per channel in Lab (perceptual: lightness apart from colour) fixes skin tone and contrast,
    applied as lookup tables on OpenCV's 8-bit Lab; then the light: with the faces' 3-D ``normals``,
    :func:`relight_sh` lights the source's shape by the target's light; without, :func:`relight` gives the face the
    target's shading. Both read each photo's own bare skin (``face_skin``/``target_skin``; the eroded mask when not
    given); ``robust``: each photo's skin far from its own shading is not light (:func:`relight`).
    """
    # the inner face: skin and features in both photos, without the hair and background near the mask's edge
    inner = cv2.erode((mask > 0.5).astype(np.uint8), np.ones((3, 3), np.uint8), iterations=max(1, face.shape[0] // 40))
    weight = inner.astype(np.float32)
    if weight.sum() < 64:
        return face
    face_lab = cv2.cvtColor(face, cv2.COLOR_RGB2Lab)
    target_lab = cv2.cvtColor(target, cv2.COLOR_RGB2Lab)
    luts = _histogram_luts(face_lab, target_lab, weight)
    if smooth_luts is not None:
        luts = smooth_luts(luts)
    luts8 = np.clip(luts + 0.5, 0, 255).astype(np.uint8)
    matched = cv2.LUT(face_lab, luts8[None])
    columns = np.flatnonzero(weight.max(axis=0))
    face_width = float(columns[-1] - columns[0] + 1)
    face_skin = weight if face_skin is None else face_skin
    target_skin = weight if target_skin is None else target_skin
    if normals is not None:
        return relight_sh(cv2.cvtColor(matched, cv2.COLOR_Lab2RGB), target, face_skin, target_skin, normals,
                          face_width)
    # the source skin's colour before the matching: how far its features' colour may stand from the skin's
    source_chroma = skin_chroma(face_lab[::2, ::2][face_skin[::2, ::2] > 0.5]) if face_skin[::2, ::2].max() > 0.5 \
        else None
    return relight(matched, target_lab, face_skin, target_skin, face_width, source_chroma, robust)


def multiband_blend(foreground: np.ndarray, background: np.ndarray, alpha: np.ndarray,
                    levels: int = PYRAMID_LEVELS) -> np.ndarray:
    """Blend each frequency band with a mask blurred to that band's scale (Burt & Adelson).

    Built as one pyramid, of ``foreground − background``: each band's blend ``lap(fg)·a + lap(bg)·(1 − a)`` is
    ``lap(bg) + lap(fg − bg)·a`` (the pyramid is linear) and the background's own pyramid collapses back to the
    background, so only the difference's pyramid is needed — half the work of two, the same result up to float
    rounding (one level on a few pixels in 10^5)."""
    bg = background.astype(np.float32)
    diff, a = foreground.astype(np.float32) - bg, alpha.astype(np.float32)
    gauss_a = [a]
    lap = []
    for _ in range(levels):
        down = cv2.pyrDown(diff)
        lap.append(diff - cv2.pyrUp(down, dstsize=(diff.shape[1], diff.shape[0])))
        diff = down
        gauss_a.append(cv2.pyrDown(gauss_a[-1]))
    # the masks made 3-channel by OpenCV: NumPy's broadcast of an (h, w, 1) mask loops over 3-element rows (~3×)
    gauss_a = [cv2.cvtColor(mask, cv2.COLOR_GRAY2RGB) for mask in gauss_a]
    out = diff * gauss_a[-1]
    for level in range(levels - 1, -1, -1):
        size = (lap[level].shape[1], lap[level].shape[0])
        out = cv2.pyrUp(out, dstsize=size) + lap[level] * gauss_a[level]
    out += bg + 0.5
    return np.clip(out, 0, 255, out=out).astype(np.uint8)


def poisson_blend(foreground: np.ndarray, background: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Gradient-domain (Poisson) cloning of the face into the target, kept as the measured alternative."""
    mask = (alpha > 0.5).astype(np.uint8) * 255
    ys, xs = np.nonzero(mask)
    if xs.size == 0:
        return background
    centre = (int((xs.min() + xs.max() + 1) // 2), int((ys.min() + ys.max() + 1) // 2))
    return cv2.seamlessClone(foreground, background, mask, centre, cv2.NORMAL_CLONE)


def unsharp(image: np.ndarray, amount: float, weight: np.ndarray, limit: float = 12.0) -> np.ndarray:
    """Unsharp mask of the lightness inside ``weight``, the same detail added to the three channels; it is clipped to
    ±``limit`` levels so edges get no halo.

    Why the lightness alone: sharpened channel by channel, a red lip's edge took opposite detail in green and blue
    and came back with a cyan rim above it (a lipsticked source onto a bearded target, issue 17: 46 pixels turned
    green round the new lips, 13 without sharpening); an edge's colour is the photo's to keep, its contrast ours."""
    if amount <= 0:
        return image
    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    detail = cv2.subtract(grey, cv2.GaussianBlur(grey, (0, 0), 1.2), dtype=cv2.CV_16S)
    detail = np.clip(detail, -limit, limit).astype(np.float32) * (amount * weight).astype(np.float32, copy=False)
    return cv2.add(image, cv2.cvtColor(detail, cv2.COLOR_GRAY2RGB), dtype=cv2.CV_8U)


def paste_back(image: np.ndarray, crop: np.ndarray, region: np.ndarray, matrix: np.ndarray,
               detail: np.ndarray | None = None) -> np.ndarray:
    """Put ``crop`` back into ``image`` where ``region`` > 0, resampling only the region's bounding box.

    Colour and region travel as one 4-channel warp (bicubic: the face's fine detail survives the trip); pixels
    whose warped region weight is 0 keep their exact bytes. With ``detail`` (a 0–1 weight in the crop: the new
    face's bare skin and the reshaped target around it) the pasted fine detail is brought to the photo's own level
    there (:func:`detail.match_detail`).
    """
    inverse = cv2.invertAffineTransform(matrix)
    box_in_crop = _bounding_box(region)
    if box_in_crop is None:
        return image
    (cx0, cy0), (cx1, cy1) = box_in_crop
    corners = np.array([[cx0, cy0], [cx1, cy0], [cx0, cy1], [cx1, cy1]], dtype=np.float64)
    footprint = corners @ inverse[:, :2].T + inverse[:, 2]
    height, width = image.shape[:2]
    x0, y0 = np.maximum(np.floor(footprint.min(0)).astype(int) - 1, 0)
    x1, y1 = np.minimum(np.ceil(footprint.max(0)).astype(int) + 2, [width, height])
    if x1 <= x0 or y1 <= y0:
        return image
    shifted = inverse.copy()
    shifted[:, 2] -= (x0, y0)
    # one 4-channel image by OpenCV (NumPy's dstack, scale, clip and cast cost 1.9 ms on a 720p face's box, this 0.4)
    rgba = cv2.merge([crop, cv2.convertScaleAbs(region, alpha=255.0)])
    warped = cv2.warpAffine(rgba, shifted, (int(x1 - x0), int(y1 - y0)), flags=cv2.INTER_CUBIC,
                            borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0, 0))
    alpha = warped[..., 3].astype(np.float32) / 255.0
    out = image.copy()
    roi = image[y0:y1, x0:x1]
    # the colour as an image of its own first: OpenCV given the strided view warped[..., :3] copies it pixel by
    # pixel (5 ms of a 4K photo's large face; cvtColor's copy takes 0.1)
    pasted = cv2.blendLinear(cv2.cvtColor(warped, cv2.COLOR_RGBA2RGB), roi, alpha, 1.0 - alpha)
    if detail is not None:
        weight = cv2.warpAffine(detail.astype(np.float32), shifted, (int(x1 - x0), int(y1 - y0)),
                                flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0) * alpha
        pasted = match_detail(pasted, roi, weight, float(np.sqrt(abs(np.linalg.det(matrix[:, :2])))))
    out[y0:y1, x0:x1] = pasted
    return out


BOX_PAD = 8  # crop pixels around the changed region that the relight and blend stages see


def changed_box(region: np.ndarray) -> tuple[slice, slice] | None:
    """(rows, columns) of the crop the relight and blend stages read and write: the box of the changed ``region``
    grown by ``BOX_PAD``; None when nothing changes. An engine need not compute its crops outside it."""
    box = _bounding_box(region, pad=BOX_PAD)
    if box is None:
        return None
    (x0, y0), (x1, y1) = box
    return slice(y0, y1 + 1), slice(x0, x1 + 1)


def _bounding_box(mask: np.ndarray, pad: int = 0) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """((x0, y0), (x1, y1)) inclusive box of ``mask`` > 0, grown by ``pad`` within the mask's bounds."""
    rows = np.flatnonzero(mask.max(axis=1) > 1e-3)
    cols = np.flatnonzero(mask.max(axis=0) > 1e-3)
    if rows.size == 0:
        return None
    height, width = mask.shape
    return ((max(0, cols[0] - pad), max(0, rows[0] - pad)),
            (min(width - 1, cols[-1] + pad), min(height - 1, rows[-1] + pad)))


@dataclass(frozen=True, eq=False)
class BlendRegion:
    """The bounding box of the crop's changed region (grown by 8 px) and the crops the relight and blend stages
    work on there: all of it runs on the box only (about half the crop).

    ``parsing`` (the segment stage's masks) keeps the target's occluders and hair on top and keeps the source's
    hair and glasses out; without it the engine's geometric masks alone decide.
    """

    x0: int
    y0: int
    crop: np.ndarray  # the rendered face
    target: np.ndarray  # the reshaped target; under its occluders, the photo's own pixels
    mask: np.ndarray
    keep: np.ndarray  # where the target stays (eyes, mouth interior, outside the mask, occluders)
    paste: np.ndarray  # the region pasted back
    face_skin: np.ndarray | None
    target_skin: np.ndarray | None
    on_top: np.ndarray | None  # the target's occluders, kept as the photo's own bytes
    detail: np.ndarray  # where the paste-back matches the fine detail to the photo's (issue 17)
    normals: ShapeNormals | None  # the faces' 3-D normals on the box, for the light from shape


def blend_region(rendered: RenderedFace, parsing: OcclusionMasks | None = None) -> BlendRegion | None:
    """What the relight and blend stages need of one rendered face; None when nothing in the crop changes."""
    region = rendered.region if rendered.region is not None else rendered.mask
    sub = changed_box(region)
    if sub is None:
        return None
    y0, x0 = sub[0].start, sub[1].start
    crop, target, mask = rendered.crop[sub], rendered.target_crop[sub], rendered.mask[sub]
    face_skin = target_skin = None if rendered.skin is None else rendered.skin[sub]
    # The target's eyes and mouth interior go into the face *before* the multi-band blend: a small hole in the blend
    # mask would otherwise be filled by the face's low frequencies (pink teeth, washed-out irises). Outside the mask
    # the engine's crop is meaningless (the source's background, suit, hair) and the pyramid's coarse levels would
    # smear it across the jaw, so the face is laid over the target there too.
    keep = np.where(mask > 0.01, 0.0, 1.0).astype(np.float32)
    if rendered.keep_target is not None:
        keep = np.maximum(keep, rendered.keep_target[sub])
    paste, on_top = region[sub], None
    if parsing is not None:
        # the photo's own pixels under its occluders; elsewhere the reshaped target
        target = cv2.blendLinear(parsing.target_photo[sub], target, parsing.target_keep[sub],
                                 1.0 - parsing.target_keep[sub])
        keep = np.maximum(keep, np.maximum(parsing.target_keep[sub], parsing.source_hidden[sub]))
        base = np.ones_like(mask) if face_skin is None else face_skin
        face_skin = base * parsing.source_skin[sub] * (1.0 - parsing.source_hidden[sub])
        target_skin = base * parsing.target_skin[sub] * (1.0 - parsing.target_keep[sub])
        # an occluder stays the photo's own bytes: the pyramid would soften a glasses frame into the new skin, and
        # a round trip through the crop would resample it, so the paste-back leaves those pixels alone
        on_top = parsing.target_keep[sub] * (mask > 0.01)
        paste = paste * (1.0 - on_top)
    # skin detail (issue 17): matched to the photo's on the new face's bare skin and the target's own reshaped
    # pixels around it (not the new features, not what stays on top)
    skin = 1.0 if rendered.skin is None else rendered.skin[sub]
    detail = np.maximum(mask * (1.0 - keep) * skin, 1.0 - mask)
    if on_top is not None:
        detail = detail * (1.0 - on_top)
    normals = None if rendered.normals is None else ShapeNormals(
        rendered.normals.new[sub], rendered.normals.source[sub], rendered.normals.target[sub])
    return BlendRegion(x0, y0, crop, target, mask, keep, paste, face_skin, target_skin, on_top, detail, normals)


def blend_in(image: np.ndarray, rendered: RenderedFace, region: BlendRegion, lit: np.ndarray,
             options: FusionOptions) -> np.ndarray:
    """The target photo with the relit face (``lit``, from the relight stage) blended, sharpened and pasted back."""
    face = cv2.blendLinear(lit, region.target, 1.0 - region.keep, region.keep)
    if options.blend == "poisson":
        blended = poisson_blend(face, region.target, region.mask)
    else:
        blended = multiband_blend(face, region.target, region.mask)
    if region.on_top is not None:
        blended = cv2.blendLinear(region.target, blended, region.on_top, 1.0 - region.on_top)
        blended = unsharp(blended, options.sharpen, region.mask * (1.0 - region.on_top))
    else:
        blended = unsharp(blended, options.sharpen, region.mask)
    to_box = rendered.matrix.copy()
    to_box[:, 2] -= (region.x0, region.y0)  # image → the box's own pixels
    return paste_back(image, blended, region.paste, to_box, region.detail)
