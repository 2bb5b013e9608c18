"""What a request asks of the models, as plain picklable values and functions of a :class:`Fuser`.

Why a module of its own: the same work runs in this process's worker threads (:class:`LocalBackend`) or in Ray
Serve replicas on other machines (:mod:`facefuse.serve.ray`). Jobs and answers are small frozen dataclasses that
cross a process boundary as they are; the functions are the only place that turns a Fuser's results into what the
HTTP routes send back, so both backends answer byte-for-byte the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..analysis.types import ImageAnalysis
from ..fusion.engine import FusionOptions
from ..pipeline import Encoding, Fuser, FusionResult
from ..stages import Record


@dataclass(frozen=True)
class FuseSpec:
    """What a fusion is asked for besides its photos: the options and the output encoding (what the Ray fusion
    deployment receives; the photos reach it as analyses)."""

    options: FusionOptions
    fmt: str
    quality: int


@dataclass(frozen=True)
class FuseRequest:
    """One fusion request (not a batch job: those are facefuse.jobs), parsed and validated: the two photos' bytes,
    the options and the output encoding."""

    sources: tuple[bytes, ...]  # one photo, or several of the same person
    target: bytes
    options: FusionOptions
    fmt: str
    quality: int

    @property
    def spec(self) -> FuseSpec:
        return FuseSpec(self.options, self.fmt, self.quality)


@dataclass(frozen=True)
class FuseAnswer:
    """The encoded, labelled image and the report the API returns with it."""

    data: bytes
    faces: list[dict[str, Any]]
    timings_ms: dict[str, float]
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DetectRequest:
    image: bytes
    role: str
    options: FusionOptions | None = None  # a fusion's source: its options (Fuser.analyze_many analyses it as such)


def answer(result: FusionResult) -> FuseAnswer:
    """The encoded, labelled image (the encode stage's bytes) and its report."""
    assert result.data is not None, "the service's fusions run the encode stage"
    return FuseAnswer(result.data, result.faces, result.timings_ms, result.warnings)


def fuse(fuser: Fuser, asked: FuseRequest) -> FuseAnswer:
    """The whole list in one place (the single-process backend)."""
    return answer(fuser.fuse(list(asked.sources), asked.target, asked.options, Encoding(asked.fmt, asked.quality)))


def fuse_analysed(fuser: Fuser, sources: list[ImageAnalysis], target: ImageAnalysis, asked: FuseSpec) -> FuseAnswer:
    """The stages after analysis (the Ray fusion deployment, fed by the analysis deployment)."""
    return answer(fuser.fuse_analyses(sources, target, asked.options, Encoding(asked.fmt, asked.quality)))


def quality_verdict(record: Record) -> dict[str, Any]:
    """Would this photo be accepted as-is? The gate's verdict on the largest face (see :meth:`Fuser.detect`)."""
    if record.refusal is not None:
        reason = record.refusal
        return {"accepted": False, "code": reason.code.value, "message": reason.message, "hint": reason.hint}
    return {"accepted": True, "code": None, "message": "the photo can be used", "hint": ""}


def detect_report(fuser: Fuser, image: bytes | ImageAnalysis, role: str) -> dict[str, Any]:
    """What ``POST /v1/detect`` answers: every face, and the gate's verdict as a fusion would give it."""
    record = fuser.detect(image, "largest", role)
    assert record.analysis is not None
    return {**record.analysis.to_dict(with_landmarks=False), "verdict": quality_verdict(record)}


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
