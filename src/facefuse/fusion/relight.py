"""Relighting: the target's illumination on the new face, the source's removed — the "relight" stage.

Why not a global colour transfer alone: a source lit from the left keeps its bright cheek after any global
mapping, and a person sees that at once. Why not the classic ratio of Gaussian-blurred images over the whole face
(matthewearl/faceswap): it carries the target's own brows, eye sockets and beard along with its light, and the
identity goes with them (about 58 % of identities survive). What we do instead:

- shading is estimated on **skin only** (normalised convolution: a Gaussian average over pixels with weight 1 on
  skin, 0 on brows, eyes, lips, nostrils, hair and occluders), so features never count as light or shadow;
- each photo's estimate uses its own valid skin (the target's glasses or fringe, the source's hair, are excluded
  by the segmentation masks), and the gap under a feature is filled from the skin around it;
- a robust second pass sets aside, in each photo, skin far from that photo's first estimate (deep eye sockets,
  folds, a stray strand): the source's stay as its detail, the target's do not come along; that is worth 2–8
  points of identity and costs most of the blotches that remain, and ``light="full"`` leaves it out
  (:func:`relight`);
- the new face takes ``face - shade(face) + shade(target)`` in Lab, for lightness and colour, at a scale of about
  6 % of the face width: shading broader than a nostril follows the target, detail finer than that (pores,
  wrinkles, the features' own contrast) stays the source's;
- that finer colour (a*, b*) is held, on the skin, to the target skin's own level: a colour-graded source — teal
  shadows, orange highlights, a face lit by an orange wall — brought 1.3–1.6× the photo's colour variation as
  teal eye sockets and orange patches (faces/hard/beard/01 and /04 as sources); a source with no more than the
  target's keeps all of its own (29 of the 54 hard photos as sources);
- the eyes', brows' and lips' colour against the skin around them is scaled as the skin's chroma is from the
  source's to the target's, so features that are nearly grey on a deeply coloured skin stay near grey on a pale one
  instead of crossing to the opposite hue (blue brows and eye whites, :func:`feature_chroma_scale`).

Chosen by measurement on face-api-js (blotch share self / cross) and the colour set (identity top-1): σ 6 % gave
1.3 % / 2.0 % at 94.4 %, σ 9 % 2.1 % / 3.0 % at 94.4 %; a two-scale blend (broad 15 %, fine 6 % at half or ¾
strength) did not raise identity. The result per set is in BENCHMARKS.md (`benchmarks/naturalness.py`).
"""

from __future__ import annotations

import cv2
import numpy as np

SHADING_SIGMA_FRACTION = 0.06  # of the face width: the finest scale at which light is the target's
OUTLIER_LEVELS = 12.0  # Lab L* distance from the first estimate beyond which a pixel is not skin (frames, strands)
TEXTURE_CONTRAST_LIMITS = (0.3, 1.1)  # the most the light may flatten / deepen the source's texture in L*
CHROMA_DETAIL_FLOOR = 0.25  # the least share of the skin's fine colour variation kept (a near-grey target)
CHROMA_FLOOR = 4.0  # 8-bit a*/b* levels: a source skin less coloured than this counts as this (feature_chroma_scale)
_DOWNSCALE = 4  # shading is smooth: estimate it at 1/4 resolution


