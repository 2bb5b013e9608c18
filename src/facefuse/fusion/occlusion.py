"""The segment stage: which pixels of the rendered crops are face skin, hair or an occluder — engine-agnostic.

The segmenter (``face_segmenter``, a small U-Net trained here on UTKFace with synthetic occluders; see its model
card) runs once per rendered face on two 128-px crops in one batch: the target as the engine reshaped it, and the
new face. Both are already in the target's geometry, so its masks need no warping. They decide:
- what stays the target's on top of the output: its glasses, fringe, hands, mask, microphone (``target_keep``);
- which source pixels are not the source's face (its hair, glasses, a hand) and must not be used (``source_hidden``:
  the target's own skin, relit like the rest, shows there instead of a smear of the source's hair);
- where each photo's bare skin is, for the relight stage (``target_skin``, ``source_skin``).
Without the model (licence setting, or ``segmentation="off"``) the classic geometric masks of the engine are used.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import onnxruntime as ort

from .engine import RenderedFace

CLASSES = ("background", "skin", "brows", "eyes", "nose", "lips", "hair", "occluder")
INPUT_SIZE = 128
SEGMENTER_MODEL = "face_segmenter"


@dataclass(frozen=True)
class FaceParsing:
    """Soft masks (float32, 0–1) at the rendered crop's size."""

    target_keep: np.ndarray
    source_hidden: np.ndarray
    target_skin: np.ndarray
    source_skin: np.ndarray


class FaceSegmenter:
    def __init__(self, session: ort.InferenceSession) -> None:
        self.session = session
        self.input_name = session.get_inputs()[0].name

    def probabilities(self, crops: list[np.ndarray]) -> np.ndarray:
        """(N, 8, 128, 128) class probabilities of uint8 RGB crops framed like the engines' aligned crop."""
        batch = np.stack([cv2.resize(c, (INPUT_SIZE, INPUT_SIZE), interpolation=cv2.INTER_AREA) for c in crops])
        logits = self.session.run(None, {self.input_name: batch.transpose(0, 3, 1, 2).astype(np.float32) / 255.0})[0]
        logits = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

    def parse(self, rendered: RenderedFace) -> FaceParsing:
        target, source = self.probabilities([rendered.target_crop, rendered.crop])
        size = rendered.crop.shape[1], rendered.crop.shape[0]

        def up(plane: np.ndarray) -> np.ndarray:
            return cv2.resize(plane, size, interpolation=cv2.INTER_LINEAR)

        hair, occluder, skin = CLASSES.index("hair"), CLASSES.index("occluder"), CLASSES.index("skin")
        return FaceParsing(
            target_keep=up(_confident(target[hair] + target[occluder])),
            source_hidden=up(_confident(source[hair] + source[occluder])),
            target_skin=up(target[skin]),
            source_skin=up(source[skin]),
        )


def _confident(probability: np.ndarray) -> np.ndarray:
    """A soft mask that ignores the low-probability haze a small network leaves around every edge."""
    return np.clip((probability - 0.35) / 0.3, 0.0, 1.0).astype(np.float32)
