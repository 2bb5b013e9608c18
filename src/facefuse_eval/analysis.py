"""Accuracy measures against dlib's annotated faces, shared by the tests and the benchmarks.

dlib's ``*_with_face_landmarks.xml`` files give, per photo, face boxes and the 68 iBUG 300-W points. Recall is the
share of annotated boxes that a detected box overlaps with IoU ≥ 0.5 (one detection per annotation). Landmark
error uses the 7 points both schemes define and is normalised by the outer-eye-corner distance, the usual
inter-ocular NME of 300-W.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from facefuse.analysis.landmarks import (
    LEFT_EYE_INNER,
    LEFT_EYE_OUTER,
    MOUTH_LEFT,
    MOUTH_RIGHT,
    NOSE_TIP,
    RIGHT_EYE_INNER,
    RIGHT_EYE_OUTER,
)
from facefuse.analysis.nms import iou_xyxy

# iBUG-68 index -> FaceMesh vertex for the points both schemes share
IBUG68_TO_MESH: dict[int, int] = {
    36: RIGHT_EYE_OUTER, 39: RIGHT_EYE_INNER, 42: LEFT_EYE_INNER, 45: LEFT_EYE_OUTER,
    30: NOSE_TIP, 48: MOUTH_RIGHT, 54: MOUTH_LEFT,
}


@dataclass(frozen=True)
class AnnotatedFace:
    box: np.ndarray  # (4,) x0, y0, x1, y1
    points: np.ndarray  # (68, 2)


@dataclass(frozen=True)
class AnnotatedImage:
    path: Path
    faces: list[AnnotatedFace]


def load_dlib_annotations(folder: Path) -> list[AnnotatedImage]:
    """Every photo of ``training_with_face_landmarks.xml`` and ``testing_with_face_landmarks.xml`` in ``folder``."""
    images: list[AnnotatedImage] = []
    for name in ("training_with_face_landmarks.xml", "testing_with_face_landmarks.xml"):
        root = ET.parse(folder / name).getroot()
        for image in root.iter("image"):
            faces = []
            for box in image.iter("box"):
                left, top = float(box.get("left", 0)), float(box.get("top", 0))
                xyxy = np.array([left, top, left + float(box.get("width", 0)), top + float(box.get("height", 0))])
                parts = sorted(box.iter("part"), key=lambda p: int(p.get("name", 0)))
                points = np.array([[float(p.get("x", 0)), float(p.get("y", 0))] for p in parts])
                faces.append(AnnotatedFace(xyxy, points))
            images.append(AnnotatedImage(folder / str(image.get("file")), faces))
    return images


def match_faces(truth: list[np.ndarray], found: list[np.ndarray], min_iou: float = 0.5) -> list[int | None]:
    """For each true box (xyxy), the index of the found box matched to it greedily by IoU, or None."""
    matches: list[int | None] = [None] * len(truth)
    if not truth or not found:
        return matches
    found_arr = np.array(found, dtype=np.float64)
    overlaps = np.array([iou_xyxy(np.asarray(t, dtype=np.float64), found_arr) for t in truth])
    while overlaps.size and overlaps.max() >= min_iou:
        t, f = np.unravel_index(int(np.argmax(overlaps)), overlaps.shape)
        matches[int(t)] = int(f)
        overlaps[t, :] = -1
        overlaps[:, f] = -1
    return matches


def landmark_nme(mesh: np.ndarray, ibug68: np.ndarray) -> float:
    """Mean distance over the shared points divided by the outer-eye-corner distance (36–45)."""
    indices = list(IBUG68_TO_MESH)
    predicted = mesh[[IBUG68_TO_MESH[i] for i in indices], :2]
    truth = ibug68[indices]
    inter_ocular = float(np.linalg.norm(ibug68[36] - ibug68[45]))
    return float(np.linalg.norm(predicted - truth, axis=1).mean() / inter_ocular)
