"""Post-fusion enhancement: the fused face made as sharp as the photo around it when the source had too few pixels.

A 50 px source face rendered into a 150 px target face is an upsampled blur: the engine cannot make detail the
source never had, and the new skin looks plastic beside the photo's sharp hair and ears (FaceFusion's
``face_enhancer`` exists for this). Here the trained restorer adds that detail back, measured, never blindly:

1. Only when the source face was ``min_upscale``× or more smaller than the face it was rendered into.
2. The fused face region is restored coarse to fine: first with the face at the restorer's working scale
   (~``work_face_px``, never enlarged), then at each doubling up to the photo's resolution, each pass on the previous
   one's result, so a face rendered 6× larger than its source gets detail in every octave and not only the
   coarsest. Only the *detail* each pass adds — finer than ``detail_sigma`` at its scale — is kept. Tones and
   colours are untouched, so the enhancement cannot create or move a smear (a low-pass Lab difference) and
   cannot undo the relight or colour match. Of that detail only what is *new* is kept (:func:`new_detail`): the
   restorer would also remove the fine band the fusion's detail step gave the skin, which it reads as noise.
3. The detail is added with the smallest gain that brings the skin's high-frequency energy (variance of the
   Laplacian of L on the bare-skin zone) to ``target_ratio`` × the target photo's own, at most ``max_gain``: sharper
   than the photo would be as wrong as softer.
4. What the restorer cannot reach (it was trained to *remove* noise and grain, so it adds edges, not pores) is
   topped up with luminance grain matched to the photo's (``grain``): the fused skin gets the photo's texture
   level instead of looking plastic beside it.

The pipeline's ``post`` stage calls :func:`enhance_fused` once per fused face and reports the note.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import cv2
import numpy as np

from ..analysis.types import Face
from ..geometry.regions import FACE_OVAL, feather, polygon_mask, skin_mask
from .restorer import Restorer, face_region


@dataclass(frozen=True)
class EnhanceConfig:
    """When the fused face is enhanced, and how much."""

    min_upscale: float = 1.5      # target face side / source face side at which a fused face is soft
    work_face_px: float = 100.0   # the restorer's training scale (as RestoreConfig.work_face_px)
    margin: float = 0.15          # context around the face box the restorer sees (0.35 until round 3's twenty-third
                                  # stop: the detail goes on the bare skin, inside the box; the same post-fusion
                                  # figures in BENCHMARKS.md for ~40 % less of the restorer's work)
    detail_sigma: float = 1.0     # px at the working scale: only detail finer than this is added (2.0 lowered
                                  # MobileFaceNet's cosine by 0.014 on one small-source pair, 1.0 by 0.004)
    target_ratio: float = 1.0     # skin sharpness sought, as a multiple of the target photo's
    max_gain: float = 1.0         # 1.5 lowered MobileFaceNet's cosine by 0.03–0.06 on small-source pairs
    gain_step: float = 0.1        # 0.25 overshot the photo's sharpness (median 1.08×) on 48 px sources
    new_detail_only: bool = True  # drop the part of the restorer's change that removes the skin's existing fine band
    grain: bool = True            # top up what detail cannot reach with grain matched to the photo's
    grain_ratio: float = 0.2      # grain tops up to this × the photo's sharpness: at 0.8 it lowered identity
                                  # (cos −0.03 median) and looked noisier than real pores; 0.2 cost none
    grain_sigma: float = 0.6      # px: the grain's blur (a camera's grain is a pixel or two wide)
    seed: int = 0                 # the grain is the same for the same input (reproducible results)
    skin_only: bool = True        # detail goes on the bare skin only, never on brows, eyes and lips (see
                                  # _detail_alpha)


@dataclass(frozen=True)
class Enhanced:
    """The (possibly) enhanced photo, the gain used (0: unchanged), skin sharpness ÷ the target's before and after,
    and a note for the result's warnings (None when nothing was done and nothing needs saying)."""

    image: np.ndarray
    gain: float
    ratio_before: float
    ratio_after: float
    note: str | None


def skin_zone(face: Face, shape: tuple[int, ...]) -> np.ndarray:
    """Bare skin of ``face`` in image pixels (float32 0/1): the mesh's oval without brows, eyes and lips; an ellipse
    in the box when the face has no mesh."""
    h, w = shape[:2]
    if face.landmarks is not None:
        side = max(h, w)
        return skin_mask(face.landmarks[:, :2], side)[:h, :w]
    x, y, bw, bh = (float(v) for v in face.box)
    mask = np.zeros((h, w), np.float32)
    cv2.ellipse(mask, (int(x + bw / 2), int(y + bh / 2)), (int(bw * 0.4), int(bh * 0.45)), 0, 0, 360, 1.0, -1)
    return mask


