"""Detector choice by name. Each detector maps an RGB image to :class:`Detection` objects whose first two points
are the eye on the image's left and the eye on the image's right (for an upright face) and whose third is the nose.
"""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np
import onnxruntime as ort

from ..errors import ErrorCode, FacefuseError
from ..models import ModelStore
from ..runtime import Runtime
from .blazeface import FULL_RANGE, SHORT_RANGE, BlazeFaceDetector
from .nms import Detection


class Detector(Protocol):
    def detect(self, image: np.ndarray) -> list[Detection]: ...


DetectorBuilder = Callable[[ort.InferenceSession, float], Detector]

# detector name -> (registry model name, builder)
DETECTORS: dict[str, tuple[str, DetectorBuilder]] = {
    "blazeface": ("blazeface_full", lambda s, t: BlazeFaceDetector(s, FULL_RANGE, score_threshold=t)),
    "blazeface_short": ("blazeface_short", lambda s, t: BlazeFaceDetector(s, SHORT_RANGE, score_threshold=t)),
}


def make_detector(name: str, store: ModelStore, runtime: Runtime, threshold: float = 0.5) -> Detector:
    if name not in DETECTORS:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"unknown detector '{name}'",
                            f"choose one of: {', '.join(DETECTORS)}", {"detector": name})
    model, build = DETECTORS[name]
    return build(runtime.session(store.ensure(model)), threshold)
