"""What a request asks of the models, as plain picklable values and functions of a :class:`Fuser`.

Why a module of its own: the same work runs in this process's worker threads (:class:`LocalBackend`) or in Ray
Serve replicas on other machines (:mod:`facefuse.serve.ray`). Jobs and answers are small frozen dataclasses that
cross a process boundary as they are; the functions are the only place that turns a Fuser's results into what the
HTTP routes send back, so both backends answer byte-for-byte the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..analysis.select import select_faces
from ..analysis.types import ImageAnalysis
from ..errors import FacefuseError
from ..fusion.engine import FusionOptions
from ..pipeline import Fuser, FusionResult


@dataclass(frozen=True)
class FuseJob:
    """One fusion request, parsed and validated: the two photos' bytes, the options and the output encoding."""

    source: bytes
    target: bytes
    options: FusionOptions
    fmt: str
    quality: int


@dataclass(frozen=True)
class FuseAnswer:
    """The encoded, labelled image and the report the API returns with it."""

    data: bytes
    faces: list[dict[str, Any]]
    timings_ms: dict[str, float]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"faces": self.faces, "warnings": self.warnings}


@dataclass(frozen=True)
class DetectJob:
    image: bytes
    role: str


def answer(result: FusionResult, job: FuseJob) -> FuseAnswer:
    """Encode (with the AI-generated metadata label) and time the encoding."""
    start = time.perf_counter()
    data = result.encode(job.fmt, job.quality)
    return FuseAnswer(data, result.faces, {**result.timings_ms, "encode": (time.perf_counter() - start) * 1000},
                      result.warnings)


def fuse(fuser: Fuser, job: FuseJob) -> FuseAnswer:
    """The whole pipeline in one place (the single-process backend)."""
    return answer(fuser.fuse(job.source, job.target, job.options), job)


def fuse_analysed(fuser: Fuser, source: ImageAnalysis, target: ImageAnalysis, job: FuseJob) -> FuseAnswer:
    """The stages after analysis (the Ray fusion deployment, fed by the analysis deployment)."""
    return answer(fuser.fuse_analyses(source, target, job.options), job)


def quality_verdict(analysis: ImageAnalysis, role: str) -> dict[str, Any]:
    """Would this photo be accepted as-is? Same rule and wording as fusion (the largest face and the gate)."""
    try:
        select_faces(analysis, "largest", allow_all=False)
    except FacefuseError as exc:
        reason = exc if role == "image" else exc.about(role)
        return {"accepted": False, "code": reason.code.value, "message": reason.message, "hint": reason.hint}
    return {"accepted": True, "code": None, "message": "the photo can be used", "hint": ""}


def detect_report(analysis: ImageAnalysis, role: str) -> dict[str, Any]:
    return {**analysis.to_dict(with_landmarks=False), "verdict": quality_verdict(analysis, role)}


def models_report(fuser: Fuser, engines: list[str]) -> dict[str, Any]:
    """What ``GET /v1/models`` shows: the loaded detector, engines (the first is the default) and providers, and
    the store's catalogue."""
    return {
        "detector": fuser.config.analysis.detector,
        "engine": engines[0],
        "engines": engines,
        "providers": fuser.runtime.providers,
        "models": [{"name": e.name, "task": e.task.value, "licence": e.licence_note,
                    "commercial_use": e.commercial_use, "default": e.default,
                    "cached": fuser.store.cached_path(e.name).exists(), "description": e.description}
                   for e in fuser.store.registry],
    }
