"""MediaPipe BlazeFace (short and full range) run on ONNX Runtime: letterbox, SSD anchors, weighted NMS.

The anchor layout and box decoding follow MediaPipe's published graph configuration
(``face_detection_short_range.pbtxt`` / ``face_detection_full_range.pbtxt``): boxes are offsets from anchor
centres in input pixels, the 6 key points are right eye, left eye, nose tip, mouth centre, right and left ear
(the person's right, so the first eye is on the image's left).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from .nms import Detection, weighted_nms


@dataclass(frozen=True)
class BlazeFaceSpec:
    size: int
    strides: tuple[int, ...]
    anchors_per_cell: tuple[int, ...]


SHORT_RANGE = BlazeFaceSpec(128, (8, 16), (2, 6))
FULL_RANGE = BlazeFaceSpec(192, (4,), (1,))


def anchor_centres(spec: BlazeFaceSpec) -> np.ndarray:
    """(N, 2) anchor centres in [0, 1]; every anchor is unit-sized (MediaPipe's fixed_anchor_size)."""
    centres = []
    for stride, count in zip(spec.strides, spec.anchors_per_cell):
        cells = spec.size // stride
        ys, xs = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        grid = np.stack([(xs + 0.5) / cells, (ys + 0.5) / cells], axis=-1).reshape(-1, 1, 2)
        centres.append(np.repeat(grid, count, axis=1).reshape(-1, 2))
    return np.concatenate(centres).astype(np.float32)


def letterbox(image: np.ndarray, size: int) -> tuple[np.ndarray, float, tuple[float, float]]:
    """Scale the longer side to ``size`` and pad; returns the square, the scale and the (x, y) padding."""
    height, width = image.shape[:2]
    scale = size / max(height, width)
    new_w, new_h = max(1, round(width * scale)), max(1, round(height * scale))
    resized = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    pad_x, pad_y = (size - new_w) / 2, (size - new_h) / 2
    square = cv2.copyMakeBorder(resized, int(pad_y), size - new_h - int(pad_y), int(pad_x), size - new_w - int(pad_x),
                                cv2.BORDER_CONSTANT, value=(0, 0, 0))
    return square, scale, (int(pad_x), int(pad_y))


class BlazeFaceDetector:
    """One BlazeFace model; ``detect`` returns boxes and 6 key points in the input image's pixels."""

    def __init__(self, session, spec: BlazeFaceSpec, score_threshold: float = 0.5, iou_threshold: float = 0.3):
        self.session = session
        self.spec = spec
        self.anchors = anchor_centres(spec)
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        self.input_name = session.get_inputs()[0].name

    def preprocess(self, image: np.ndarray) -> tuple[np.ndarray, float, tuple[int, int]]:
        square, scale, pad = letterbox(image, self.spec.size)
        tensor = (square.astype(np.float32) / 127.5 - 1.0).transpose(2, 0, 1)[None]
        return tensor, scale, pad

    def detect(self, image: np.ndarray) -> list[Detection]:
        tensor, scale, pad = self.preprocess(image)
        regressors, logits = self.session.run(None, {self.input_name: tensor})
        return self.postprocess(regressors[0], logits[0, :, 0], scale, pad)

    def postprocess(self, raw: np.ndarray, logits: np.ndarray, scale: float, pad: tuple[int, int]) -> list[Detection]:
        scores = 1.0 / (1.0 + np.exp(-np.clip(logits, -80.0, 80.0)))
        keep = scores >= self.score_threshold
        if not np.any(keep):
            return []
        raw, scores, anchors = raw[keep], scores[keep], self.anchors[keep] * self.spec.size
        centre = raw[:, :2] + anchors
        half = raw[:, 2:4] / 2
        boxes = np.concatenate([centre - half, centre + half], axis=1)  # x0, y0, x1, y1 in input pixels
        points = raw[:, 4:16].reshape(-1, 6, 2) + anchors[:, None, :]
        offset = np.array(pad, dtype=np.float32)
        boxes = (boxes - np.tile(offset, 2)) / scale
        points = (points - offset) / scale
        return weighted_nms(boxes, scores, points, self.iou_threshold)
