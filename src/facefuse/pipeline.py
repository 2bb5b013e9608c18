"""The one pipeline: decode → detect → landmarks → restore → quality gate → align → fuse (engine) → segment →
relight/blend → label → encode.

:class:`Fuser` owns the loaded models (one session per model, created on first use) and is what the library, the
CLI and the service all call; none of them has logic of its own beyond parsing and printing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from .analysis.analyzer import FaceAnalyzer
from .analysis.cache import AnalysisCache, content_key
from .analysis.quality import raise_first_issue
from .analysis.select import select_faces
from .analysis.types import Face, ImageAnalysis
from .config import AnalysisConfig, RuntimeConfig, StoreConfig
from .errors import FacefuseError
from .fusion.blend import LutSmoother, compose
from .fusion.engine import FusionEngine, FusionOptions, SourceFace
from .analysis.segmentation import SEGMENTER_MODEL, FaceSegmenter
from .fusion.occlusion import occlusion_masks
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


@dataclass(frozen=True)
class PreparedSource:
    """The analysed source photo, its chosen face and the engine's prepared payload."""

    analysis: ImageAnalysis
    face: Face
    prepared: SourceFace
    engine: FusionEngine
    timings_ms: dict[str, float]
    warnings: tuple[str, ...] = ()  # what the source's stages had to say (e.g. that it was restored)


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


T = TypeVar("T")


