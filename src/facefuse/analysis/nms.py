"""Detections in a detector-neutral form and the suppression schemes the detectors use."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np


@dataclass(frozen=True)
class Detection:
    box: np.ndarray  # (4,) x0, y0, x1, y1
    score: float
    points: np.ndarray  # (K, 2) the detector's own key points


def iou_xyxy(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection over union of one box with each of ``boxes``, all as (x0, y0, x1, y1): the one IoU."""
    x0 = np.maximum(box[0], boxes[:, 0])
    y0 = np.maximum(box[1], boxes[:, 1])
    x1 = np.minimum(box[2], boxes[:, 2])
    y1 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def weighted_nms(boxes: np.ndarray, scores: np.ndarray, points: np.ndarray, iou: float) -> list[Detection]:
    """MediaPipe's weighted suppression: overlapping candidates are averaged by score, which steadies boxes."""
    order = np.argsort(-scores)
    remaining = order
    out: list[Detection] = []
    while remaining.size:
        best = remaining[0]
        overlap = iou_xyxy(boxes[best], boxes[remaining])
        group = remaining[overlap > iou]
        weights = scores[group][:, None]
        box = (boxes[group] * weights).sum(0) / weights.sum()
        pts = (points[group] * weights[:, :, None]).sum(0) / weights.sum()
        out.append(Detection(box, float(scores[best]), pts))
        remaining = remaining[overlap <= iou]
    return out


def hard_nms(boxes: np.ndarray, scores: np.ndarray, points: np.ndarray, iou: float) -> list[Detection]:
    """Classic suppression (YuNet, RetinaFace): keep the best, drop what overlaps it (OpenCV's ``NMSBoxes``)."""
    if not len(scores):
        return []
    xywh = np.column_stack([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]]).astype(np.float64)
    kept = cv2.dnn.NMSBoxes(xywh.tolist(), scores.astype(float).tolist(), 0.0, iou)  # scores are thresholded before
    return [Detection(boxes[i], float(scores[i]), points[i]) for i in np.asarray(kept, dtype=int).ravel()]
