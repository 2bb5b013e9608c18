"""Skin detail that matches the photo: the new face's fine texture brought to the level of the target's own skin.

Why: a rendered face passes through resampling (photo → crop → photo) and a multi-band blend, and a large face
whose crop is smaller than it is loses the finest band outright; the new skin then looks "plastic" beside the
sharp ears, neck and hair of the photo (issue 17 measured a median 0.26× of the target's fine-detail energy).
Two steps, on the pasted box only, both weighted by the bare skin of the new face (never a feature, never an
occluder), never a blur of the face:

- the band the crop could not hold (finer than the crop's own pixel, for a face rendered below the photo's
  resolution) is the target's own grain at those pixels — pores, film grain, sensor noise, JPEG character — so
  it is taken from the target photo;
- the new face's own high frequencies (its pores and fine wrinkles) are then rescaled so their energy — the
  variance of the Laplacian of the luminance on the skin — equals the target's there: softer skin is sharpened,
  a source much sharper than a soft target is calmed, by one closed-form gain.
"""

from __future__ import annotations

import cv2
import numpy as np

HIGH_PASS_SIGMA = 1.0  # px of the photo: the band the gain rescales
GAIN_LIMITS = (-0.7, 2.5)  # how far the band may be calmed / amplified
MIN_SKIN_PIXELS = 64


def _grey(image: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32) if image.ndim == 3 else image


def _laplacian(grey: np.ndarray) -> np.ndarray:
    return cv2.Laplacian(grey, cv2.CV_32F, ksize=1)


def band_gain(output: np.ndarray, band: np.ndarray, photo: np.ndarray, skin: np.ndarray) -> float:
    """The gain ``k`` for which ``output + k · band`` has the photo's fine-detail energy on ``skin`` (bool).

    Var(Lap(out) + k·Lap(band)) is a quadratic in k: solved exactly, the larger root taken, held in GAIN_LIMITS."""
    lap_out, lap_band = _laplacian(_grey(output))[skin], _laplacian(_grey(band))[skin]
    wanted = float(np.var(_laplacian(_grey(photo))[skin]))
    lap_out, lap_band = lap_out - lap_out.mean(), lap_band - lap_band.mean()
    a, b, c = float(np.mean(lap_out ** 2)), float(np.mean(lap_out * lap_band)), float(np.mean(lap_band ** 2))
    if c < 1e-9:
        return 0.0
    disc = b * b - c * (a - wanted)
    k = (-b + np.sqrt(disc)) / c if disc >= 0 else -b / c  # no exact root: the closest energy
    return float(np.clip(k, *GAIN_LIMITS))


def match_detail(output: np.ndarray, photo: np.ndarray, weight: np.ndarray, crop_scale: float) -> np.ndarray:
    """``output`` (uint8 RGB box of the fused photo) with its skin's fine detail at ``photo``'s level (the target's
    pixels at the same box); ``weight`` (float32 0–1) is where to match: the new face's bare skin and the target's
    own reshaped pixels around it; ``crop_scale`` the crop pixels per photo pixel the face was rendered at."""
    skin = weight > 0.5
    if skin.sum() < MIN_SKIN_PIXELS:
        return output
    out = output.astype(np.float32)
    w = weight[..., None]
    if crop_scale < 0.95:
        # finer than a crop pixel the render holds nothing: the photo's own grain goes there
        source = photo.astype(np.float32)
        grain = source - cv2.GaussianBlur(source, (0, 0), 0.5 / crop_scale)
        out += grain * w
    band = out - cv2.GaussianBlur(out, (0, 0), HIGH_PASS_SIGMA)
    gain = band_gain(out, band, photo.astype(np.float32), skin)
    return np.clip(out + gain * band * w + 0.5, 0, 255).astype(np.uint8)
