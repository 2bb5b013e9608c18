"""Detector choice by name. Each detector maps an RGB image to :class:`Detection` objects whose first two points
are the eye on the image's left and the eye on the image's right (for an upright face) and whose third is the nose.

``DETECTORS`` holds the single-model detectors (one registry model each, which is what the optimisation toolkit
calibrates); ``CASCADES`` combines two of them, and ``blazeface`` (the default) is such a cascade.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import onnxruntime as ort

from ..errors import ErrorCode, FacefuseError
from ..models import ModelStore
from ..runtime import Runtime
from .blazeface import FULL_RANGE, SHORT_RANGE, BlazeFaceCascade, BlazeFaceDetector
from .nms import Detection
from .retinaface import RetinaFaceDetector
from .yunet import YuNetDetector


class Detector(Protocol):
    def detect(self, image: np.ndarray) -> list[Detection]: ...


DetectorBuilder = Callable[[ort.InferenceSession, float], Detector]

# detector name -> (registry model name, builder)
DETECTORS: dict[str, tuple[str, DetectorBuilder]] = {
    "blazeface_full": ("blazeface_full", lambda s, t: BlazeFaceDetector(s, FULL_RANGE, score_threshold=t)),
    "blazeface_short": ("blazeface_short", lambda s, t: BlazeFaceDetector(s, SHORT_RANGE, score_threshold=t)),
    "yunet": ("yunet", lambda s, t: YuNetDetector(s, score_threshold=t)),
    "retinaface": ("retinaface_mbnet025", lambda s, t: RetinaFaceDetector(s, score_threshold=t)),
}

# cascade name -> (first detector, fallback detector)
CASCADES: dict[str, tuple[str, str]] = {
    "blazeface": ("blazeface_short", "blazeface_full"),
}

DETECTOR_NAMES: tuple[str, ...] = (*CASCADES, *DETECTORS)


def make_detector(name: str, store: ModelStore, runtime: Runtime, threshold: float = 0.5,
                  precision: str = "fp32") -> Detector:
    if name in CASCADES:
        first, fallback = (make_detector(part, store, runtime, threshold, precision)
                           for part in CASCADES[name])
        assert isinstance(first, BlazeFaceDetector) and isinstance(fallback, BlazeFaceDetector)
        return BlazeFaceCascade(first, fallback)
    if name not in DETECTORS:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"unknown detector '{name}'",
                            f"choose one of: {', '.join(DETECTOR_NAMES)}", {"detector": name})
    model, build = DETECTORS[name]
    return build(runtime.session(store.ensure_precision(model, precision), stage="detect"), threshold)
