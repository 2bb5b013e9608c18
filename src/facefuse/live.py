"""Live camera fusion: a :class:`LiveSession` takes camera frames one at a time and gives them back fused.

The source photo (or several photos of the person: each followed face keeps the one turned most like it at its first
frame) is analysed and prepared once, when the session starts; every frame then goes through the
video path's per-frame steps — follow the faces with the clip tracker (:class:`~facefuse.video.tracking.FaceTracker`,
a detector pass every ``VideoOptions.every_n`` frames and at scene cuts, FaceMesh in between), fuse the chosen face,
put the visible "AI-generated" mark on the frame — and an encoded frame also carries the label in its metadata.
Unlike a video, a camera frame does not wait for the detector: while a face is followed, the session's detection
rounds run on a thread of their own (the second core) and their result is merged at a later frame.
Nothing is queued here: a caller that gets frames faster than they are fused drops the old ones and hands over only
the newest (the web service does exactly that, see :mod:`facefuse.serve.live_routes`).

Library use::

    from facefuse import Fuser
    from facefuse.live import LiveSession

    with LiveSession(Fuser(), "me.jpg") as session:
        for frame in camera_frames():            # RGB uint8 arrays
            shown = session.process(frame).image  # fused where the face was followed, always marked
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np

from .config import ImageLimits
from .fusion.engine import FusionOptions
from .imageio import ImageInput, decode_image, encode_image
from .pipeline import Fuser, PreparedSource
from .stages.record import Record
from .video.options import VideoOptions
from .video.tracking import FaceTracker
from .video.turns import FaceTurns

LIVE_CROP_SIZE = 256  # render crop for camera frames: a webcam face rarely covers more than 256 px of a 640×480 frame
LIVE_DETECT_EVERY = 15  # detector pass every 15th frame (~0.5 s at 30 frames/s); FaceMesh follows the face between
LIVE_QUALITY = 80  # JPEG quality of the frames sent back: a 640×480 frame is ~40 KB and encodes in ~2 ms


def live_options(options: FusionOptions | None = None, crop_size: int = LIVE_CROP_SIZE) -> FusionOptions:
    """``options`` (default: the library's) for camera frames: a render crop sized to a webcam face and no
    occlusion masks unless asked for (they cost ~50 ms a frame on two CPU cores, more than the rest of the frame)."""
    if options is None:
        return FusionOptions(crop_size=crop_size, segmentation="off")
    return options.model_copy(update={"crop_size": crop_size})


@dataclass(frozen=True)
class LiveFrame:
    """One processed camera frame: ``image`` is what to show (RGB, marked AI-generated)."""

    image: np.ndarray
    fused: bool  # a face was followed and fused in this frame
    timings_ms: dict[str, float]


class LiveSession:
    """One camera stream: the prepared source, the tracker that carries the face between detections, and the
    running colour correction per tracked face. Not thread-safe (frames of one stream come in order); the
    :class:`~facefuse.pipeline.Fuser` it uses is shared and may serve other sessions at the same time. ``close``
    (or leaving a ``with`` block) ends its detection thread."""

    def __init__(self, fuser: Fuser, source: ImageInput | Sequence[ImageInput] | PreparedSource,
                 options: FusionOptions | None = None,
                 video: VideoOptions | None = None, *, clock: Callable[[], float] = time.monotonic,
                 detect_aside: bool = True) -> None:
        self.fuser = fuser
        # the visible mark goes on every live frame, fused or not, whatever the options say
        self.options = (options or live_options()).model_copy(update={"visible_label": True})
        self.video = video or VideoOptions(every_n=LIVE_DETECT_EVERY)
        self.prepared = source if isinstance(source, PreparedSource) else fuser.prepare(source, self.options)
        # one worker: never more than one detection round in flight per session; ``detect_aside=False`` runs the
        # rounds in the frame, as a video does (benchmarks/live_frames.py compares the two)
        self._rounds = ThreadPoolExecutor(1, thread_name_prefix="facefuse-live-detect")
        self.tracker = FaceTracker(fuser.analyzer, self.video, fuser.gate, self.options.restores_targets,
                                   self.options.target_face, rounds=self._rounds if detect_aside else None)
        self.turns = FaceTurns(self.video, self.prepared)  # per track: colour average, segmenter output…
        self.frames = 0
        self.frames_fused = 0
        self._clock = clock
        self._started = clock()

    def close(self) -> None:
        """Let the detection round in flight finish and end the session's detection thread."""
        self._rounds.shutdown(wait=True)

    def __enter__(self) -> LiveSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the source's stages had to say (e.g. that the photo was restored before use)."""
        return self.prepared.warnings

    def process(self, image: np.ndarray, time_s: float | None = None) -> LiveFrame:
        """``image`` (RGB uint8) fused and marked; ``time_s`` is the frame's time in seconds (default: now), which the
        landmark smoothing uses to tell a still face from a moving one."""
        moment = self._clock() - self._started if time_s is None else time_s
        record = self._fuse_frame(image, moment)
        fused = bool(record.faces)
        self.frames += 1
        self.frames_fused += fused
        assert record.image is not None
        return LiveFrame(record.image, fused, dict(record.timings_ms))

    def process_encoded(self, data: bytes, limits: ImageLimits, quality: int = LIVE_QUALITY) -> tuple[bytes, LiveFrame]:
        """An encoded camera frame (JPEG, WebP or PNG, within ``limits``) in, a labelled JPEG of the result out."""
        clock = time.perf_counter()
        pixels = decode_image(data, limits).pixels
        decode_ms = (time.perf_counter() - clock) * 1000
        frame = self.process(pixels)
        clock = time.perf_counter()
        encoded = encode_image(frame.image, "JPEG", quality)
        frame.timings_ms["decode"] = decode_ms
        frame.timings_ms["encode"] = (time.perf_counter() - clock) * 1000
        return encoded, frame

    # ---- THE per-frame pipeline call: the only place live mode runs the fusion stages ------------------------------
    def _fuse_frame(self, image: np.ndarray, moment: float) -> Record:
        """Track, then the frame's slice of the stage list (gate … label, :meth:`Fuser.fuse_frame`) on the chosen
        faces, as ``facefuse.video.fuse`` does per frame; the tracker stands in for decode/detect/landmarks."""
        clock = time.perf_counter()
        cuts = self.tracker.scene_cuts
        followed = self.tracker.step(image, moment)
        if self.tracker.locked is not None and all(f.track_id != self.tracker.locked for f in followed):
            self.tracker.locked = None  # the chosen person left the picture: a camera fuses whoever is in front now
        faces = self.tracker.chosen(followed)
        # the light changed at once at a cut: the colour average starts again
        targets, turns = self.turns.take(faces, self.tracker.scene_cuts != cuts)
        track_ms = (time.perf_counter() - clock) * 1000
        try:
            record = self.fuser.fuse_frame(self.prepared, image, targets, self.options)
        finally:
            for turn in turns:  # a face the gate refused never used its turns
                turn.close()
        return replace(record, timings_ms=MappingProxyType({"track": track_ms, **record.timings_ms}))
