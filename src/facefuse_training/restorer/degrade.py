"""Synthetic degradation of what users actually send: small, soft, compressed faces, some with old-photo grain.

The previous recipe copied GFPGAN's 512 px configuration (downsampling up to ×8, colour and brightness jitter on the
input only). Measured on the hold-out set, a 1 M-parameter U-Net trained on it barely beat its input
(SSIM 0.712 → 0.730): a 16 px face holds too little to restore, and a random brightness ×0.5–1.5 or colour shift
cannot be undone from one photo, so the network learned the average correction and little detail. Here every step is
one a face in a user's photo has been through, in ranges a network of this size can invert:

=================  ==========================================================================================
step               range (crop ``size`` = 128 px, the scale ``facefuse.fusion.restorer`` works at)
=================  ==========================================================================================
blur               p 0.7: Gaussian, isotropic or anisotropic at any angle, σ 0.2 – 3 px (at the crop size)
face size          the crop is resized to 32 – 128 px (``face_px``; area, bilinear, bicubic or nearest)
noise              p 0.5: Gaussian σ 1 – 15 (of 255), colour or luminance-only
old-photo grain    p 0.2: luminance grain blurred over 1–2 px, σ 4 – 12; half of these on a greyscale print
JPEG               quality 15 – 70 (on the small image, as a camera or messenger app stores it)
scale back         bicubic or bilinear to the crop size (resize artefacts), as the pipeline upsamples
greyscale          p 0.03 (+ the grey prints) for input and ground truth alike: restored, not coloured
=================  ==========================================================================================

No colour or brightness jitter: colour is the blend stage's job, and an ill-posed target only teaches the mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

DOWN_INTERPOLATIONS = (cv2.INTER_AREA, cv2.INTER_LINEAR, cv2.INTER_CUBIC, cv2.INTER_NEAREST)
UP_INTERPOLATIONS = (cv2.INTER_CUBIC, cv2.INTER_LINEAR)


@dataclass(frozen=True)
class DegradeConfig:
    size: int = 128
    face_px: tuple[float, float] = (32.0, 128.0)    # side the face is reduced to (at ``size`` = 128; scaled with it)
    blur_prob: float = 0.7
    blur_sigma: tuple[float, float] = (0.2, 3.0)    # px at the crop size
    noise_prob: float = 0.5
    noise: tuple[float, float] = (1.0, 15.0)        # σ of 255
    grain_prob: float = 0.2
    grain: tuple[float, float] = (4.0, 12.0)        # σ of 255, before its 1–2 px blur
    jpeg: tuple[int, int] = (15, 70)
    gray_prob: float = 0.03

    @property
    def scale(self) -> float:
        return self.size / 128.0

    @property
    def kernel_size(self) -> int:
        k = int(np.ceil(3 * self.blur_sigma[1] * self.scale)) * 2 + 1
        return max(3, k)


def blur_kernel(rng: np.random.Generator, config: DegradeConfig) -> tuple[np.ndarray, float]:
    """An isotropic or anisotropic (rotated) Gaussian kernel, normalised to sum 1, and its larger σ (px)."""
    lo, hi = (s * config.scale for s in config.blur_sigma)
    sx = rng.uniform(lo, hi)
    sy = sx if rng.random() < 0.5 else rng.uniform(lo, hi)
    theta = rng.uniform(-np.pi, np.pi)
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    inv = np.linalg.inv(rot @ np.diag([sx * sx, sy * sy]) @ rot.T)
    r = config.kernel_size // 2
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1]
    grid = np.stack([xx, yy], -1).astype(np.float64)
    kernel = np.exp(-0.5 * np.einsum("...i,ij,...j->...", grid, inv, grid))
    return (kernel / kernel.sum()).astype(np.float32), float(max(sx, sy))


@dataclass(frozen=True)
class Degraded:
    lq: np.ndarray      # degraded, back at the crop size, float32 RGB in [0, 1]
    small: np.ndarray   # the low-resolution image before scaling back (for the bicubic baseline)
    gt: np.ndarray      # ground truth, float32 RGB in [0, 1] (greyscale when the gray branch fired)
    side: int = 0       # the side the face was reduced to (= size: not reduced), for per-bucket reports
    quality: int = 0    # the JPEG quality it was stored with
    blur: float = 0.0   # the larger blur σ in px at the crop size (0: not blurred)


def _grey(img: np.ndarray) -> np.ndarray:
    return np.repeat(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)[:, :, None], 3, axis=2)


def _noise(img: np.ndarray, rng: np.random.Generator, config: DegradeConfig) -> np.ndarray:
    sigma = rng.uniform(*config.noise) / 255.0
    if rng.random() < 0.5:
        return img + rng.normal(0.0, sigma, img.shape).astype(np.float32)
    return img + rng.normal(0.0, sigma, img.shape[:2] + (1,)).astype(np.float32)


def _grain(img: np.ndarray, rng: np.random.Generator, config: DegradeConfig) -> np.ndarray:
    """Film grain: clumped (blurred) luminance noise."""
    sigma = rng.uniform(*config.grain) / 255.0
    grain = rng.normal(0.0, 1.0, img.shape[:2]).astype(np.float32)
    grain = cv2.GaussianBlur(grain, (0, 0), rng.uniform(0.6, 1.2))
    grain *= sigma / max(float(grain.std()), 1e-6)
    return img + grain[:, :, None]


def degrade(rgb: np.ndarray, rng: np.random.Generator, config: DegradeConfig = DegradeConfig()) -> Degraded:
    """Degrade one uint8 RGB face of ``config.size``×``config.size``."""
    gt = rgb.astype(np.float32) / 255.0
    grain = rng.random() < config.grain_prob
    # a greyscale photo stays greyscale (old prints often are): colourising is not this model's job
    if rng.random() < config.gray_prob or (grain and rng.random() < 0.5):
        gt = _grey(gt)
    img = gt
    blur = 0.0
    if rng.random() < config.blur_prob:
        kernel, blur = blur_kernel(rng, config)
        img = cv2.filter2D(img, -1, kernel, borderType=cv2.BORDER_REFLECT)
    side = int(round(rng.uniform(*config.face_px) * config.scale))
    side = min(config.size, max(8, side))
    if side < config.size:
        img = cv2.resize(img, (side, side), interpolation=DOWN_INTERPOLATIONS[rng.integers(len(DOWN_INTERPOLATIONS))])
    if rng.random() < config.noise_prob:
        img = _noise(img, rng, config)
    if grain:
        img = _grain(img, rng, config)
    u8 = np.clip(img * 255.0 + 0.5, 0, 255).astype(np.uint8)
    quality = int(rng.integers(config.jpeg[0], config.jpeg[1] + 1))
    ok, buf = cv2.imencode(".jpg", u8[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    small = cv2.imdecode(buf, cv2.IMREAD_COLOR)[:, :, ::-1].astype(np.float32) / 255.0
    up = UP_INTERPOLATIONS[rng.integers(len(UP_INTERPOLATIONS))]
    lq = cv2.resize(small, (config.size, config.size), interpolation=up) if side < config.size else small
    return Degraded(lq=np.clip(lq, 0, 1).astype(np.float32), small=np.ascontiguousarray(small), gt=gt,
                    side=side, quality=quality, blur=blur / config.scale)
