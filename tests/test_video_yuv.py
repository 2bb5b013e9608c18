"""Fused frames turned into the encoder's YUV 4:2:0 by OpenCV (facefuse.video.yuv) against FFmpeg's scaler, which
did it before: the same planes to a level, and what a player decodes as close to the fused pixels."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from video_clips import load

from facefuse.video.yuv import converts, yuv420_frame

# (FFmpeg colour-space code, range code, pixel format): unspecified, BT.709, BT.601 (two codes), BT.2020, FCC,
# SMPTE 240M; limited and full range; the full-range "j" format
CASES = [(2, 0, "yuv420p"), (1, 1, "yuv420p"), (1, 2, "yuv420p"), (5, 1, "yuv420p"), (6, 2, "yuv420p"),
         (9, 1, "yuv420p"), (4, 2, "yuv420p"), (7, 1, "yuv420p"), (0, 0, "yuvj420p")]


@pytest.fixture(scope="module")
def photo(faces_dir: Path) -> np.ndarray:
    return load(faces_dir / "face_recognition" / "obama-720p.jpg")


def _by_scaler(image: np.ndarray, pix_fmt: str, colorspace: int, color_range: int) -> av.VideoFrame:
    """What the segment encoder did before: FFmpeg's scaler with the stream's codes (0 = let it choose)."""
    return av.VideoFrame.from_ndarray(image, format="rgb24").reformat(
        format=pix_fmt, dst_colorspace=colorspace or None, dst_color_range=color_range or None)


def _decoded(frame: av.VideoFrame, colorspace: int, color_range: int) -> np.ndarray:
    return frame.to_ndarray(format="rgb24", src_colorspace=colorspace or None,
                            src_color_range=color_range or None).astype(np.int16)


@pytest.mark.parametrize(("colorspace", "color_range", "pix_fmt"), CASES)
def test_planes_match_the_scalers_and_decode_back_as_closely(photo, colorspace, color_range, pix_fmt):
    ours = yuv420_frame(photo, pix_fmt, colorspace, color_range)
    theirs = _by_scaler(photo, pix_fmt, colorspace, color_range)
    assert ours.format.name == pix_fmt and (ours.width, ours.height) == (photo.shape[1], photo.shape[0])
    a, b = ours.to_ndarray().astype(np.int16), theirs.to_ndarray().astype(np.int16)
    height = photo.shape[0]
    luma, chroma = np.abs(a[:height] - b[:height]), np.abs(a[height:] - b[height:])
    assert luma.max() <= 1  # the same matrix: rounding apart
    assert chroma.mean() <= 1.0 and np.percentile(chroma, 99) <= 4  # 2×2 means against the scaler's own filter
    # what a player shows: the fused pixels back to within the scaler's own error
    error = np.abs(_decoded(ours, colorspace, color_range) - photo)
    reference = np.abs(_decoded(theirs, colorspace, color_range) - photo)
    assert error.mean() <= reference.mean() + 0.1
    assert np.percentile(error, 99) <= np.percentile(reference, 99) + 1


def test_a_coloured_edge_keeps_its_chroma_centred(photo):
    """A red block on grey whose edge cuts 2×2 chroma blocks in half: each block's chroma is the mean of its four
    pixels, as the scaler's, not one pixel's (OpenCV's own I420 conversion, not used: half the block's colour
    shifted by a pixel)."""
    image = np.full((32, 32, 3), 128, np.uint8)
    image[:, 9:] = (200, 40, 40)  # the edge between columns 8 and 9: chroma block 4 is half grey, half red
    ours = yuv420_frame(image, "yuv420p", 1, 1).to_ndarray().astype(np.int16)
    theirs = _by_scaler(image, "yuv420p", 1, 1).to_ndarray().astype(np.int16)
    cr = slice(32 + 8, 32 + 16)  # the V plane's rows (16 × 16 values, two per row of 32)
    red, grey = ours[cr, 10], ours[cr, 0]
    assert np.all(np.abs(ours[cr, 4] - (red + grey) / 2) <= 1)  # the cut block: halfway
    assert np.abs(ours[32:] - theirs[32:]).max() <= 2


@pytest.mark.parametrize(("pix_fmt", "width", "height", "expected"),
                         [("yuv420p", 1280, 720, True), ("yuvj420p", 640, 360, True), ("yuv420p", 641, 360, False),
                          ("yuv420p", 640, 361, False), ("yuv444p", 640, 360, False),
                          ("yuv420p10le", 640, 360, False)])
def test_other_formats_and_odd_sizes_stay_with_the_scaler(pix_fmt, width, height, expected):
    assert converts(pix_fmt, width, height) is expected
