"""The one pipeline: decode → detect → landmarks → quality gate → align → fuse (engine) → blend → label → encode.

:class:`Fuser` owns the loaded models (one session per model, created on first use) and is what the library, the
CLI and the service all call; none of them has logic of its own beyond parsing and printing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .analysis.analyzer import FaceAnalyzer
from .analysis.cache import AnalysisCache, content_key
from .analysis.quality import raise_first_issue
from .analysis.select import select_faces
from .analysis.types import Face, ImageAnalysis
from .config import AnalysisConfig, RuntimeConfig, StoreConfig
from .errors import FacefuseError
from .fusion.blend import compose
from .fusion.engine import FusionEngine, FusionOptions
from .fusion.swappers import SwapperFiles
from .imageio import ImageInput, add_visible_mark, decode_image, encode_image, read_input_bytes
from .models import ModelStore
from .restore import RestoreConfig, RestoreStage
from .runtime import Runtime
from .schema import Options, option


@dataclass(frozen=True)
class FuserConfig:
    store: StoreConfig = field(default_factory=StoreConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    swapper_files: SwapperFiles | None = None  # local files for a swapper engine (--model-path)
    analysis_cache_mb: int = 64  # decoded photos whose analysis is kept for reuse (0 turns the cache off)
    restore: RestoreConfig = field(default_factory=RestoreConfig)


class EncodeOptions(Options):
    """How a result is written: derived into ``facefuse fuse --output-format/--quality`` and the HTTP fields."""

    output_format: Literal["jpeg", "jpg", "png", "webp"] | None = option(
        None, "Format", "image format of the result (default: from the output file's name, or the Accept header; "
        "else jpeg)")
    quality: int = option(92, "Quality", "1–100: JPEG/WebP quality", ge=1, le=100)


@dataclass
class FusionResult:
    image: np.ndarray
    faces: list[dict[str, Any]]
    timings_ms: dict[str, float]
    warnings: list[str] = field(default_factory=list)

    def encode(self, fmt: str = "png", quality: int = 92) -> bytes:
        """Encoded bytes with the AI-generated metadata label."""
        return encode_image(self.image, fmt, quality)

    def to_dict(self) -> dict[str, Any]:
        return {"faces": self.faces, "timings_ms": {k: round(v, 2) for k, v in self.timings_ms.items()},
                "warnings": self.warnings}


class Stopwatch:
    """Per-stage wall-clock timings in milliseconds."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._start = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.timings[stage] = self.timings.get(stage, 0.0) + (now - self._start) * 1000
        self._start = now


