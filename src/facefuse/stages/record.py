"""The one record every stage reads and returns: what the stages before it computed for one photo (and, inside the
per-face stages, for one of its faces).

Frozen: a stage returns a new record (:func:`dataclasses.replace`) and never changes the one it was given, so a
record can be shared (a prepared source by every target of a batch and every frame of a video) without locks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal
from collections.abc import Callable, Mapping
from concurrent.futures import Future

import numpy as np

from ..analysis.types import Face, ImageAnalysis
from ..errors import FacefuseError
from ..fusion.engine import FusionOptions

if TYPE_CHECKING:
    from ..analysis.segmentation import FaceParsing
    from ..fusion.blend import LutSmoother
    from ..fusion.engine import FusionEngine, RenderedFace, SourceFace, StreamCarry
    from ..fusion.occlusion import OcclusionMasks
    from ..imageio import ImageInput
    from ..fusion.blend import BlendRegion
    from .encode import Encoding

Role = Literal["source", "target", "image", "frame"]


@dataclass(frozen=True, eq=False)
class AlignedFace:
    """The align stage's result, computed once per target face: the engine's image → crop matrix and the target
    photo in that crop, as photographed (the render stage reshapes its own copy; the segment stage reads this)."""

    matrix: np.ndarray  # (2, 3) image → crop
    crop: np.ndarray  # (size, size, 3) uint8


@dataclass(frozen=True, eq=False)
class Ahead:
    """The per-face stages' work on a face that needs the target alone, done before the source was ready
    (:meth:`facefuse.stages.base.Pipeline.ahead`); :meth:`Record.with_face` hands it to the list's run."""

    aligned: AlignedFace | None = None  # the align stage's crop
    target_parsing: np.ndarray | None = None  # the segment stage's target half (its class probabilities)


@dataclass(frozen=True, eq=False)
class TargetFace:
    """One face the per-face stages work on: as the analysis found it (for the report), as the stages before
    changed it (restored, re-measured), and the colour smoother and segmenter output a video carries for its
    track."""

    found: Face
    face: Face
    smoother: LutSmoother | None = None
    # a video's carrier of the segmenter's output for this face's track (facefuse.video.parsing.ParsingTurn): called
    # with the work that computes this frame's probabilities, it runs it or gives an earlier frame's
    parsing: Callable[[Callable[[], Any]], Any] | None = None
    # what the render takes from an earlier frame of the track (the face's triangles, its make-up toning)
    carry: StreamCarry | None = None
    ahead: Ahead | None = None  # a photo fusion's work done on the target's thread (its first face only)
    # of several source photos, the one a stream's track was given at its first frame (facefuse.video.turns): the
    # face keeps it while the head turns, so its texture never switches from frame to frame
    source: PreparedSource | None = None


@dataclass(frozen=True, eq=False)
class PreparedSource:
    """The source's record after its slice of the list: analysed, gated, restored, and the engine's payload.

    Made once per fusion, batch, video or live session (:meth:`facefuse.pipeline.Fuser.prepare`)."""

    analysis: ImageAnalysis
    # the source face as the analysis found it in the photo as sent: its size is the detail the photo really has
    # (the post stage decides on it), which ``face`` no longer says once pre-restoration enlarged it (~100 px)
    found: Face
    face: Face  # as the stages changed it: restored, in the restored photo's coordinates, measured again
    prepared: SourceFace
    engine: FusionEngine
    timings_ms: Mapping[str, float]
    warnings: tuple[str, ...] = ()
    # the segment stage's parsing of the source face in its own photo (engines that map the source, segmenter on);
    # a photo fusion parses it on a thread of its own while the target's face is rendered (Fuser.fuse): then
    # ``parsing_aside`` is that work's future record, which :meth:`source_parsing` waits for
    parsing: FaceParsing | None = None
    parsing_aside: Future[Record] | None = None
    # further photos of the same person, each prepared alike: every target face is fused from the photo whose face
    # is turned most like it (:meth:`nearest`)
    others: tuple[PreparedSource, ...] = ()

    @property
    def photos(self) -> tuple[PreparedSource, ...]:
        """This photo and the others, in the order they were given."""
        return (self, *self.others)

    def nearest(self, face: Face) -> PreparedSource:
        """The photo whose face is turned most like ``face`` (yaw and pitch, degrees summed; the roll is the crop's
        to undo), the first given on a tie or where a pose is unknown.

        Why: the mesh engine takes the new face's texture from the source photo as it was turned; a source turned
        away from the target's pose is stretched where it shows the face foreshortened, mirrored where it hides it.
        Given every photo but the judge's reference of each person, the nearest one raised MobileFaceNet top-1 from
        83.7 % to 88.4 % and dlib's from 87.2 % to 94.2 % on the face-api-js and hard sets' cross pairs, and the
        pairs without a smear over 1 % from 38 % to 47 % (``benchmarks/naturalness.py``, several-sources rows)."""
        if not self.others or face.pose is None:
            return self

        def distance(photo: PreparedSource) -> float:
            pose = photo.face.pose
            return float("inf") if pose is None else abs(pose.yaw - face.pose.yaw) + abs(pose.pitch - face.pose.pitch)

        return min(self.photos, key=distance)  # min keeps the first of equals

    def source_parsing(self) -> FaceParsing | None:
        """The source's parsing, waiting for it when it is being done aside."""
        return self.parsing if self.parsing_aside is None else self.parsing_aside.result().parsing

    def settled(self) -> PreparedSource:
        """This source (and each other photo) with the parsing done aside in place, and its time and notes among
        the source's."""
        others = tuple(photo.settled() for photo in self.others)
        if self.parsing_aside is None:
            return replace(self, others=others) if self.others else self
        parsed = self.parsing_aside.result()
        return replace(self, parsing=parsed.parsing, parsing_aside=None, timings_ms=parsed.timings_ms,
                       warnings=parsed.notes, others=others)


