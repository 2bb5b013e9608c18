"""YuNet (OpenCV Zoo, libfacedetection.train) on ONNX Runtime: anchor-free decoding of the three stride heads.

The decoding follows OpenCV's ``FaceDetectorYN``: for each stride ``s`` and grid cell (row, col) the score is
``sqrt(cls × obj)``, the box centre is ``(col + dx, row + dy) × s`` with size ``exp(dw, dh) × s``, and the 5 key
points are ``(col + kx, row + ky) × s``. The points are the image-left eye, the image-right eye, the nose tip and
the two mouth corners, which is already the detection contract of :mod:`facefuse.analysis.detectors`.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from .blazeface import letterbox
from .nms import Detection, hard_nms

STRIDES = (8, 16, 32)


class YuNetDetector:
    """YuNet at a fixed square input (640 for the registry's model); the image is letterboxed into it."""

    def __init__(self, session: ort.InferenceSession, score_threshold: float = 0.5, iou_threshold: float = 0.3,
                 size: int = 640) -> None:
        self.session = session
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        shape = session.get_inputs()[0].shape
        self.size = shape[2] if isinstance(shape[2], int) else size
        self.input_name = session.get_inputs()[0].name
        self.output_names = [o.name for o in session.get_outputs()]
        self.grids = {s: _grid(self.size // s) for s in STRIDES}

    def detect(self, image: np.ndarray) -> list[Detection]:
        square, scale, pad = letterbox(image, self.size)
        tensor = np.ascontiguousarray(square[..., ::-1].transpose(2, 0, 1)[None], dtype=np.float32)  # RGB → BGR
        outputs = dict(zip(self.output_names, self.session.run(None, {self.input_name: tensor})))
        boxes, scores, points = [], [], []
        for stride in STRIDES:
            cls = np.clip(outputs[f"cls_{stride}"][0, :, 0], 0, 1)
            obj = np.clip(outputs[f"obj_{stride}"][0, :, 0], 0, 1)
            score = np.sqrt(cls * obj)
            keep = score >= self.score_threshold
            if not np.any(keep):
                continue
            cells = self.grids[stride][keep]
            bbox = outputs[f"bbox_{stride}"][0][keep]
            kps = outputs[f"kps_{stride}"][0][keep].reshape(-1, 5, 2)
            centre = (cells + bbox[:, :2]) * stride
            half = np.exp(bbox[:, 2:4]) * stride / 2
            boxes.append(np.concatenate([centre - half, centre + half], axis=1))
            points.append((kps + cells[:, None, :]) * stride)
            scores.append(score[keep])
        if not scores:
            return []
        offset = np.array(pad, dtype=np.float32)
        all_boxes = (np.concatenate(boxes) - np.tile(offset, 2)) / scale
        all_points = (np.concatenate(points) - offset) / scale
        return hard_nms(all_boxes, np.concatenate(scores), all_points, self.iou_threshold)


def _grid(cells: int) -> np.ndarray:
    """(cells², 2) (col, row) of every cell in row-major order, the order of the model's outputs."""
    rows, cols = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
    return np.stack([cols.ravel(), rows.ravel()], axis=1).astype(np.float32)