class Fuser:
    """Loaded models plus the pipeline; thread-safe, meant to be created once and reused."""

    def __init__(self, config: FuserConfig | None = None) -> None:
        self.config = config or FuserConfig()
        self.store = ModelStore(self.config.store)
        self.runtime = Runtime(self.config.runtime)
        self.analyzer = FaceAnalyzer(self.store, self.runtime, self.config.analysis)
        self.cache = AnalysisCache(self.config.analysis_cache_mb * 1024 * 1024)
        self.restorer = RestoreStage(self.store, self.runtime, self.config.restore)
        self._engines: dict[str, FusionEngine] = {}
        self._lock = threading.Lock()

    def engine(self, name: str) -> FusionEngine:
        # Imported here: the engines pull in SciPy (~0.6 s), which `facefuse detect` and /v1/detect never need.
        from .fusion.engines import make_engine

        with self._lock:
            if name not in self._engines:
                self._engines[name] = make_engine(name, self.store, self.runtime, self.config.swapper_files)
            return self._engines[name]

    def analyze(self, image: ImageInput, role: str = "image") -> ImageAnalysis:
        """Decode and analyse one photo; errors name ``role`` ("source"/"target") when it is not "image".

        Photos given as bytes or paths are looked up in the analysis cache by content first; arrays are not
        (hashing megabytes of pixels costs about what it saves).
        """
        start = time.perf_counter()
        try:
            data = image if isinstance(image, np.ndarray) else read_input_bytes(image, self.config.analysis.limits)
            key = None if isinstance(data, np.ndarray) or not self.cache.max_bytes else content_key(data)
            cached = self.cache.get(key) if key else None
            if cached is not None:
                lookup_ms = (time.perf_counter() - start) * 1000
                return ImageAnalysis(cached.image, cached.faces, cached.rotation, {"cache_hit": lookup_ms})
            pixels = decode_image(data, self.config.analysis.limits).pixels
        except FacefuseError as exc:
            raise exc if role == "image" else exc.about(role) from None
        decode_ms = (time.perf_counter() - start) * 1000
        analysis = self.analyzer.analyze(pixels)
        analysis.timings_ms = {"decode": decode_ms, **analysis.timings_ms}
        if key:
            self.cache.put(key, analysis)
        return analysis

    def fuse(self, source: ImageInput, target: ImageInput, options: FusionOptions | None = None) -> FusionResult:
        options = options or FusionOptions()
        engine = self.engine(options.engine)
        watch = Stopwatch()
        source_analysis = self.analyze(source, "source")
        watch.lap("analyze_source")
        target_analysis = self.analyze(target, "target")
        watch.lap("analyze_target")
        # the gate's verdict waits for the restore stage, which may fix a blurry or small face
        source_face = _chosen(source_analysis, options.source_face, "source", allow_all=False, gate=False)[0]
        chosen = _chosen(target_analysis, options.target_face, "target", allow_all=True, gate=False)
        quality = self.config.analysis.quality
        source_image, source_face, notes = self.restorer.source(source_analysis.image, source_face,
                                                                options.restore, quality)
        fusing = options.profile_degree > 0 or options.feature_degree > 0
        # a target face is restored only when it is fused: with zero degrees the photo comes back untouched
        image, restored, target_notes = self.restorer.targets(target_analysis.image, chosen,
                                                              options.restore if fusing else "off", quality)
        watch.lap("restore")
        _gate([source_face], "source")
        target_faces = _gate(restored, "target")
        prepared = engine.prepare_source(source_image, source_face)
        watch.lap("prepare_source")
        if not fusing:
            faces_out = [_face_report(chosen[restored.index(f)], target_analysis) for f in target_faces]
        else:
            faces_out = []
            for face in target_faces:
                rendered = engine.render(prepared, image, face, options)
                watch.lap("render")
                image = compose(image, rendered, options)
                watch.lap("blend")
                faces_out.append(_face_report(chosen[restored.index(face)], target_analysis))
        if options.visible_label:
            image = add_visible_mark(image)
        watch.lap("label")
        warnings = notes + target_notes + [
            f"skipped target face at {np.round(f.box).astype(int).tolist()}: {f.issues[0].message}"
            for f in restored if f.issues and options.target_face == "all"]
        timings = {**{f"source_{k}": v for k, v in source_analysis.timings_ms.items()},
                   **{f"target_{k}": v for k, v in target_analysis.timings_ms.items()}, **watch.timings}
        timings["total"] = sum(watch.timings.values())
        return FusionResult(image, faces_out, timings, warnings)


def _chosen(analysis: ImageAnalysis, choice: str | int, role: str, *, allow_all: bool,
            gate: bool = True) -> list[Face]:
    try:
        return select_faces(analysis, choice, allow_all=allow_all, gate=gate)
    except FacefuseError as exc:
        raise exc.about(role) from None


def _gate(faces: list[Face], role: str) -> list[Face]:
    """The quality gate's verdict after restoring: the accepted faces, or the first issue as the error."""
    accepted = [f for f in faces if f.accepted]
    if not accepted:
        try:
            raise_first_issue(max(faces, key=lambda f: f.area))
        except FacefuseError as exc:
            raise exc.about(role) from None
    return accepted


def _face_report(face: Face, analysis: ImageAnalysis) -> dict[str, Any]:
    return {"index": analysis.faces.index(face), "box": [round(float(v), 1) for v in face.box],
            "score": round(face.score, 4), "pose": face.pose.to_dict() if face.pose else None}
