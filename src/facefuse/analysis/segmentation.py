"""Face parsing with the segmenter we train ourselves (``face_segmenter``): 8 classes per pixel of the face crop.

The network sees exactly the mesh engine's aligned crop at 128 px (``similarity(face.keypoints,
crop_template(128))``), so its masks line up with the engine's 512 px crop by a pure scale (×4): no second
alignment. Classes: background, face skin, brows, eyes, nose, lips/mouth interior, hair, occluder (glasses, hands,
objects, masks, microphones). The model is trained on UTKFace: non-commercial research use only — callers check
``ModelStore.permits("face_segmenter")`` and fall back to the classic masks when it is not allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from ..geometry import align
from ..geometry.align import crop_template
from .types import Face

SEGMENTER_MODEL = "face_segmenter"
SEGMENT_SIZE = 128
CLASSES = ("background", "skin", "brows", "eyes", "nose", "lips", "hair", "occluder")
BACKGROUND, SKIN, BROWS, EYES, NOSE, LIPS, HAIR, OCCLUDER = range(len(CLASSES))
FACE_CLASSES = (SKIN, BROWS, EYES, NOSE, LIPS)


def segment_matrix(keypoints: np.ndarray, size: int = SEGMENT_SIZE) -> np.ndarray:
    """Image → crop similarity of the segmenter's input (the mesh engine's crop template at ``size``) from a face's
    five key points."""
    return align.similarity(keypoints, crop_template(size))


@dataclass(frozen=True)
class FaceParsing:
    """Per-pixel class probabilities of one face in its 128 px crop, and the image → crop matrix."""

    probabilities: np.ndarray  # (8, 128, 128) float32, softmax over classes
    matrix: np.ndarray  # (2, 3) image → crop

    @property
    def labels(self) -> np.ndarray:
        return self.probabilities.argmax(0).astype(np.uint8)

    def mask(self, *classes: int) -> np.ndarray:
        """Soft mask (0..1) of the union of ``classes``, e.g. ``mask(HAIR, OCCLUDER)``."""
        return self.probabilities[list(classes)].sum(0)

    def at(self, points: np.ndarray, *classes: int) -> np.ndarray:
        """The union of ``classes`` at each of ``points`` (photo pixels, (n, 2)), bilinear; 0 outside the crop."""
        crop = (points @ self.matrix[:, :2].T + self.matrix[:, 2]).astype(np.float32)
        return cv2.remap(self.mask(*classes).astype(np.float32), crop[None, :, 0], crop[None, :, 1],
                         cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0.0)[0]


class FaceSegmenter:
    """Runs the segmentation model on the aligned crops of one or more faces (one batch)."""

    def __init__(self, session) -> None:
        self.session = session
        self.input_name = session.get_inputs()[0].name

    def logits(self, crops: np.ndarray) -> np.ndarray:
        """(N, 128, 128, 3) uint8 RGB crops → (N, 8, 128, 128) float32 logits."""
        tensor = np.ascontiguousarray(crops.transpose(0, 3, 1, 2), dtype=np.float32) / 255.0
        return self.session.run(None, {self.input_name: tensor})[0]

    def probabilities(self, crops: np.ndarray) -> np.ndarray:
        """(N, 128, 128, 3) uint8 RGB crops → (N, 8, 128, 128) float32 class probabilities (softmax)."""
        logits = self.logits(crops)
        shifted = np.exp(logits - logits.max(1, keepdims=True))
        return (shifted / shifted.sum(1, keepdims=True)).astype(np.float32)

    def parse(self, image: np.ndarray, faces: list[Face]) -> list[FaceParsing]:
        """The parsing of each face of ``image`` (RGB uint8), all faces in one batch."""
        if not faces:
            return []
        matrices = [segment_matrix(face.keypoints) for face in faces]
        crops = np.stack([align.aligned_crop(image, m, SEGMENT_SIZE) for m in matrices])
        return [FaceParsing(p, m) for p, m in zip(self.probabilities(crops), matrices)]
