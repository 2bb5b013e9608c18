"""RetinaFace MobileNet-0.25 (biubug6/Pytorch_Retinaface export) on ONNX Runtime: SSD priors and box decoding.

Priors and decoding follow the reference ``cfg_mnet``: strides 8/16/32 with min sizes (16, 32), (64, 128),
(256, 512), variances (0.1, 0.2). The model takes BGR minus the means (104, 117, 123); its outputs are ``loc``,
``conf`` (two-class softmax) and the 10-value landmark head (exported under the name ``iou``). The 5 landmarks are
the image-left eye, the image-right eye, the nose and the mouth corners: already the detectors' contract.
"""

from __future__ import annotations

from itertools import product

import numpy as np
import onnxruntime as ort

from .blazeface import letterbox
from .nms import Detection, hard_nms

STEPS = (8, 16, 32)
MIN_SIZES = ((16, 32), (64, 128), (256, 512))
VARIANCE = (0.1, 0.2)
BGR_MEAN = np.array([104.0, 117.0, 123.0], dtype=np.float32)


def priors(size: int) -> np.ndarray:
    """(N, 4) prior boxes (cx, cy, w, h) in input pixels for a square ``size`` input, in the model's order."""
    out = []
    for step, sizes in zip(STEPS, MIN_SIZES):
        cells = int(np.ceil(size / step))
        for row, col in product(range(cells), range(cells)):
            for min_size in sizes:
                out.append(((col + 0.5) * step, (row + 0.5) * step, min_size, min_size))
    return np.array(out, dtype=np.float32)


class RetinaFaceDetector:
    """The image is letterboxed into a square of ``size`` (the model accepts any size; one size keeps the
    priors computed once)."""

    def __init__(self, session: ort.InferenceSession, score_threshold: float = 0.5, iou_threshold: float = 0.4,
                 size: int = 640) -> None:
        self.session = session
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        self.size = size
        self.priors = priors(size)
        self.input_name = session.get_inputs()[0].name

    def detect(self, image: np.ndarray) -> list[Detection]:
        square, scale, pad = letterbox(image, self.size)
        tensor = (square[..., ::-1].astype(np.float32) - BGR_MEAN).transpose(2, 0, 1)[None]
        loc, conf, landmarks = (out[0] for out in self.session.run(None, {self.input_name: tensor}))
        scores = conf[:, 1]  # the export ends in a softmax: column 1 is the face probability
        keep = scores >= self.score_threshold
        if not np.any(keep):
            return []
        anchors, loc, landmarks, scores = self.priors[keep], loc[keep], landmarks[keep], scores[keep]
        centre = anchors[:, :2] + loc[:, :2] * VARIANCE[0] * anchors[:, 2:]
        half = anchors[:, 2:] * np.exp(loc[:, 2:] * VARIANCE[1]) / 2
        boxes = np.concatenate([centre - half, centre + half], axis=1)
        points = anchors[:, None, :2] + landmarks.reshape(-1, 5, 2) * VARIANCE[0] * anchors[:, None, 2:]
        offset = np.array(pad, dtype=np.float32)
        boxes = (boxes - np.tile(offset, 2)) / scale
        points = (points - offset) / scale
        return hard_nms(boxes, scores, points, self.iou_threshold)

