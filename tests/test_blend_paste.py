"""The blend stage's two resampling-heavy steps on real photos: the multi-band blend (built as one pyramid of the
difference, issue 19) must be the textbook two-pyramid blend, and the paste-back must put a crop back where it came
from, leaving every pixel outside the pasted region byte-identical and the input photo untouched."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from facefuse.fusion.blend import multiband_blend, paste_back
from facefuse.imageio import decode_image


def _photo(path: Path) -> np.ndarray:
    return decode_image(path.read_bytes()).pixels


def _ellipse(shape: tuple[int, int], feather: float) -> np.ndarray:
    mask = np.zeros(shape, np.float32)
    cv2.ellipse(mask, (shape[1] // 2, shape[0] // 2), (shape[1] // 3, shape[0] // 3), 0, 0, 360, 1.0, -1)
    return cv2.GaussianBlur(mask, (0, 0), feather)


def _two_pyramid_blend(fg: np.ndarray, bg: np.ndarray, alpha: np.ndarray, levels: int = 5) -> np.ndarray:
    """Burt & Adelson as written in the paper: a Laplacian pyramid of each image, blended band by band."""
    def laplacian(image: np.ndarray) -> list[np.ndarray]:
        bands = []
        for _ in range(levels):
            down = cv2.pyrDown(image)
            bands.append(image - cv2.pyrUp(down, dstsize=(image.shape[1], image.shape[0])))
            image = down
        return [*bands, image]

    masks = [alpha.astype(np.float32)]
    for _ in range(levels):
        masks.append(cv2.pyrDown(masks[-1]))
    blended = [f * m[..., None] + b * (1 - m[..., None])
               for f, b, m in zip(laplacian(fg.astype(np.float32)), laplacian(bg.astype(np.float32)), masks)]
    out = blended[-1]
    for band in reversed(blended[:-1]):
        out = cv2.pyrUp(out, dstsize=(band.shape[1], band.shape[0])) + band
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)


def test_multiband_blend_is_the_two_pyramid_blend(faces_dir: Path):
    fr = faces_dir / "face_recognition"
    fg = cv2.resize(_photo(fr / "biden.jpg"), (262, 294), interpolation=cv2.INTER_AREA)
    bg = cv2.resize(_photo(fr / "obama-720p.jpg"), (262, 294), interpolation=cv2.INTER_AREA)
    alpha = _ellipse(fg.shape[:2], 6.0)
    out = multiband_blend(fg, bg, alpha)
    difference = np.abs(out.astype(int) - _two_pyramid_blend(fg, bg, alpha).astype(int))
    assert difference.max() <= 1 and (difference > 0).mean() < 1e-3  # float rounding only
    assert np.array_equal(multiband_blend(fg, bg, np.ones_like(alpha)), fg)
    assert np.array_equal(multiband_blend(fg, bg, np.zeros_like(alpha)), bg)


def test_paste_back_returns_a_crop_to_where_it_came_from(faces_dir: Path):
    photo = _photo(faces_dir / "face_recognition/obama-1080p.jpg")
    before = photo.copy()
    # a face crop at 0.41 crop pixels per photo pixel, turned 8°: the 4K benchmark's scale
    matrix = cv2.getRotationMatrix2D((960.0, 420.0), 8.0, 0.41)
    matrix[:, 2] += (256 - 960, 256 - 420)
    crop = cv2.warpAffine(photo, matrix, (512, 512), flags=cv2.INTER_AREA)
    region = _ellipse((512, 512), 8.0)
    out = paste_back(photo, crop, region, matrix, detail=np.ones((512, 512), np.float32))
    assert np.array_equal(photo, before)  # the input photo is not written to
    back = cv2.warpAffine(region, matrix, photo.shape[1::-1], flags=cv2.WARP_INVERSE_MAP | cv2.INTER_LINEAR)
    outside = back == 0
    assert outside.mean() > 0.5 and np.array_equal(out[outside], photo[outside])
    inside = cv2.erode((back > 0.99).astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    mse = np.mean((out[inside].astype(float) - photo[inside]) ** 2)
    # the crop holds 0.41 of the photo's resolution: what comes back is the photo's own picture, less its finest
    # band (the detail step brings the photo's grain back), not one shifted by a pixel
    assert 10 * np.log10(255 ** 2 / mse) > 33  # 35.5 dB measured; a one-pixel shift gives 29.9