class LoadOnce(Generic[T]):
    """Things built on first use (engines, the segmenter), each once, each behind its own future.

    Why not one lock around every load: loading an engine may download hundreds of megabytes, and one lock held
    across that blocked every fusion, even with engines already loaded. Here only callers of the *same* key wait
    for its build; a build that fails is forgotten, so the next caller tries again.
    """

    def __init__(self) -> None:
        self._futures: dict[str, Future[T]] = {}
        self._lock = threading.Lock()  # guards the dict only, never held during a build

    def get(self, key: str, build: Callable[[], T]) -> T:
        with self._lock:
            future = self._futures.get(key)
            builder = future is None
            if builder:
                future = self._futures[key] = Future()
        assert future is not None
        if builder:
            try:
                future.set_result(build())
            except BaseException as exc:
                with self._lock:
                    del self._futures[key]
                future.set_exception(exc)
        return future.result()


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
        self._loaded: LoadOnce[Any] = LoadOnce()

    def engine(self, name: str) -> FusionEngine:
        # Imported here: the engines pull in SciPy (~0.6 s), which `facefuse detect` and /v1/detect never need.
        from .fusion.engines import make_engine

        engine: FusionEngine = self._loaded.get(
            f"engine:{name}", lambda: make_engine(name, self.store, self.runtime, self.config.swapper_files))
        return engine

    def segmenter(self) -> FaceSegmenter | None:
        """The occlusion segmenter, or None where ``allow_noncommercial_models`` is off (it was trained on UTKFace)."""
        if not self.store.permits(SEGMENTER_MODEL):
            return None
        segmenter: FaceSegmenter = self._loaded.get(
            "segmenter", lambda: FaceSegmenter(self.runtime.session(self.store.ensure(SEGMENTER_MODEL))))
        return segmenter

    def analyze(self, image: ImageInput, role: str = "image") -> ImageAnalysis:
        """Decode and analyse one photo; errors name ``role`` ("source"/"target") when it is not "image".

        Photos given as bytes or paths are looked up in the analysis cache by content first; arrays are not
        (hashing megabytes of pixels costs about what it saves).
        """
        found = self.analyze_many([(image, role)])[0]
        if isinstance(found, FacefuseError):
            raise found
        return found

    def analyze_many(self, images: list[tuple[ImageInput, str]]) -> list[ImageAnalysis | FacefuseError]:
        """Several (photo, role) pairs at once, the faces of all of them in one FaceMesh batch (see
        :meth:`FaceAnalyzer.analyze_many`). A photo that cannot be read gets its error in its place, so one bad
        upload does not fail the other requests of a batch."""
        found: list[ImageAnalysis | FacefuseError | None] = [None] * len(images)
        fresh: list[tuple[int, np.ndarray, str | None, float]] = []  # index, pixels, cache key, decode ms
        for index, (image, role) in enumerate(images):
            start = time.perf_counter()
            try:
                data = image if isinstance(image, np.ndarray) else read_input_bytes(image, self.config.analysis.limits)
                key = None if isinstance(data, np.ndarray) or not self.cache.max_bytes else content_key(data)
                cached = self.cache.get(key) if key else None
                if cached is not None:
                    lookup_ms = (time.perf_counter() - start) * 1000
                    found[index] = ImageAnalysis(cached.image, cached.faces, cached.rotation, {"cache_hit": lookup_ms})
                    continue
                pixels = decode_image(data, self.config.analysis.limits).pixels
            except FacefuseError as exc:
                found[index] = exc if role == "image" else exc.about(role)
                continue
            fresh.append((index, pixels, key, (time.perf_counter() - start) * 1000))
        for (index, _, key, decode_ms), analysis in zip(fresh, self.analyzer.analyze_many([f[1] for f in fresh])):
            analysis = replace(analysis, timings_ms={"decode": decode_ms, **analysis.timings_ms})
            if key:
                self.cache.put(key, analysis)
            found[index] = analysis
        return [item for item in found if item is not None]

    def prepare(self, source: ImageInput, options: FusionOptions) -> PreparedSource:
        """Everything about the source a fusion needs, done once: a video reuses it for every frame."""
        self.engine(options.engine)  # an unknown engine fails before any photo is decoded
        watch = Stopwatch()
        analysis = self.analyze(source, "source")
        watch.lap("analyze_source")
        return self._prepared(analysis, options, watch)

    def _prepared(self, analysis: ImageAnalysis, options: FusionOptions, watch: Stopwatch) -> PreparedSource:
        engine = self.engine(options.engine)
        # the gate's verdict waits for the restore stage, which may fix a blurry or small face
        face = _chosen(analysis, options.source_face, "source", allow_all=False, gate=False)[0]
        image, face, notes = self.restorer.source(analysis.image, face, options.restore, self.config.analysis.quality)
        watch.lap("restore_source")
        _gate([face], "source")
        prepared = engine.prepare_source(image, face)
        watch.lap("prepare_source")
        return PreparedSource(analysis, face, prepared, engine, watch.timings, tuple(notes))

    def apply(self, source: PreparedSource, image: np.ndarray, faces: list[Face], options: FusionOptions,
              watch: Stopwatch | None = None, smooth_luts: LutSmoother | None = None) -> np.ndarray:
        """``image`` with ``source``'s face fused into each of ``faces`` (no label; that is the caller's last step).

        ``smooth_luts`` lets a video carry the colour transfer over time (see :func:`facefuse.fusion.blend.compose`).
        """
        watch = watch or Stopwatch()
        if options.profile_degree == 0 and options.feature_degree == 0:
            return image
        segmenter = self.segmenter() if options.segmentation == "auto" else None
        for face in faces:
            rendered = source.engine.render(source.prepared, image, face, options)
            watch.lap("render")
            parsing = occlusion_masks(segmenter, rendered, image) if segmenter is not None else None
            watch.lap("segment")
            image = compose(image, rendered, options, parsing, smooth_luts)
            watch.lap("blend")
        return image

    def fuse(self, source: ImageInput, target: ImageInput, options: FusionOptions | None = None) -> FusionResult:
        options = options or FusionOptions()
        prepared = self.prepare(source, options)
        watch = Stopwatch()
        target_analysis = self.analyze(target, "target")
        watch.lap("analyze_target")
        return self._fuse_prepared(prepared, target_analysis, options, watch)

    def fuse_analyses(self, source: ImageAnalysis, target: ImageAnalysis,
                      options: FusionOptions | None = None) -> FusionResult:
        """The stages after analysis, for photos analysed elsewhere (the Ray Serve analysis deployment); their
        analysis times count in the total as when :meth:`fuse` analyses them itself."""
        options = options or FusionOptions()
        source_watch = Stopwatch()
        source_watch.timings["analyze_source"] = sum(source.timings_ms.values())
        prepared = self._prepared(source, options, source_watch)
        watch = Stopwatch()  # started after the source is prepared, as in fuse()
        watch.timings["analyze_target"] = sum(target.timings_ms.values())
        return self._fuse_prepared(prepared, target, options, watch)

    def _fuse_prepared(self, prepared: PreparedSource, target_analysis: ImageAnalysis, options: FusionOptions,
                       watch: Stopwatch) -> FusionResult:
        # the gate's verdict waits for the restore stage, which may fix a blurry or small face
        chosen = _chosen(target_analysis, options.target_face, "target", allow_all=True, gate=False)
        fusing = options.profile_degree > 0 or options.feature_degree > 0
        # a target face is restored only when it is fused: with zero degrees the photo comes back untouched
        image, restored, target_notes = self.restorer.targets(target_analysis.image, chosen,
                                                              options.restore if fusing else "off",
                                                              self.config.analysis.quality)
        watch.lap("restore")
        target_faces = _gate(restored, "target")
        warnings = [*prepared.warnings, *target_notes,
                    *(f"skipped target face at {np.round(f.box).astype(int).tolist()}: {f.issues[0].message}"
                      for f in restored if f.issues and options.target_face == "all")]
        warn_yaw = self.config.analysis.quality.warn_yaw
        warnings += [w for face, role in [(prepared.face, "source"), *((f, "target") for f in target_faces)]
                     for w in _side_face_warnings(face, role, warn_yaw)]
        if options.segmentation == "auto" and self.segmenter() is None:
            warnings.append("occlusion masks off: the face segmenter is a non-commercial model and "
                            "allow_noncommercial_models is false; classic geometric masks were used")
        image = self.apply(prepared, image, target_faces, options, watch)
        faces_out = [_face_report(chosen[restored.index(f)], target_analysis) for f in target_faces]
        if options.visible_label:
            image = add_visible_mark(image)
        watch.lap("label")
        source_timings = {**{f"source_{k}": v for k, v in prepared.analysis.timings_ms.items()}, **prepared.timings_ms}
        timings = {**source_timings, **{f"target_{k}": v for k, v in target_analysis.timings_ms.items()},
                   **watch.timings}
        timings["total"] = sum(watch.timings.values()) + sum(prepared.timings_ms.values())
        return FusionResult(image, faces_out, timings, warnings)