@dataclass(frozen=True, eq=False)
class Record:
    """What the stages know about one photo (``role``: the source, a target, a photo to detect, a video frame)."""

    role: Role
    options: FusionOptions = field(default_factory=FusionOptions)
    input: ImageInput | None = None  # what decode reads: a path, bytes or an RGB array
    must_fuse: bool = True  # a refusal is raised (photos) or kept in ``refusal`` (detect, video frames)
    # a fusion's source photo: a large one may come at ½–⅛ scale (see facefuse.stages.decode); ``reduction``
    # is the scale it was decoded at, its faces' coordinates are in those pixels
    reducible: bool = False
    reduction: int = 1
    cache_key: str | None = None
    detected: Any = None  # the detect stage's boxes for the landmarks stage (facefuse.analysis.analyzer.Detected)
    analysis: ImageAnalysis | None = None
    image: np.ndarray | None = None  # the photo being worked on: decoded, then restored, then fused face by face
    faces: tuple[TargetFace, ...] = ()  # the chosen faces that passed the gate
    refusal: FacefuseError | None = None  # the gate's verdict when it refused and did not raise
    source: PreparedSource | None = None  # for targets and frames
    engine: FusionEngine | None = None  # the source's engine, resolved once (by Fuser.prepare, else by render)
    prepared: SourceFace | None = None  # the source's render stage: the engine's payload
    parsing: FaceParsing | None = None  # the source's segment stage: its face parsed in its own photo
    encode: Encoding | None = None  # set: the encode stage writes ``encoded``
    encoded: bytes | None = None
    # the per-face stages' fields, for the face ``face`` is (reset for each face)
    face: TargetFace | None = None
    aligned: AlignedFace | None = None
    target_parsing: np.ndarray | None = None  # the segment stage's target half, when computed ahead
    rendered: RenderedFace | None = None
    masks: OcclusionMasks | None = None
    region: BlendRegion | None = None  # the changed region's box and crops (relight → blend)
    lit: np.ndarray | None = None  # the new face's pixels relit to the target's colour and light, in that box
    unblended: np.ndarray | None = None  # the photo before this face was blended in (post compares with it)
    notes: tuple[str, ...] = ()  # warnings for the caller, in the order the stages wrote them
    timings_ms: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def fusing(self) -> bool:
        """False when both degrees are 0: the photo comes back untouched (labelled), no face is changed."""
        return self.options.changes_faces

    def noted(self, *notes: str) -> Record:
        return replace(self, notes=(*self.notes, *(n for n in notes if n not in self.notes)))

    def timed(self, name: str, ms: float) -> Record:
        return replace(self, timings_ms=MappingProxyType({**self.timings_ms, name: self.timings_ms.get(name, 0.0) + ms}))

    def with_face(self, face: TargetFace | None) -> Record:
        """The record the per-face stages see for ``face`` (their fields cleared, or set to what was done ahead)."""
        ahead = Ahead() if face is None or face.ahead is None else face.ahead
        return replace(self, face=face, aligned=ahead.aligned, target_parsing=ahead.target_parsing, rendered=None,
                       masks=None, region=None, lit=None, unblended=None)

    @property
    def face_source(self) -> PreparedSource:
        """The source photo the face being worked on is fused from: its track's in a stream, else the one turned
        most like it (:meth:`PreparedSource.nearest`)."""
        assert self.source is not None and self.face is not None
        return self.face.source if self.face.source is not None else self.source.nearest(self.face.face)

    def cached_face(self) -> Face | None:
        """The face being worked on as the analysis cache holds it, when work that depends on it alone may be kept
        with it (:class:`~facefuse.analysis.cache.FaceMemo`): a photo that came through the cache, no face of it
        restored (the photo's pixels are the cached ones), and for a target the first face fused (the faces after
        it see the photo with that one changed); a source record is its one chosen face. Else None."""
        if not self.cache_key or not self.faces or any(t.face is not t.found for t in self.faces):
            return None
        if self.role == "source":
            return self.faces[0].found
        if self.role != "target" or self.face is None or self.face is not self.faces[0]:
            return None
        return self.face.found

    def refuse(self, error: FacefuseError) -> Record:
        """The gate's refusal: raised for photos, kept for detect and video frames (whose faces are then none)."""
        if self.must_fuse:
            raise error
        return replace(self, refusal=error, faces=())
