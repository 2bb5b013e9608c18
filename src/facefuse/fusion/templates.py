"""Named 5-point alignment templates and the aligned crop each neural model was trained on.

Every public swapper and recognizer was trained on faces warped onto one fixed template; feeding a crop made
with another template shifts the face inside the crop and quietly degrades the result. The coordinates are
normalised to [0, 1] (multiply by the crop size), in ArcFace point order: image-left eye, image-right eye, nose
tip, image-left mouth corner, image-right mouth corner — the order of :attr:`facefuse.analysis.types.Face.keypoints`.

- ``arcface-112``: InsightFace's ``arcface_dst`` (what ArcFace recognizers expect), = ``ARCFACE_112 / 112``.
- ``arcface-112-v1``: the older, symmetric variant SimSwap and GHOST were trained on.
- ``arcface-128``: InsightFace ``norm_crop`` at 128 px (``(arcface_dst + (8, 0)) / 128``): inswapper, HyperSwap.
- ``ffhq-512``: the FFHQ alignment scaled to 512 px: BlendSwap and UniFace targets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..geometry.align import ARCFACE_112
from ..errors import ErrorCode, FacefuseError
from ..geometry import align

TEMPLATES: dict[str, np.ndarray] = {
    "arcface-112": ARCFACE_112.astype(np.float64) / 112.0,
    "arcface-112-v1": np.array([[0.35473214, 0.45658929], [0.64526786, 0.45658929], [0.50000000, 0.61154464],
                                [0.37913393, 0.77687500], [0.62086607, 0.77687500]]),
    "arcface-128": (ARCFACE_112.astype(np.float64) + (8.0, 0.0)) / 128.0,
    "ffhq-512": np.array([[0.37691676, 0.46864664], [0.62285697, 0.46912813], [0.50123859, 0.61331904],
                          [0.39308822, 0.72541100], [0.61150205, 0.72490465]]),
}


def template_points(template: str, size: int) -> np.ndarray:
    """The template's 5 points in pixels of a ``size``×``size`` crop."""
    try:
        return TEMPLATES[template] * size
    except KeyError:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"unknown alignment template '{template}'",
                            f"choose one of: {', '.join(TEMPLATES)}", {"template": template}) from None


def alignment_matrix(points5: np.ndarray, template: str, size: int) -> np.ndarray:
    """2×3 similarity mapping image pixels into the template crop (rotation, uniform scale, shift; no shear)."""
    return align.similarity(np.asarray(points5, dtype=np.float64)[:, :2], template_points(template, size))


def aligned_crop(image: np.ndarray, points5: np.ndarray, template: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``size``×``size`` crop of ``image`` with the face on ``template``, and the image → crop matrix."""
    matrix = alignment_matrix(points5, template, size)
    return align.aligned_crop(image, matrix, size), matrix


@dataclass(frozen=True)
class PixelNorm:
    """A model's pixel contract: ``tensor = (rgb / 255 - mean) / std`` in NCHW float32, and its inverse.

    ``x / 127.5 - 1`` is mean = std = 0.5; ``x / 255`` is mean 0, std 1; ImageNet is its published mean/std.
    """

    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def to_tensor(self, crops: np.ndarray) -> np.ndarray:
        """(H, W, 3) or (N, H, W, 3) RGB uint8 → (N, 3, H, W) float32."""
        batch = crops[None] if crops.ndim == 3 else crops
        scaled = (batch.astype(np.float32) / 255.0 - np.float32(self.mean)) / np.float32(self.std)
        return np.ascontiguousarray(scaled.transpose(0, 3, 1, 2), dtype=np.float32)

    def from_tensor(self, tensor: np.ndarray) -> np.ndarray:
        """(N, 3, H, W) in this normalisation → (N, H, W, 3) RGB uint8, clipped to the valid range."""
        unit = tensor.transpose(0, 2, 3, 1) * np.float32(self.std) + np.float32(self.mean)
        return np.clip(np.rint(unit * 255.0), 0, 255).astype(np.uint8)


UNIT = PixelNorm()
SYMMETRIC = PixelNorm((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
IMAGENET = PixelNorm((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
# by the names the swapper table (facefuse.models.swappers) uses
NORMS = {"unit": UNIT, "symmetric": SYMMETRIC, "imagenet": IMAGENET}