def skin_sharpness(image: np.ndarray, zone: np.ndarray) -> float:
    """High-frequency energy of the skin: variance of the Laplacian of L (CIE Lab) inside ``zone``.

    Computed on the zone's box grown by the Laplacian's one-pixel reach only: the same values as over the whole photo
    (a box on the photo's edge keeps its border rule), for a face's share of the work (a 720p photo's face: 10 ms
    → under 1; the enhancer measured it three times per fusion, issue 19)."""
    inside = zone > 0.5
    rows, columns = np.flatnonzero(inside.any(axis=1)), np.flatnonzero(inside.any(axis=0))
    if rows.size == 0:
        return 0.0
    y0, y1 = max(rows[0] - 1, 0), min(rows[-1] + 2, inside.shape[0])
    x0, x1 = max(columns[0] - 1, 0), min(columns[-1] + 2, inside.shape[1])
    lightness = cv2.cvtColor(image[y0:y1, x0:x1].astype(np.float32) / 255.0, cv2.COLOR_RGB2Lab)[:, :, 0]
    values = cv2.Laplacian(lightness, cv2.CV_32F)[inside[y0:y1, x0:x1]]
    return float(values.var()) if values.size > 16 else 0.0


def _detail_alpha(face: Face, shape: tuple[int, ...], skin_only: bool) -> np.ndarray:
    """Where the detail goes, feathered: the bare skin (``skin_only``) or the whole face oval (the box's ellipse
    when the face has no mesh).

    Why the skin only: the sharpness sought is the skin's, and the brows, eyes and lips are the source's identity.
    On the whole oval the restorer's crisper eyelids, lip lines and teeth lowered MobileFaceNet's cosine by up to
    0.018 on the 18 small-source pairs of BENCHMARKS.md (paul_rudd onto alex_lacamoire: the teeth and lip line)."""
    h, w = shape[:2]
    if skin_only or face.landmarks is None:
        zone = skin_zone(face, shape)
    else:
        zone = polygon_mask(face.landmarks[FACE_OVAL, :2], max(h, w))[:h, :w]
    return feather(zone.astype(np.float32), max(2.0, 0.03 * float(max(face.box[2], face.box[3]))))


def working_scales(side: float, work_face_px: float) -> list[float]:
    """Scales (≤ 1) at which the restorer passes run, coarse to fine: the face at ``work_face_px``, then doubled
    until the photo's own resolution — each pass sees a blur it was trained on (up to ×4) and adds a finer octave."""
    scales = []
    scale = min(1.0, work_face_px / max(side, 1.0))
    while scale < 1.0:
        scales.append(scale)
        scale *= 2.0
    return [*scales, 1.0]


def restored_detail(region: np.ndarray, side: float, restorer: Restorer, config: EnhanceConfig) -> np.ndarray:
    """The detail (float, RGB 0–255 units) the restorer adds to ``region``, at the region's own resolution: one
    pass per octave from the working scale up (:func:`working_scales`), each on the previous one's result, only
    detail finer than ``detail_sigma`` at that pass's scale kept."""
    h, w = region.shape[:2]
    base = region.astype(np.float32)
    current = base
    for scale in working_scales(side, config.work_face_px):
        size = (max(8, round(w * scale)), max(8, round(h * scale)))
        small = current if scale == 1.0 else cv2.resize(current, size, interpolation=cv2.INTER_AREA)
        small_u8 = np.clip(small + 0.5, 0, 255).astype(np.uint8)
        delta = restorer.restore(small_u8).astype(np.float32) - small_u8
        delta -= cv2.GaussianBlur(delta, (0, 0), config.detail_sigma)
        current = current + (delta if scale == 1.0 else cv2.resize(delta, (w, h), interpolation=cv2.INTER_CUBIC))
    return current - base


def new_detail(detail: np.ndarray, region: np.ndarray, zone: np.ndarray, alpha: np.ndarray,
               sigma: float) -> np.ndarray:
    """The restorer's ``detail`` without its denoising: the component along the region's own fine band (finer than
    ``sigma``) is removed when it is negative, i.e. where the restorer would take away existing detail.

    Why: the fusion's detail step gives the new skin the photo's fine band, which the restorer — trained to remove
    noise and grain — reads as noise; on the 18 small-source pairs of BENCHMARKS.md its detail correlated −0.6 to
    −0.9 with that band, so adding it made the skin softer and the enhancer always declined. What is left is what
    the restorer adds that the skin did not have (crisper brows, eyelids and lips): skin sharpness ÷ the photo's
    0.88 → 1.08 at gain ≤ 1 (steps of 0.25), identity median +0.003, worst −0.010, smear +0.03 pt at most."""
    base = region.astype(np.float32)
    band = (base - cv2.GaussianBlur(base, (0, 0), sigma)) * alpha
    inside = zone > 0.5
    beta = float((detail[inside] * band[inside]).sum() / max(float((band[inside] ** 2).sum()), 1e-9))
    return detail - beta * band if beta < 0 else detail


