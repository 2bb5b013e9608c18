"""Plain data passed between the analysis stages and out to callers (all coordinates in original-image pixels)."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterable
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Pose:
    """Head angles in degrees. yaw > 0: the person turns toward the image's left (their right);
    pitch > 0: chin up; roll > 0: head tilted clockwise in the image."""

    yaw: float
    pitch: float
    roll: float

    def to_dict(self) -> dict[str, float]:
        return {"yaw": round(self.yaw, 2), "pitch": round(self.pitch, 2), "roll": round(self.roll, 2)}


@dataclass(frozen=True)
class QualityIssue:
    code: str
    message: str
    hint: str
    details: dict[str, Any] = field(default_factory=dict)


def _read_only(*arrays: np.ndarray | None) -> None:
    for array in arrays:
        if array is not None:
            array.flags.writeable = False


@dataclass(frozen=True, eq=False)  # a face is an observation: equal only to itself
class Face:
    """One detected face. ``keypoints`` are 5 points ordered as the ArcFace template: image-left eye,
    image-right eye, nose tip, image-left mouth corner, image-right mouth corner.

    Immutable, arrays included: the analysis cache hands the same faces to every request that sends the same
    photo, on several threads at once. Stages that add to a face make a new one (:func:`dataclasses.replace`).
    """

    box: np.ndarray  # (4,) x, y, w, h
    score: float
    keypoints: np.ndarray  # (5, 2)
    landmarks: np.ndarray | None = None  # (468, 3): x, y in image pixels, z in the same scale
    pose: Pose | None = None
    sharpness: float | None = None
    issues: tuple[QualityIssue, ...] = ()

    def __post_init__(self) -> None:
        _read_only(self.box, self.keypoints, self.landmarks)

    @property
    def accepted(self) -> bool:
        return not self.issues

    def scaled(self, factor: int) -> Face:
        """The face in the pixels of its photo decoded ``factor`` times larger (a photo decoded at 1/``factor``
        scale by libjpeg, whose pixel ``i`` covers pixels ``factor·i`` … ``factor·i + factor − 1``), unmeasured."""
        shift = (factor - 1) / 2
        box = np.array([self.box[0] * factor + shift, self.box[1] * factor + shift, self.box[2] * factor,
                        self.box[3] * factor], dtype=self.box.dtype)
        landmarks = None
        if self.landmarks is not None:
            landmarks = self.landmarks * factor  # depth in the same pixel units as x and y
            landmarks[:, :2] += shift
        return Face(box, self.score, self.keypoints * factor + shift, landmarks, self.pose)

    @property
    def area(self) -> float:
        return float(self.box[2] * self.box[3])

    def to_dict(self, with_landmarks: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "box": [round(float(v), 1) for v in self.box],
            "score": round(self.score, 4),
            "keypoints": np.round(self.keypoints, 1).tolist(),
            "pose": self.pose.to_dict() if self.pose else None,
            "sharpness": None if self.sharpness is None else round(self.sharpness, 1),
            "quality": {
                "accepted": self.accepted,
                "issues": [{"code": i.code, "message": i.message, "hint": i.hint, "details": i.details}
                           for i in self.issues],
            },
        }
        if with_landmarks and self.landmarks is not None:
            out["landmarks"] = np.round(self.landmarks, 1).tolist()
        return out


def left_to_right(faces: Iterable[Face]) -> list[Face]:
    """Faces ordered by the centre of their box, left to right: the order face indices count in, everywhere."""
    return sorted(faces, key=lambda f: f.box[0] + f.box[2] / 2)


def largest(faces: Iterable[Face]) -> Face:
    """The face with the largest box (the default choice, and the one whose issue a refusal reports)."""
    return max(faces, key=lambda f: f.area)


@dataclass(frozen=True)
class ImageAnalysis:
    """Faces of one image, ordered left to right; ``rotation`` is the clockwise turn (0/90/180/270) at which
    the detector found them (coordinates are nevertheless given in the original image). Immutable like
    :class:`Face` (the decoded image too), since cached analyses are shared across requests and threads."""

    image: np.ndarray
    faces: tuple[Face, ...]
    rotation: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "faces", tuple(self.faces))
        _read_only(self.image)

    def to_dict(self, with_landmarks: bool = True) -> dict[str, Any]:
        return {
            "faces": [f.to_dict(with_landmarks) for f in self.faces],
            "rotation": self.rotation,
            "image_size": [int(self.image.shape[1]), int(self.image.shape[0])],
            "timings_ms": {k: round(v, 2) for k, v in self.timings_ms.items()},
        }
