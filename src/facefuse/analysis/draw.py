"""A picture of what the analysis saw: boxes, the 468-point mesh, the 5 key points and the head's axes.

Used by ``facefuse detect --draw`` so a person can check a verdict (or a bug report can show one) at a glance.
Accepted faces are drawn green, rejected ones red with the first issue's code written beside the box.
"""

from __future__ import annotations

import cv2
import numpy as np

from .landmarks import NOSE_TIP
from .pose import face_axes
from .types import Face, ImageAnalysis

_ACCEPTED = (40, 200, 60)
_REJECTED = (230, 40, 40)
_MESH = (250, 250, 250)
_AXES = ((230, 40, 40), (40, 200, 60), (40, 90, 240))  # x red, y green, z (facing direction) blue


def draw_analysis(analysis: ImageAnalysis) -> np.ndarray:
    """An RGB copy of the analysed image with every face drawn on it."""
    out = analysis.image.copy()
    scale = max(1.0, max(out.shape[:2]) / 800.0)  # keep lines visible on large photos
    for index, face in enumerate(analysis.faces):
        _draw_face(out, index, face, scale)
    return out


def _draw_face(out: np.ndarray, index: int, face: Face, scale: float) -> None:
    colour = _ACCEPTED if face.accepted else _REJECTED
    thick = max(1, round(2 * scale))
    x, y, w, h = (round(v) for v in face.box)
    cv2.rectangle(out, (x, y), (x + w, y + h), colour, thick, cv2.LINE_AA)
    if face.landmarks is not None:
        for px, py in face.landmarks[:, :2]:
            cv2.circle(out, (int(px), int(py)), max(1, int(scale)), _MESH, -1)
        _draw_axes(out, face, float(max(w, h)) * 0.5, thick)
    for px, py in face.keypoints:
        cv2.circle(out, (int(px), int(py)), 2 * thick, colour, -1, cv2.LINE_AA)
    label = f"#{index} {face.score:.2f}"
    if face.pose is not None:
        label += f" y{face.pose.yaw:+.0f} p{face.pose.pitch:+.0f} r{face.pose.roll:+.0f}"
    if face.issues:
        label += f" {face.issues[0].code}"
    font_scale = 0.5 * scale
    (_, text_h), _ = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, font_scale, thick)
    text_y = y - 4 if y - text_h - 4 > 0 else y + h + text_h + 4
    cv2.putText(out, label, (x, text_y), cv2.FONT_HERSHEY_SIMPLEX, font_scale, (0, 0, 0), thick + 2, cv2.LINE_AA)
    cv2.putText(out, label, (x, text_y), cv2.FONT_HERSHEY_SIMPLEX, font_scale, colour, thick, cv2.LINE_AA)


def _draw_axes(out: np.ndarray, face: Face, length: float, thick: int) -> None:
    """The face's own x, y and facing (z, drawn negated: toward the viewer) axes projected onto the image."""
    assert face.landmarks is not None
    axes = face_axes(face.landmarks)
    origin = face.landmarks[NOSE_TIP, :2]
    for column, colour in enumerate(_AXES):
        direction = axes[:2, column] * (-1 if column == 2 else 1)
        tip = origin + direction * length
        cv2.arrowedLine(out, tuple(int(v) for v in origin), tuple(int(v) for v in tip), colour, thick,
                        cv2.LINE_AA, tipLength=0.15)