def matched_grain(shape: tuple[int, int], needed: float, sigma: float, seed: int) -> np.ndarray:
    """Luminance grain (float, 0–255 units, one channel) whose Laplacian-of-L variance is about ``needed``.

    Independent zero-mean noise adds its Laplacian variance to the image's, so the amplitude is solved from one
    measurement of unit-amplitude grain. It is finer than any feature and has no low frequencies: it cannot
    smear, and it stands in for the pores, film grain and sensor noise a small source never had."""
    noise = np.random.default_rng(seed).normal(0.0, 1.0, shape).astype(np.float32)
    noise = cv2.GaussianBlur(noise, (0, 0), sigma)
    # L (0–100) moves by ~100/255 per unit of 0–255 grey near mid-tones
    unit = float(cv2.Laplacian(noise * (100.0 / 255.0), cv2.CV_32F).var())
    return noise * float(np.sqrt(max(needed, 0.0) / max(unit, 1e-9)))


def _shifted(face: Face, x0: int, y0: int) -> Face:
    """The face in the coordinates of a region whose corner is (x0, y0)."""
    landmarks = None
    if face.landmarks is not None:
        landmarks = face.landmarks.astype(np.float32).copy()
        landmarks[:, :2] -= (x0, y0)
    box = face.box.astype(np.float32).copy()
    box[:2] -= (x0, y0)
    return replace(face, box=box, keypoints=face.keypoints - np.array([x0, y0], np.float32), landmarks=landmarks)


def enhance_fused(fused: np.ndarray, target: np.ndarray, face: Face, source_face_px: float, restorer: Restorer,
                  config: EnhanceConfig = EnhanceConfig()) -> Enhanced:
    """``fused`` (uint8 RGB, the photo after blending) with the face at ``face`` (the target face: the fused face
    lies where it was) enhanced when the source face (``source_face_px`` wide in its photo) was much smaller."""
    side = float(max(face.box[2], face.box[3]))
    zone = skin_zone(face, fused.shape)
    photo = max(skin_sharpness(target, zone), 1e-9)
    ratio_before = skin_sharpness(fused, zone) / photo
    if side / max(source_face_px, 1.0) < config.min_upscale:
        return Enhanced(fused, 0.0, ratio_before, ratio_before, None)
    if ratio_before >= config.target_ratio:
        return Enhanced(fused, 0.0, ratio_before, ratio_before,
                        f"post-fusion enhancement not needed: the fused skin is already {ratio_before:.2f}× as sharp "
                        "as the photo's")
    x0, y0, x1, y1 = face_region(fused, face, config.margin)
    region = fused[y0:y1, x0:x1]
    alpha = _detail_alpha(_shifted(face, x0, y0), region.shape, config.skin_only)[:, :, None]
    detail = restored_detail(region, side, restorer, config) * alpha
    local_zone, base = zone[y0:y1, x0:x1], region.astype(np.float32)
    if config.new_detail_only:
        detail = new_detail(detail, region, local_zone, alpha, config.detail_sigma)
    gain, candidate = 0.0, region
    while gain < config.max_gain - 1e-6:
        gain += config.gain_step
        candidate = np.clip(base + gain * detail + 0.5, 0, 255).astype(np.uint8)
        if skin_sharpness(candidate, local_zone) >= config.target_ratio * photo:
            break
    grain = ""
    short = config.grain_ratio * photo - skin_sharpness(candidate, local_zone)
    if config.grain and short > 0:
        noise = matched_grain(region.shape[:2], short, config.grain_sigma, config.seed)[:, :, None] * alpha
        candidate = np.clip(candidate.astype(np.float32) + noise + 0.5, 0, 255).astype(np.uint8)
        grain = " + grain matched to the photo"
    out = fused.copy()
    out[y0:y1, x0:x1] = candidate
    ratio_after = skin_sharpness(out, zone) / photo
    if ratio_after <= ratio_before:  # the restorer removed more grain than it added detail: leave the face as it was
        return Enhanced(fused, 0.0, ratio_before, ratio_before,
                        f"post-fusion enhancement not applied: it would not sharpen the fused skin "
                        f"({ratio_before:.2f}× the photo's)")
    note = (f"enhanced the fused face (source face {source_face_px:.0f} px in its photo, rendered at {side:.0f} px): "
            f"skin sharpness {ratio_before:.2f}× → {ratio_after:.2f}× the photo's (detail gain {gain:.2f}{grain})")
    return Enhanced(out, gain, ratio_before, ratio_after, note)
