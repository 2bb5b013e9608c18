"""The engine interface every face generator implements (mesh fusion, ONNX neural swappers, enhancers).

An engine only makes the new face in an aligned crop; colour matching, blending, paste-back and labelling are
shared stages (:mod:`facefuse.fusion.blend`) so every engine gets the same natural edges and the same label.
Engines are split into ``prepare_source`` (once per source photo, cacheable, batched by the service) and
``render`` (once per target face).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..analysis.types import Face


@dataclass(frozen=True)
class FusionOptions:
    """The knobs of one fusion, with the commercial APIs' meaning.

    profile_degree: 0–100, how far the face contour moves from the target's shape toward the source's.
    feature_degree: 0–100, how much of the source's features (eyes, brows, nose, lips) and skin replaces the target's.
    target_face / source_face: "largest", a 0-based index counted left to right, or "all" (target only).
    """

    profile_degree: float = 70.0
    feature_degree: float = 90.0
    target_face: str | int = "largest"
    source_face: str | int = "largest"
    engine: str = "mesh"
    visible_label: bool = True
    crop_size: int = 512
    blend: str = "multiband"  # or "poisson"
    sharpen: float = 0.35
    # "auto": the trained segmenter keeps the target's glasses, fringe and hands on top and the source's hair out,
    # when the licence setting allows it (else the classic masks, with a warning); "off": classic masks only
    segmentation: str = "off"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SourceFace:
    """What an engine keeps of the source photo: the face and any engine-specific payload (crop, embedding)."""

    face: Face
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass
class RenderedFace:
    """A generated face in an aligned square crop of the target.

    ``matrix`` maps target-image pixels into the crop; ``target_crop`` is the target in that crop (an engine that
    reshapes the face returns it already reshaped); ``mask`` (float32, 0–1) marks where the new face replaces the
    target; ``keep_target`` (float32, 0–1) marks regions that must stay the target's (eyes, mouth interior);
    ``region`` marks every crop pixel that may differ from the original target (default: the mask), and is what
    gets pasted back, so pixels outside it stay byte-identical. ``skin`` (float32, 0–1) marks the bare skin of the
    new geometry (no brows, eyes, lips): where the relight stage reads each photo's shading; engines that know no
    geometry leave it ``None`` and the relight stage uses the eroded mask.
    """

    crop: np.ndarray
    target_crop: np.ndarray
    mask: np.ndarray
    matrix: np.ndarray
    keep_target: np.ndarray | None = None
    region: np.ndarray | None = None
    skin: np.ndarray | None = None


class FusionEngine(Protocol):
    name: str

    def prepare_source(self, image: np.ndarray, face: Face) -> SourceFace: ...

    def render(self, source: SourceFace, target_image: np.ndarray, target_face: Face,
               options: FusionOptions) -> RenderedFace: ...
