"""The Fuser: the loaded models and the one ordered list of stages (:mod:`facefuse.stages`) —
decode → detect → landmarks → gate → restore → align → render → segment → relight → blend → post → label → encode.

:class:`Fuser` owns the loaded models (one session per model, created on first use) and is what the library, the
CLI and the service all call; none of them has logic of its own beyond parsing and printing.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import numpy as np

from .analysis.analyzer import FaceAnalyzer
from .analysis.cache import AnalysisCache, FaceMemo
from .analysis.segmentation import SEGMENTER_MODEL, FaceSegmenter
from .analysis.select import parse_face_choice
from .analysis.types import Face, ImageAnalysis
from .config import AnalysisConfig, RuntimeConfig, StoreConfig
from .errors import ErrorCode, FacefuseError
from .fusion.engine import FusionEngine, FusionOptions
from .fusion.swappers import SwapperFiles
from .imageio import ImageInput, encode_image
from .models import ModelStore
from .fusion.restorer import LazyRestorer, RestoreConfig
from .runtime import Runtime
from .stages import ANALYSIS, SOURCE, Models, Pipeline, PreparedSource, Record, Stage, TargetFace, default_stages
from .stages.encode import EncodeOptions, Encoding
from .stages.gate import Gate

__all__ = ["MAX_SOURCE_PHOTOS", "EncodeOptions", "Encoding", "Fuser", "FuserConfig", "FusionResult", "LoadOnce",
           "PreparedSource", "TargetFace"]


SourceInput = ImageInput | ImageAnalysis
MAX_SOURCE_PHOTOS = 5  # photos of one source person a fusion takes (each costs a source's preparation, ~25 ms)


def check_source_count(count: int) -> None:
    """``INVALID_OPTION`` unless 1 to :data:`MAX_SOURCE_PHOTOS` source photos were given (every shell asks here
    before any photo is decoded)."""
    if not 1 <= count <= MAX_SOURCE_PHOTOS:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"{count} source photos given; 1 to {MAX_SOURCE_PHOTOS} "
                            "are accepted", "give the photos of the one person that show the face best",
                            {"source_photos": count})


def source_photo_error(error: FacefuseError, index: int, count: int) -> FacefuseError:
    """``error`` about one of ``count`` source photos, naming its place (unchanged when there is one photo)."""
    if count == 1:
        return error
    return FacefuseError(error.code, f"source photo {index + 1} of {count}: {error.message}", error.hint,
                         {**error.details, "source_photo": index})


@dataclass(frozen=True)
class FuserConfig:
    store: StoreConfig = field(default_factory=StoreConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    swapper_files: SwapperFiles | None = None  # local files for a swapper engine (--model-path)
    analysis_cache_mb: int = 64  # decoded photos whose analysis is kept for reuse (0 turns the cache off)
    restore: RestoreConfig = field(default_factory=RestoreConfig)


@dataclass
class FusionResult:
    image: np.ndarray
    faces: list[dict[str, Any]]
    timings_ms: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    data: bytes | None = None  # the encode stage's bytes, when the fusion was asked for an encoding

    def encode(self, fmt: str = "png", quality: int = 92) -> bytes:
        """Encoded bytes with the AI-generated metadata label (the encode stage's encoder)."""
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


class Fuser:
    """The loaded models and the one ordered list of stages; thread-safe, meant to be created once and reused.

    Every path is a slice of :attr:`stages` (see :mod:`facefuse.stages`): :meth:`fuse` (a photo),
    :meth:`prepare` + :meth:`fuse_prepared` (a batch: the source once), :meth:`fuse_frame` (a video or live frame),
    :meth:`analyze_many` + :meth:`fuse_analyses` (the Ray deployments), :meth:`detect`.
    """

    def __init__(self, config: FuserConfig | None = None) -> None:
        self.config = config or FuserConfig(store=StoreConfig.from_env())  # the library's quick use
        self.store = ModelStore(self.config.store)
        self.runtime = Runtime(self.config.runtime)
        self.analyzer = FaceAnalyzer(self.store, self.runtime, self.config.analysis)
        self.cache = AnalysisCache(self.config.analysis_cache_mb * 1024 * 1024)
        self.restorer = LazyRestorer(self.store, self.runtime, self.config.restore)
        self._loaded: LoadOnce[Any] = LoadOnce()
        models = Models(self.analyzer, self.cache, FaceMemo(), self.restorer, self.engine, self.segmenter)
        self.stages: Pipeline = default_stages(models, self.config.analysis)

    def with_stage(self, stage: Stage, after: str) -> Fuser:
        """A Fuser sharing these loaded models whose list has ``stage`` added after the stage named ``after``."""
        other = copy.copy(self)
        other.stages = self.stages.inserted(stage, after)
        return other

    @property
    def gate(self) -> Gate:
        """The quality gate stage (the video tracker asks it which faces it may choose)."""
        gate: Gate = self.stages["gate"]  # type: ignore[assignment]
        return gate

    def engine(self, name: str) -> FusionEngine:
        # Imported here: the engines pull in SciPy (~0.6 s), which `facefuse detect` and /v1/detect never need.
        from .fusion.engine_table import make_engine

        engine: FusionEngine = self._loaded.get(
            f"engine:{name}", lambda: make_engine(name, self.store, self.runtime, self.config.swapper_files))
        return engine

    def segmenter(self) -> FaceSegmenter | None:
        """The occlusion segmenter, or None where ``allow_noncommercial_models`` is off (it was trained on UTKFace)."""
        if not self.store.permits(SEGMENTER_MODEL):
            return None
        segmenter: FaceSegmenter = self._loaded.get("segmenter", lambda: FaceSegmenter(self.runtime.session(
            # the INT8/FP16 variant `facefuse optimize --install` made, as for FaceMesh; FP32 where none passed
            self.store.ensure_precision(SEGMENTER_MODEL, self.config.analysis.precision), stage="segment")))
        return segmenter

    # --- detect --------------------------------------------------------------------------------------------------
    def detect(self, image: ImageInput | ImageAnalysis, choice: str | int = "largest", role: str = "image") -> Record:
        """decode … gate: every face measured, and the gate's verdict on the chosen ones as a fusion would give it
        without restoring (``record.refusal`` is None when the photo can be used as it is)."""
        options = FusionOptions(target_face=parse_face_choice(choice), restore="off")
        record = _given(image, role, options, must_fuse=False)
        record = self.stages.between("decode", "gate")(record)
        assert record.analysis is not None
        return replace(record, analysis=replace(record.analysis, timings_ms=dict(record.timings_ms)))

    def analyze(self, image: ImageInput, role: str = "image") -> ImageAnalysis:
        """Decode and analyse one photo, every face measured by the gate; errors name ``role`` ("source"/"target")
        when it is not "image". Photos given as bytes or paths are looked up in the analysis cache by content."""
        analysis = self.detect(image, "all", role).analysis
        assert analysis is not None
        return analysis

    def analyze_many(self, images: Sequence[tuple[ImageInput, str, FusionOptions | None]]
                     ) -> list[ImageAnalysis | FacefuseError]:
        """decode … landmarks for several (photo, role, fusion options) at once, the faces of all of them in one
        FaceMesh batch (the Ray analysis deployment). A photo with options is a fusion's source, analysed as
        :meth:`prepare` analyses one (a large photo at reduced scale, :mod:`facefuse.stages.decode`); without, the
        photo as it is. A photo that cannot be read gets its error in its place, so one bad upload does not fail the
        other requests of a batch."""
        records = [Record(role, options or FusionOptions(), input=image, reducible=options is not None)  # type: ignore[arg-type]
                   for image, role, options in images]
        found: list[ImageAnalysis | FacefuseError] = []
        for record in self.stages.only(ANALYSIS).many(records):
            if isinstance(record, FacefuseError):
                found.append(record)
            else:
                assert record.analysis is not None
                found.append(replace(record.analysis, timings_ms=dict(record.timings_ms)))
        return found

    # --- fusion --------------------------------------------------------------------------------------------------
    def prepare(self, source: SourceInput | Sequence[SourceInput], options: FusionOptions,
                parse_aside: bool = False) -> PreparedSource:
        """The source's slice of the list, done once: a batch reuses it for every target, a video for every frame.

        ``source`` may be several photos of one person (a list or tuple of at most :data:`MAX_SOURCE_PHOTOS`):
        each is prepared, and each target face is fused from the one whose face is turned most like it
        (:meth:`PreparedSource.nearest`); a photo that fails is reported with its place in the list.

        ``parse_aside``: its last stage (segment: the source face parsed in its own photo) runs on a thread of its
        own, and the prepared source is returned before it ends (:meth:`PreparedSource.source_parsing` waits for
        it). A photo fusion's target needs the parsing only after its face is rendered (~15 ms at 720p), so the
        parse (~6 ms) leaves the path the fusion waits on."""
        if not isinstance(source, (list, tuple)):
            return self._prepare_one(source, options, parse_aside)
        check_source_count(len(source))
        photos: list[PreparedSource] = []
        for index, photo in enumerate(source):
            try:
                photos.append(self._prepare_one(photo, options, parse_aside))
            except BaseException as exc:
                _let_finish([done.parsing_aside for done in photos])  # the earlier photos' parsing aside
                if isinstance(exc, FacefuseError):
                    raise source_photo_error(exc, index, len(source)) from exc
                raise
        return replace(photos[0], others=tuple(photos[1:]))

    def _prepare_one(self, source: SourceInput, options: FusionOptions, parse_aside: bool) -> PreparedSource:
        """One source photo through the source's slice of the list (:meth:`prepare`)."""
        engine = self.engine(options.engine)  # resolved once; an unknown engine fails before any photo is decoded
        record = replace(_given(source, "source", options), engine=engine, reducible=True)
        aside = None
        if parse_aside:
            before_parse, parse = self.stages.only(SOURCE).split("segment")
            record = before_parse(record)
            aside = _on_a_thread(parse, record, "facefuse-source-parsing")
        else:
            record = self.stages.only(SOURCE)(record)
        (chosen,) = record.faces
        assert record.analysis is not None and record.prepared is not None and record.engine is not None
        return PreparedSource(record.analysis, chosen.found, chosen.face, record.prepared, record.engine,
                              record.timings_ms, record.notes, record.parsing, aside)

    def fuse(self, source: ImageInput | Sequence[ImageInput], target: ImageInput, options: FusionOptions | None = None,
             encoding: Encoding | None = None) -> FusionResult:
        """One fusion: the source's slice, then the target through the whole list (encoded when ``encoding``);
        ``source`` may be several photos of one person (:meth:`prepare`).

        The target's stages up to its faces' alignment (decode, detect, landmarks, gate, restore: ~40 % of a
        fusion whose photos are both new), then what its first face's later stages need of the target alone
        (:meth:`~facefuse.stages.base.Pipeline.ahead`: the aligned crop, the target's half of the segmenter output),
        run on a second thread while this one does the source's slice: decoding and the models release the GIL, so
        on two cores the two overlap instead of adding up. A source that fails is still the error reported.

        Whichever side fails, the call returns only once the other side's threads have ended: a CLI that exits on
        the error while a thread is still inside ONNX Runtime is aborted by the C++ runtime ("terminate called
        without an active exception", exit status −6 instead of the error's own code)."""
        options = options or FusionOptions()
        engine = self.engine(options.engine)  # an unknown engine fails before any photo is decoded
        before, rest = self.stages.split("align")
        analysing = _on_a_thread(lambda record: rest.ahead(before(record)),
                                 replace(_given(target, "target", options), engine=engine), "facefuse-target-analysis")
        try:
            prepared = self.prepare(source, options, parse_aside=True)
        except BaseException:
            _let_finish([analysing])
            raise
        try:
            fused = rest(replace(analysing.result(), source=prepared, encode=encoding))
        except BaseException:
            _let_finish([photo.parsing_aside for photo in prepared.photos])
            raise
        return _result(prepared.settled(), fused, self.stages.names)

    def fuse_prepared(self, source: PreparedSource, target: ImageInput | ImageAnalysis, options: FusionOptions,
                      encoding: Encoding | None = None) -> FusionResult:
        """``target`` (a photo, or an analysis made elsewhere) through the whole list, with a prepared source."""
        record = replace(_given(target, "target", options), source=source, encode=encoding)
        return _result(source, self.stages(record), self.stages.names)

    def fuse_analyses(self, source: ImageAnalysis | Sequence[ImageAnalysis], target: ImageAnalysis,
                      options: FusionOptions | None = None, encoding: Encoding | None = None) -> FusionResult:
        """The stages after analysis, for photos analysed elsewhere (the Ray Serve analysis deployment); their
        analysis times count in the total as when :meth:`fuse` analyses them itself. ``source`` may be several
        (:meth:`prepare`)."""
        options = options or FusionOptions()
        return self.fuse_prepared(self.prepare(source, options), target, options, encoding)

    def fuse_frame(self, source: PreparedSource, frame: np.ndarray, faces: Sequence[Face | TargetFace],
                   options: FusionOptions) -> Record:
        """One video or live frame: gate … label on the faces a tracker chose (with a track's colour smoother in
        a :class:`TargetFace`). Never raises for a face the gate refuses: that frame comes back unfused
        (``record.faces`` is empty), still labelled. ``record.image`` is the frame to show or encode."""
        targets = tuple(f if isinstance(f, TargetFace) else TargetFace(f, f) for f in faces)
        record = Record("frame", options, image=frame, must_fuse=False, source=source, faces=targets)
        return self.stages.between("gate", "label")(record)


def _let_finish(futures: Sequence[Future[Record] | None]) -> None:
    """Wait for work on other threads whose result is no longer wanted (an error elsewhere is the one reported)."""
    for future in futures:
        if future is not None:
            with contextlib.suppress(BaseException):
                future.result()


def _on_a_thread(work: Callable[[Record], Record], record: Record, name: str) -> Future[Record]:
    """``work(record)`` on a new thread (one per call: nothing shared between requests, no pool to size)."""
    future: Future[Record] = Future()

    def run() -> None:
        try:
            future.set_result(work(record))
        except BaseException as exc:  # handed to the caller, which raises it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _given(image: ImageInput | ImageAnalysis, role: str, options: FusionOptions, must_fuse: bool = True) -> Record:
    """A record for a photo to decode, or for an analysis made elsewhere (its timings carried over)."""
    if isinstance(image, ImageAnalysis):
        return Record(role, options, must_fuse=must_fuse, analysis=image, image=image.image,  # type: ignore[arg-type]
                      timings_ms=MappingProxyType(dict(image.timings_ms)))
    return Record(role, options, input=image, must_fuse=must_fuse)  # type: ignore[arg-type]


def _result(source: PreparedSource, record: Record, order: Sequence[str]) -> FusionResult:
    """The fusion's result; its timings name the source's stages, then the target's, each in the list's ``order``
    (work a photo fusion did ahead, :meth:`Pipeline.ahead`, is reported where its stage stands in the list)."""
    assert record.image is not None and record.analysis is not None
    photos = source.photos
    prepared: dict[str, float] = {}  # every source photo's stages, summed
    for photo in photos:
        for stage, ms in photo.timings_ms.items():
            prepared[stage] = prepared.get(stage, 0.0) + ms
    timings = {**{f"source_{k}": v for k, v in _in_order(prepared, order).items()},
               **_in_order(record.timings_ms, order)}
    timings["total"] = sum(v for k, v in timings.items() if k != "encode")
    # each face's report, with which of the source photos it was fused from (0 when one was given)
    faces = [{**_face_report(t.found, record.analysis), "source_photo": photos.index(source.nearest(t.face))}
             for t in record.faces]
    warnings = [*dict.fromkeys(w for photo in photos for w in photo.warnings), *record.notes]
    return FusionResult(record.image, faces, timings, warnings, record.encoded)


def _in_order(timings: Mapping[str, float], order: Sequence[str]) -> dict[str, float]:
    return {**{name: timings[name] for name in order if name in timings}, **timings}


def _face_report(face: Face, analysis: ImageAnalysis) -> dict[str, Any]:
    return {"index": analysis.faces.index(face), "box": [round(float(v), 1) for v in face.box],
            "score": round(face.score, 4), "pose": face.pose.to_dict() if face.pose else None}