def _side_face_warnings(face: Face, role: str, limit: float) -> list[str]:
    if face.pose is None or abs(face.pose.yaw) <= limit:
        return []
    return [f"the {role} face is turned {abs(face.pose.yaw):.0f}° (over {limit:.0f}°): its hidden side is filled "
            f"from the visible side, so expect less of the source's likeness there"]


def _gate(faces: list[Face], role: str) -> list[Face]:
    """The quality gate's verdict after restoring: the accepted faces, or the first issue as the error."""
    accepted = [f for f in faces if f.accepted]
    if not accepted:
        try:
            raise_first_issue(max(faces, key=lambda f: f.area))
        except FacefuseError as exc:
            raise exc.about(role) from None
    return accepted


def _chosen(analysis: ImageAnalysis, choice: str | int, role: str, *, allow_all: bool,
            gate: bool = True) -> list[Face]:
    try:
        return select_faces(analysis, choice, allow_all=allow_all, gate=gate)
    except FacefuseError as exc:
        raise exc.about(role) from None


def _face_report(face: Face, analysis: ImageAnalysis) -> dict[str, Any]:
    return {"index": analysis.faces.index(face), "box": [round(float(v), 1) for v in face.box],
            "score": round(face.score, 4), "pose": face.pose.to_dict() if face.pose else None}
