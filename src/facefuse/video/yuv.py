"""Fused RGB frames to the encoder's YUV 4:2:0 by OpenCV, in the stream's own colour matrix and range.

Why: FFmpeg's software scaler (what ``VideoFrame.reformat`` runs) took 3.9 ms of CPU to turn a 720p RGB frame into
yuv420p on this project's 2-core AVX2 machine (8.2 ms at 1080p); a 3×4 colour matrix (``cv2.transform``) and 2×2
chroma means take 1.9 (4.2), of the ~96 ms a 720p video frame costs (``benchmarks/yuv_convert.py``). The planes
match the scaler's to one level of luma and a fraction of one of chroma, and decode back to the fused pixels as
closely as the scaler's (``tests/test_video_yuv.py``).
OpenCV's own ``COLOR_RGB2YUV_I420`` is faster still (1.3 ms) but BT.601 only, and it takes each 2×2 block's chroma
from one pixel: coloured edges (lips, a jaw against a backdrop) came back with more error than the scaler's (99th
percentile 9 levels against 7). Formats other than 8-bit 4:2:0, and odd sizes, keep the scaler.

The matrices are the scaler's own choice for each FFmpeg colour-space code (``sws_getCoefficients``): BT.709 for
1, FCC for 4, SMPTE 240M for 7, BT.2020 for 9 and 10, BT.601 for everything else, unspecified included.
"""

from __future__ import annotations

import av
import cv2
import numpy as np

YUV420 = ("yuv420p", "yuvj420p")  # 8-bit planar 4:2:0; the "j" format is full range whatever the stream says
FULL_RANGE = 2  # FFmpeg's AVCOL_RANGE_JPEG
BT601 = (0.299, 0.114)  # (Kr, Kb)
LUMA_WEIGHTS = {1: (0.2126, 0.0722), 4: (0.30, 0.11), 7: (0.212, 0.087), 9: (0.2627, 0.0593),
                10: (0.2627, 0.0593)}


def converts(pix_fmt: str, width: int, height: int) -> bool:
    """Whether :func:`yuv420_frame` can make frames of this format and size (else the scaler does)."""
    return pix_fmt in YUV420 and width % 2 == 0 and height % 2 == 0


def rgb_to_yuv_matrix(colorspace: int, full_range: bool) -> np.ndarray:
    """The 3×4 matrix (RGB and a constant → Y, Cb, Cr, in 8-bit levels) of an FFmpeg colour-space code."""
    kr, kb = LUMA_WEIGHTS.get(colorspace, BT601)
    weights = np.array([kr, 1.0 - kr - kb, kb])
    luma_scale, chroma_scale, black = (1.0, 1.0, 0.0) if full_range else (219 / 255, 224 / 255, 16.0)
    cb = (np.array([0.0, 0.0, 1.0]) - weights) / (2 * (1 - kb)) * chroma_scale
    cr = (np.array([1.0, 0.0, 0.0]) - weights) / (2 * (1 - kr)) * chroma_scale
    return np.array([[*(weights * luma_scale), black], [*cb, 128.0], [*cr, 128.0]], np.float32)


def yuv420_frame(image: np.ndarray, pix_fmt: str, colorspace: int, color_range: int) -> av.VideoFrame:
    """``image`` (RGB uint8, even width and height) as a ``pix_fmt`` frame (one of :data:`YUV420`)."""
    full_range = color_range == FULL_RANGE or pix_fmt == "yuvj420p"
    height, width = image.shape[:2]
    ycbcr = cv2.transform(image, rgb_to_yuv_matrix(colorspace, full_range))
    half = cv2.resize(ycbcr, (width // 2, height // 2), interpolation=cv2.INTER_AREA)  # chroma: 2×2 means
    planes = np.empty((height * 3 // 2, width), np.uint8)
    cv2.extractChannel(ycbcr, 0, dst=planes[:height])
    chroma = planes[height:].reshape(2, height // 2, width // 2)
    cv2.extractChannel(half, 1, dst=chroma[0])
    cv2.extractChannel(half, 2, dst=chroma[1])
    return av.VideoFrame.from_ndarray(planes, format=pix_fmt)