def skin_shading(lab: np.ndarray, weight: np.ndarray, sigma: float, robust: bool = True) -> np.ndarray:
    """Smooth Lab "shading" of the skin in ``weight`` (0–1), defined everywhere by filling in from nearby skin.

    ``robust`` runs a second pass that down-weights pixels far from the first estimate: dark glasses frames or
    hair strands that no mask removed stop pulling the estimate toward them.
    """
    height, width = weight.shape
    small = (max(1, width // _DOWNSCALE), max(1, height // _DOWNSCALE))
    lab_s = cv2.resize(lab, small, interpolation=cv2.INTER_AREA)
    w_s = cv2.resize(weight, small, interpolation=cv2.INTER_AREA)
    s = max(sigma / _DOWNSCALE, 0.5)
    estimate = _normalised_blur(lab_s, w_s, s)
    if robust:
        distance = np.abs(lab_s[..., 0] - estimate[..., 0]) / OUTLIER_LEVELS
        estimate = _normalised_blur(lab_s, w_s * np.exp(-distance * distance), s)
    return cv2.resize(estimate, (width, height), interpolation=cv2.INTER_LINEAR)


def _normalised_blur(values: np.ndarray, weight: np.ndarray, sigma: float) -> np.ndarray:
    """Weighted Gaussian average; where no weight is near, a 4× wider average (taken at 1/4 resolution, where it
    costs little) fills in, so nothing is undefined."""
    weighted = values * weight[..., None]
    num = cv2.GaussianBlur(weighted, (0, 0), sigma)
    den = cv2.GaussianBlur(weight, (0, 0), sigma)
    height, width = weight.shape
    coarse = (max(1, width // 4), max(1, height // 4))
    wide_num = cv2.GaussianBlur(cv2.resize(weighted, coarse, interpolation=cv2.INTER_AREA), (0, 0), sigma)
    wide_den = cv2.GaussianBlur(cv2.resize(weight, coarse, interpolation=cv2.INTER_AREA), (0, 0), sigma)
    wide = cv2.resize(wide_num / np.maximum(wide_den, 1e-6)[..., None], (width, height), interpolation=cv2.INTER_LINEAR)
    near = np.clip(den / 0.05, 0, 1)[..., None]  # ~5 % of a full neighbourhood of skin is enough to trust it
    return num / np.maximum(den, 1e-6)[..., None] * near + wide * (1 - near)


def skin_chroma(lab: np.ndarray) -> float:
    """The chroma (8-bit Lab a*, b* distance from grey) of the median of skin pixels ``lab`` ((n, 3))."""
    return float(np.hypot(np.median(lab[:, 1]) - 128.0, np.median(lab[:, 2]) - 128.0))


def feature_chroma_scale(theirs: np.ndarray, source_chroma: float) -> np.ndarray:
    """Per pixel, the share of a feature's colour difference from the skin around it that the new face keeps: the
    chroma of the target's skin shading there (``theirs``, 8-bit Lab) over the source skin's (``source_chroma``),
    at most 1.

    Why: colour is the albedo times the light's colour, and the features' albedo is nearly grey — the whites of
    the eyes, dark brows and lashes — against a coloured skin. Kept as a difference from the skin, what set them
    apart from a deeply coloured skin crossed grey to the opposite hue on a paler one: Obama's eye whites, brows and
    lids came out blue-green on the pale, teal-graded faces of faces/hard/sidelight (brows a*, b* −3.1, +1.5 against
    the target's own +2.1, +5.3). Scaled with the skin's chroma, a grey feature stays near grey and a coloured one
    keeps its hue."""
    chroma = cv2.magnitude(theirs[..., 1] - 128.0, theirs[..., 2] - 128.0)
    return np.clip(chroma / max(source_chroma, CHROMA_FLOOR), 0.0, 1.0)


def chroma_detail_gain(face_ab: np.ndarray, target_ab: np.ndarray, face_skin: np.ndarray,
                       target_skin: np.ndarray) -> float:
    """How much of the new face's colour detail (``face_ab``: a*, b* finer than the light) to keep: the target
    skin's RMS over the new face's, at most 1 — a colour-graded source (teal shadows, orange highlights) brings no
    more colour variation to the skin than the target photo's own skin has. The caller may pass every n-th pixel:
    it is a statistic of the whole skin."""
    def rms(ab: np.ndarray, weight: np.ndarray) -> float:
        return float(np.sqrt(np.einsum("ijc,ijc,ij->", ab, ab, weight) / max(float(weight.sum()), 1.0)))
    own, theirs = rms(face_ab, face_skin), rms(target_ab, target_skin)
    return 1.0 if own <= theirs else max(theirs / max(own, 1e-6), CHROMA_DETAIL_FLOOR)


def relight(face_lab: np.ndarray, target_lab: np.ndarray, face_skin: np.ndarray, target_skin: np.ndarray,
            face_width: float, source_chroma: float | None = None, robust: bool = True) -> np.ndarray:
    """``face_lab`` (OpenCV's 8-bit Lab, already in the target's geometry) with its shading replaced by the
    target's; returned as uint8 RGB. ``source_chroma``: the source skin's chroma before any colour matching
    (:func:`skin_chroma`), which scales the features' colour (:func:`feature_chroma_scale`; None: kept whole).

    ``robust`` (:func:`skin_shading`'s second pass, in both photos): skin far from its photo's own shading — the
    source's deep eye sockets and folds, the target's — is detail, not light, so the source keeps its own and the
    target's do not come along. Measured on every shared set (BENCHMARKS.md, "without the relight's robust pass"):
    it is worth 2–8 points of identity top-1, and costs most of the blotches and smears that remain (face-api-js
    cross-person pairs 1.48 → 3.67 %, self-swaps 0.36 → 1.15 %): ``light="full"`` leaves it out."""
    face, target = face_lab.astype(np.float32), target_lab.astype(np.float32)
    sigma = SHADING_SIGMA_FRACTION * face_width
    theirs, own = skin_shading(target, target_skin, sigma, robust), skin_shading(face, face_skin, sigma, robust)
    detail = face - own
    # texture is albedo × light: in the target's shadow the source's pores, wrinkles and grain are as dark as the
    # light, not as contrasted as they were in the source's light (a side-lit face's shadowed half came out grainy
    # and blotchy, faces/hard/sidelight/01); L* is near proportional to the cube root of intensity, so the texture's
    # L* contrast scales with the ratio of the two shadings' L*
    contrast = np.clip(theirs[..., 0] / np.maximum(own[..., 0], 1.0), *TEXTURE_CONTRAST_LIMITS)
    grid = np.s_[::_DOWNSCALE, ::_DOWNSCALE]  # the colour detail's level is read on every 4th pixel
    gain = chroma_detail_gain(detail[grid][..., 1:], (target[grid] - theirs[grid])[..., 1:], face_skin[grid],
                              target_skin[grid])
    # the skin's fine colour at the target skin's level; the eyes, brows and lips keep their colour against the skin
    # around them, scaled as the skin's chroma is from the source's to the target's
    skin = np.clip(face_skin, 0.0, 1.0, dtype=np.float32)
    features = 1.0 if source_chroma is None else feature_chroma_scale(theirs, source_chroma)
    kept = skin * np.float32(min(gain, 1.0)) + (1.0 - skin) * features
    out = theirs + detail * cv2.merge([contrast, kept, kept])
    # rounded and saturated by OpenCV: NumPy's clip, add and cast cost 0.9 ms on a 720p face's box, this 0.3
    return cv2.cvtColor(cv2.add(out, 0.0, dtype=cv2.CV_8U), cv2.COLOR_Lab2RGB)
