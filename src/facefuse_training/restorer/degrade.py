"""Synthetic degradation after GFPGAN's training configuration (``options/train_gfpgan_v1.yml``), scaled to the crop.

GFPGAN degrades 512×512 faces. Quantities measured in pixels scale with the crop (``size / 512``); ratios and
intensities do not:

================  ======================  ==========================================
step              GFPGAN (512 px)         here (crop ``size``; 128 px in the table)
================  ======================  ==========================================
blur kernel       41 px, iso/aniso 50/50  ``41·s`` rounded to odd (11 px), iso/aniso 50/50, any angle
blur σ            0.1 – 10 px             ``0.1·s – 10·s`` (0.025 – 2.5 px)
downsample        ×0.8 – ×8 (bilinear)    ×0.8 – ×8 (bilinear) — a ratio, unchanged
Gaussian noise    σ 0 – 20 (of 255)       σ 0 – 20 (of 255)
JPEG quality      60 – 100                60 – 100
colour jitter     p 0.3, shift ±20        p 0.3, shift ±20 per channel, on the degraded image only
brightness etc.   p 0.3                   p 0.3: brightness 0.5–1.5, contrast 0.5–1.5, saturation 0–1.5
greyscale         p 0.01 (input and GT)   p 0.01 (input and GT)
================  ======================  ==========================================

(``s = size / 512``.) The low-resolution image is scaled back to ``size`` with bilinear interpolation, as GFPGAN
does, so the network maps size → size.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

REFERENCE_SIZE = 512


@dataclass(frozen=True)
class DegradeConfig:
    size: int = 128
    blur_sigma: tuple[float, float] = (0.1, 10.0)       # at REFERENCE_SIZE
    blur_kernel: int = 41                               # at REFERENCE_SIZE
    downsample: tuple[float, float] = (0.8, 8.0)
    noise: tuple[float, float] = (0.0, 20.0)
    jpeg: tuple[int, int] = (60, 100)
    jitter_prob: float = 0.3
    jitter_shift: float = 20.0
    photometric_prob: float = 0.3
    gray_prob: float = 0.01

    @property
    def scale(self) -> float:
        return self.size / REFERENCE_SIZE

    @property
    def kernel_size(self) -> int:
        k = max(3, int(round(self.blur_kernel * self.scale)))
        return k if k % 2 else k + 1

    @property
    def sigma_range(self) -> tuple[float, float]:
        return self.blur_sigma[0] * self.scale, self.blur_sigma[1] * self.scale


def blur_kernel(rng: np.random.Generator, config: DegradeConfig) -> np.ndarray:
    """An isotropic or anisotropic (rotated) Gaussian kernel, normalised to sum 1."""
    lo, hi = config.sigma_range
    sx = rng.uniform(lo, hi)
    sy = sx if rng.random() < 0.5 else rng.uniform(lo, hi)
    theta = rng.uniform(-np.pi, np.pi)
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    inv = np.linalg.inv(rot @ np.diag([sx * sx, sy * sy]) @ rot.T)
    r = config.kernel_size // 2
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1]
    grid = np.stack([xx, yy], -1).astype(np.float64)
    kernel = np.exp(-0.5 * np.einsum("...i,ij,...j->...", grid, inv, grid))
    return (kernel / kernel.sum()).astype(np.float32)


@dataclass(frozen=True)
class Degraded:
    lq: np.ndarray      # degraded, back at the crop size, float32 RGB in [0, 1]
    small: np.ndarray   # the low-resolution image before scaling back (for the bicubic baseline)
    gt: np.ndarray      # ground truth, float32 RGB in [0, 1] (greyscale when the gray branch fired)


def _photometric(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    img = img * rng.uniform(0.5, 1.5)
    mean = img.mean()
    img = (img - mean) * rng.uniform(0.5, 1.5) + mean
    grey = img.mean(axis=2, keepdims=True)
    return grey + (img - grey) * rng.uniform(0.0, 1.5)


def degrade(rgb: np.ndarray, rng: np.random.Generator, config: DegradeConfig = DegradeConfig()) -> Degraded:
    """Degrade one uint8 RGB face of ``config.size``×``config.size``."""
    gt = rgb.astype(np.float32) / 255.0
    if rng.random() < config.gray_prob:
        gt = np.repeat(cv2.cvtColor(gt, cv2.COLOR_RGB2GRAY)[:, :, None], 3, axis=2)
    img = cv2.filter2D(gt, -1, blur_kernel(rng, config), borderType=cv2.BORDER_REFLECT)
    factor = rng.uniform(*config.downsample)
    side = max(4, int(round(config.size / factor)))
    img = cv2.resize(img, (side, side), interpolation=cv2.INTER_LINEAR)
    img = img + rng.normal(0.0, rng.uniform(*config.noise) / 255.0, img.shape).astype(np.float32)
    u8 = np.clip(img * 255.0 + 0.5, 0, 255).astype(np.uint8)
    quality = int(rng.integers(config.jpeg[0], config.jpeg[1] + 1))
    ok, buf = cv2.imencode(".jpg", u8[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    small = cv2.imdecode(buf, cv2.IMREAD_COLOR)[:, :, ::-1].astype(np.float32) / 255.0
    # colour jitter on the low-resolution image (per-pixel operations: the same as after scaling back), so the
    # bicubic baseline starts from exactly what the network sees
    if rng.random() < config.jitter_prob:
        small = small + rng.uniform(-config.jitter_shift, config.jitter_shift, 3).astype(np.float32) / 255.0
    if rng.random() < config.photometric_prob:
        small = _photometric(small, rng)
    small = np.clip(small, 0, 1).astype(np.float32)
    lq = cv2.resize(small, (config.size, config.size), interpolation=cv2.INTER_LINEAR)
    return Degraded(lq=np.clip(lq, 0, 1).astype(np.float32), small=small, gt=gt)
