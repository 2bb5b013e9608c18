"""The quality gate: each face gets a list of issues with stable codes and a hint a person can act on."""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np

from ..config import QualityConfig
from ..errors import ErrorCode, FacefuseError
from ..geometry.align import ARCFACE_112
from .types import Face, QualityIssue

def sharpness(image: np.ndarray, keypoints: np.ndarray) -> float:
    """Variance of the Laplacian of the face warped to the ArcFace 112×112 frame: low means blurred or heavily
    compressed; a 4K face and a 240p face are judged on the same scale."""
    matrix, _ = cv2.estimateAffinePartial2D(keypoints.astype(np.float32), ARCFACE_112, method=cv2.LMEDS)
    if matrix is None:
        return 0.0
    grey = cv2.cvtColor(cv2.warpAffine(image, matrix, (112, 112), flags=cv2.INTER_AREA), cv2.COLOR_RGB2GRAY)
    return float(cv2.Laplacian(grey[20:100, 16:96], cv2.CV_64F).var())


def quality_issues(face: Face, config: QualityConfig) -> list[QualityIssue]:
    issues: list[QualityIssue] = []
    if face.score < config.min_score:
        issues.append(QualityIssue(
            ErrorCode.LOW_CONFIDENCE.value,
            f"the face was found with low confidence ({face.score:.2f} < {config.min_score:.2f})",
            "use a clearer, well-lit photo where the face is fully visible",
            {"score": round(face.score, 3), "min_score": config.min_score}))
    side = float(min(face.box[2], face.box[3]))
    if side < config.min_face_px:
        issues.append(QualityIssue(
            ErrorCode.FACE_TOO_SMALL.value,
            f"the face is {side:.0f} px across, at least {config.min_face_px} px is needed",
            "move closer to the camera or use a higher-resolution photo",
            {"face_px": round(side, 1), "min_face_px": config.min_face_px}))
    if face.pose is not None:
        for angle, limit, turn in (("yaw", config.max_yaw, "turn toward the camera"),
                                   ("pitch", config.max_pitch, "look straight into the camera")):
            value = getattr(face.pose, angle)
            if abs(value) > limit:
                issues.append(QualityIssue(
                    ErrorCode.POSE_TOO_LARGE.value,
                    f"the head is turned too far: {angle} {value:+.1f}° exceeds ±{limit:g}° by "
                    f"{abs(value) - limit:.1f}°", turn,
                    {"angle": angle, "value": round(value, 1), "limit": limit, "excess": round(abs(value) - limit, 1)}))
    if face.sharpness is not None and face.sharpness < config.min_sharpness:
        issues.append(QualityIssue(
            ErrorCode.TOO_BLURRY.value,
            f"the face is too blurry (sharpness {face.sharpness:.0f} < {config.min_sharpness:.0f})",
            "hold the camera still and focus on the face",
            {"sharpness": round(face.sharpness, 1), "min_sharpness": config.min_sharpness}))
    return issues


def measure(image: np.ndarray, face: Face, config: QualityConfig) -> Face:
    """The face with its sharpness and the gate's issues: the one measurement, for photos, frames and restored
    faces alike (the gate stage, :mod:`facefuse.stages.gate`, and the analyzer outside the pipeline call it)."""
    measured = replace(face, sharpness=sharpness(image, face.keypoints), issues=())
    return replace(measured, issues=tuple(quality_issues(measured, config)))


def raise_first_issue(face: Face) -> None:
    if face.issues:
        issue = face.issues[0]
        raise FacefuseError(ErrorCode(issue.code), issue.message, issue.hint, dict(issue.details))
