"""Skin detail that matches the photo: the new face's fine texture brought to the level of the target's own skin,
place by place.

Why: a rendered face passes through resampling (photo → crop → photo) and a multi-band blend, and a large face
whose crop is smaller than it is loses the finest band outright; the new skin then looks "plastic" beside the
sharp ears, neck and hair of the photo (issue 17 measured a median 0.26× of the target's fine-detail energy).
Two steps, on the pasted box only, both weighted by the bare skin of the new face (never a feature, never an
occluder), never a blur of the face:

- the band the crop could not hold (finer than the crop's own pixel, for a face rendered below the photo's
  resolution) is the target's own grain at those pixels — pores, film grain, sensor noise, JPEG character — so
  it is taken from the target photo;
- the new face's own high frequencies (its pores and fine wrinkles) are then rescaled so their *local* energy —
  the variance of the Laplacian of the luminance on the skin, averaged over a neighbourhood of
  ``LOCAL_SIGMA_FRACTION`` of the face — equals the target's there: softer skin is sharpened, a source much
  sharper than a soft target is calmed. One gain for the whole face (the first version) followed the lit half of a
  side-lit face, whose texture is strong, and made the shadowed half — where the photo's texture is as dark as the
  light — visibly grainy (faces/hard/sidelight/01); a local gain follows the photo's texture level and its
  brightness at once, since a shadow darkens texture with everything else.
"""

from __future__ import annotations

import cv2
import numpy as np

HIGH_PASS_SIGMA = 2.0  # px of the photo: the band the gain rescales
GAIN_LIMITS = (-0.85, 2.5)  # how far the band may be calmed / amplified
LOCAL_SIGMA_FRACTION = 0.05  # of the face's width: the neighbourhood whose texture level the gain follows
MIN_SKIN_PIXELS = 64
# the local energies are averaged at 1/2 resolution, or coarser where the neighbourhood is wider than this many of
# those pixels (a large face in a 4K photo: σ ~30-55 px, whose blur at 1/2 cost ~50 ms); faces up to ~240 px wide
# keep 1/2, and the same pixels. 8 → 4 (issue 19): the 4K case's gain 23 → 13 ms, its output within one level of
# 8's on 0.13 % of the box (the energies are smooth at σ: a coarser grid loses nothing a gain can show)
LOCAL_SIGMA_PX = 4.0


def _grey(image: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32) if image.ndim == 3 else image


def _laplacian(grey: np.ndarray) -> np.ndarray:
    return cv2.Laplacian(grey, cv2.CV_32F, ksize=1)


def band_gain(output: np.ndarray, band: np.ndarray, photo: np.ndarray, skin: np.ndarray,
              sigma: float) -> np.ndarray:
    """The gain map ``k`` (float32, the box's size) for which ``output + k · band`` has the photo's fine-detail
    energy on ``skin`` (bool), in every neighbourhood of Gaussian scale ``sigma`` px.

    Locally Var(Lap(out) + k·Lap(band)) is a quadratic in k, whose terms are skin-weighted Gaussian averages
    (normalised convolution): solved exactly, the larger root taken, held in GAIN_LIMITS. The energies are averaged
    at half resolution or coarser (they are smooth at ``sigma``; see ``LOCAL_SIGMA_PX``), where the five blurs cost
    a quarter or less."""
    lap_out, lap_band, lap_photo = (_laplacian(_grey(a)) for a in (output, band, photo))
    weight = skin.astype(np.float32)
    height, width = weight.shape
    factor = max(2, int(sigma // LOCAL_SIGMA_PX))
    coarse = (max(1, width // factor), max(1, height // factor))
    # averaged over the box trimmed to whole factor × factor blocks (OpenCV's fast area path; a non-integer scale
    # costs ~3× more), the few rows and columns beyond taking the nearest block's gain
    trimmed = (min(width, coarse[0] * factor), min(height, coarse[1] * factor))

    def local(values: np.ndarray) -> np.ndarray:
        # OpenCV resizes at most 4 channels at once: the four terms of one neighbourhood go as one image
        small = cv2.resize(values[:trimmed[1], :trimmed[0]], coarse, interpolation=cv2.INTER_AREA)
        return cv2.GaussianBlur(small, (0, 0), max(sigma / factor, 0.5))

    terms = local(cv2.merge([weight, lap_out * lap_out * weight, lap_out * lap_band * weight,
                             lap_band * lap_band * weight]))
    norm = np.maximum(terms[..., 0], 1e-6)
    a, b, c = (terms[..., i] / norm for i in (1, 2, 3))
    wanted = local(lap_photo * lap_photo * weight) / norm
    disc = b * b - c * (a - wanted)
    safe_c = np.maximum(c, 1e-9)
    # no exact root: the closest energy; no band at all: no gain
    k = np.where(disc >= 0, (-b + np.sqrt(np.maximum(disc, 0.0))) / safe_c, -b / safe_c)
    k = np.where(c > 1e-9, np.clip(k, *GAIN_LIMITS), 0.0).astype(np.float32)
    k = cv2.resize(k, trimmed, interpolation=cv2.INTER_LINEAR)
    return cv2.copyMakeBorder(k, 0, height - trimmed[1], 0, width - trimmed[0], cv2.BORDER_REPLICATE)


def match_detail(output: np.ndarray, photo: np.ndarray, weight: np.ndarray, crop_scale: float) -> np.ndarray:
    """``output`` (uint8 RGB box of the fused photo) with its skin's fine detail at ``photo``'s level (the target's
    pixels at the same box); ``weight`` (float32 0–1) is where to match: the new face's bare skin and the target's
    own reshaped pixels around it; ``crop_scale`` the crop pixels per photo pixel the face was rendered at."""
    skin = weight > 0.5
    if skin.sum() < MIN_SKIN_PIXELS:
        return output
    # in place where it can be (the box of a large face in a 4K photo is ~0.6 Mpx: each temporary costs ~1 ms),
    # and weights made 3-channel by OpenCV: NumPy's broadcast of an (h, w, 1) weight over RGB loops over
    # 3-element rows, 3.8 ms on that box against 1.2 (the same products)
    out = output.astype(np.float32)
    source = photo.astype(np.float32)
    weight = weight.astype(np.float32, copy=False)  # OpenCV's 3-channel copy below takes float32, not float64
    if crop_scale < 0.95:
        # finer than a crop pixel the render holds nothing: the photo's own grain goes there
        grain = cv2.GaussianBlur(source, (0, 0), 0.5 / crop_scale)
        np.subtract(source, grain, out=grain)
        grain *= cv2.cvtColor(weight, cv2.COLOR_GRAY2RGB)
        out += grain
    band = cv2.GaussianBlur(out, (0, 0), HIGH_PASS_SIGMA)
    np.subtract(out, band, out=band)
    columns = np.flatnonzero(skin.any(axis=0))
    sigma = max(LOCAL_SIGMA_FRACTION * float(columns[-1] - columns[0] + 1), 2.0)
    gain = band_gain(out, band, source, skin, sigma)
    gain *= weight
    band *= cv2.cvtColor(gain, cv2.COLOR_GRAY2RGB)
    out += band
    out += 0.5
    return np.clip(out, 0, 255, out=out).astype(np.uint8)
