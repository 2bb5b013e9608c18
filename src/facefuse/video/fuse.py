"""`fuse_video`: the photo pipeline applied to every frame of a clip, tracked, smoothed, resumable.

Per frame: decode → follow/detect faces and keep the chosen one (:mod:`.tracking`, standing in for the photo
path's decode, detect, landmarks and face choice) → the pipeline's gate … label slice
(:meth:`facefuse.pipeline.Fuser.fuse_frame`: the same stages as a photo, the colour correction averaged over time
by :mod:`.smoothing`) → encode. The source photo goes through its slice of the list once. Frames are streamed (nothing holds the clip), and encoded in segments: after each finished segment
a small JSON checkpoint is written atomically to the work folder, so a process killed mid-clip continues from the
last finished segment when ``fuse_video`` is called again with the same work folder.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ErrorCode, FacefuseError
from ..fusion.engine import FusionOptions
from ..files import write_json_atomic
from ..imageio import ImageInput
from ..pipeline import Fuser, PreparedSource, TargetFace
from .io import (
    DecodedFrame,
    StreamEncoder,
    VideoInfo,
    assemble,
    container_format,
    probe,
    read_frames,
)
from .options import VideoOptions, VideoProgress, VideoResult
from .parsing import ParsingTurn
from .smoothing import LutTurn
from .lookahead import LookAhead, Placed
from .tracking import FaceTracker, moved_face, signature
from .turns import FaceTurns

CHECKPOINT = "checkpoint.json"
MAX_FUSE_WORKERS = 4  # fusion threads: one per core up to this (each frame's stages release the GIL mostly)
IN_FLIGHT_PER_WORKER = 2  # frames tracked but not yet encoded, per fusion thread
CHECKPOINT_VERSION = 1
PROGRESS_EVERY_S = 0.2  # the progress callback's cadence (and always on the last frame)
_DIGITS = str.maketrans("", "", "0123456789")


@dataclass(frozen=True)
class _Fused:
    """A frame back from a fusion thread."""

    pts: int
    out: Any  # RGB pixels, or the decoded frame when nothing changed it
    fused: bool
    timings_ms: dict[str, float]


@dataclass
class _Segment:
    """A segment: its file name and the frames written to it."""

    name: str
    pts: list[int] = field(default_factory=list)
    fused: int = 0


def fuse_workers() -> int:
    """The fusion threads a video runs: one per core, up to :data:`MAX_FUSE_WORKERS`."""
    return max(1, min(MAX_FUSE_WORKERS, os.cpu_count() or 1))


def fuse_video(source: ImageInput | Sequence[ImageInput], target: str | Path, output: str | Path,
               options: FusionOptions | None = None,
               video: VideoOptions | None = None, *, fuser: Fuser | None = None,
               progress: Callable[[VideoProgress], None] | None = None, cancel: threading.Event | None = None,
               workdir: str | Path | None = None) -> VideoResult:
    """Fuse ``source``'s face into every frame of the video ``target``, writing ``output`` (.mp4, .mov, .mkv);
    ``source`` may be several photos of one person: each tracked face keeps the one chosen at its first frame
    (:class:`~facefuse.video.turns.FaceTurns`).

    ``workdir`` makes the run resumable (segments and checkpoint live there; call again with the same folder to
    continue); without it a temporary folder is used and removed. Setting ``cancel`` stops the run at the next
    frame with ``CANCELLED`` (the finished segments stay in ``workdir``). A clip in which no face is found is not
    an error: the result says so in ``warnings`` and the output is the labelled clip.
    """
    options = options or FusionOptions()
    video = video or VideoOptions()
    target, output = Path(target), Path(output)
    container_format(output)
    fuser = fuser or Fuser()
    info = probe(target)
    prepared = fuser.prepare(source, options)
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        return _Run(fuser, prepared, target, output, info, options, video, Path(workdir), progress, cancel).run()
    with tempfile.TemporaryDirectory(prefix="facefuse-video-") as folder:
        return _Run(fuser, prepared, target, output, info, options, video, Path(folder), progress, cancel).run()


def _fingerprint(target: Path, prepared: PreparedSource, options: FusionOptions, video: VideoOptions) -> str:
    """What a checkpoint is only valid for: the same target file, source face and options."""
    stat = target.stat()
    digest = hashlib.sha256()
    digest.update(f"{target.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    for photo in prepared.photos:
        digest.update(np.ascontiguousarray(photo.analysis.image).tobytes())
    digest.update(json.dumps({"fusion": options.model_dump(), "video": video.model_dump()}, sort_keys=True,
                             default=str).encode())
    return digest.hexdigest()


class _Run:
    """One call of :func:`fuse_video`: the state of the frame loop, the segments and the checkpoint."""

    def __init__(self, fuser: Fuser, prepared: PreparedSource, target: Path, output: Path, info: VideoInfo,
                 options: FusionOptions, video: VideoOptions, workdir: Path,
                 progress: Callable[[VideoProgress], None] | None, cancel: threading.Event | None) -> None:
        self.fuser, self.prepared, self.target, self.output, self.info = fuser, prepared, target, output, info
        self.options, self.video, self.workdir = options, video, workdir
        self.progress, self.cancel = progress, cancel or threading.Event()
        tb = info.time_base
        self.start_pts = info.start_pts + round(video.start / tb) if video.start else None
        self.end_pts = info.start_pts + round(video.end / tb) if video.end is not None else None
        self.segment_frames = max(1, round(video.segment_s * info.rate))
        choice = "by_source" if video.match_source else options.target_face
        self.tracker = FaceTracker(fuser.analyzer, video, fuser.gate, options.restores_targets, choice,
                                   signature(None, prepared.face.landmarks) if prepared.face.landmarks is not None
                                   else None)
        self.turns = FaceTurns(video, prepared)  # per track: the colour average, the segmenter output carried…
        # frames wait here until the frames after them are tracked (0 frames: they pass straight through)
        self.look_ahead: LookAhead[DecodedFrame] = LookAhead(video.look_ahead if video.smoothing else 0, moved_face)
        self.encoder: StreamEncoder | None = None  # the run's encoder, from its first frame written
        self.segment: _Segment | None = None  # the segment being written
        self.filled: deque[_Segment] = deque()  # written whole, waiting for the encoder to complete their files
        self.done = 0  # frames written so far (this run's and the resumed ones)
        # seconds each stage was busy on its thread (they overlap); "fuse" is the frame's stages (gate … label) on
        # the fusion threads, each also under its own name; "encode" the encoder thread's time; "decode" and
        # "encode_wait" are what the tracking thread waited for the decoder and for a full encoder queue
        self.timings = {"decode": 0.0, "track": 0.0, "fuse": 0.0, "encode": 0.0, "encode_wait": 0.0, "assemble": 0.0}
        self.notes: dict[str, str] = {}  # the stages' notes, one per kind (digits aside: boxes, angles differ)
        self.fingerprint = _fingerprint(target, prepared, options, video)
        self.checkpoint = self._load()

    # --- checkpoint ------------------------------------------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        for leftover in self.workdir.glob(".*partial*"):
            leftover.unlink()
        path = self.workdir / CHECKPOINT
        fresh = {"version": CHECKPOINT_VERSION, "fingerprint": self.fingerprint, "segments": [], "frames_fused": 0,
                 "tracker": {}, "complete": False}
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            return fresh
        if saved.get("version") != CHECKPOINT_VERSION or saved.get("fingerprint") != self.fingerprint or not all(
                (self.workdir / s["file"]).is_file() for s in saved.get("segments", [])):
            for segment in self.workdir.glob("seg_*.mkv"):
                segment.unlink()
            return fresh
        self.tracker.restore(saved.get("tracker", {}))
        return saved

    def _save(self) -> None:
        self.checkpoint["tracker"] = self.tracker.state()
        write_json_atomic(self.workdir / CHECKPOINT, self.checkpoint)

    # --- the frame loop ----------------------------------------------------------------------------------------
    def run(self) -> VideoResult:
        started = time.perf_counter()
        segments = self.checkpoint["segments"]
        resumed_from = sum(len(s["pts"]) for s in segments)
        if not self.checkpoint["complete"]:
            self._frames(resumed_from, started)
        frames = sum(len(s["pts"]) for s in segments)
        if frames == 0:
            raise FacefuseError(ErrorCode.INVALID_OPTION, "no frame of the video lies between start and end",
                                "check --start/--end against the clip's length", {"start": self.video.start})
        if not (self.checkpoint["complete"] and self.output.is_file()):
            clock = time.perf_counter()
            assemble(self.output, [(self.workdir / s["file"], s["pts"]) for s in segments], self.target, self.info,
                     self.start_pts, self.end_pts)
            self.timings["assemble"] = time.perf_counter() - clock
            self.checkpoint["complete"] = True
            self._save()
        elapsed = time.perf_counter() - started
        done_now = frames - resumed_from
        fused = int(self.checkpoint["frames_fused"])
        return VideoResult(self.output, frames, fused, done_now / elapsed if elapsed > 0 else 0.0,
                           int(self.checkpoint["tracker"].get("next_id", 0)), resumed_from,
                           {**self.timings, "total": elapsed}, self._warnings(frames, fused, resumed_from))

    def _warnings(self, frames: int, fused: int, resumed_from: int) -> list[str]:
        warnings = []
        if fused == 0:
            who = "the chosen face" if self.tracker.next_id else "a face"
            warnings.append(f"{who} was found in no frame: the output is the clip with only the AI-generated label")
        elif fused < frames:
            warnings.append(f"{frames - fused} of {frames} frames had no usable chosen face and were left as they are")
        if self.tracker.reidentified:
            warnings.append(f"the chosen person was recognised again by their clothes after "
                            f"{self.tracker.reidentified} scene cut(s)")
        if self.tracker.unrecognised:
            warnings.append(f"{self.tracker.unrecognised} frames after scene cuts were left unfused: the chosen "
                            "person was not recognised there (by their clothes), so no one else was fused")
        if self.tracker.relocks:
            warnings.append(f"the chosen person was not recognised after {self.tracker.relocks} scene cut(s); the "
                            "face was chosen again in those shots")
        if resumed_from:
            warnings.append(f"resumed from frame {resumed_from} (the frames before came from an earlier run)")
        return [*self.prepared.warnings, *self.notes.values(), *warnings]

    def _frames(self, resumed_from: int, started: float) -> None:
        """Decode (own thread) → track (this thread, in frame order) → fuse and label (a pool, several frames at
        once) → encode (own thread), with at most :data:`IN_FLIGHT_PER_WORKER` frames per fusion thread between
        tracking and encoding, so memory stays flat; frames are encoded in their order."""
        segments = self.checkpoint["segments"]
        last = segments[-1]["pts"][-1] if segments else None
        after = last if last is not None else (None if self.start_pts is None else self.start_pts - 1)
        seek = last if last is not None else self.start_pts
        total = self._estimate_total()
        self.done, last_report = resumed_from, 0.0
        stop = threading.Event()
        workers = fuse_workers()
        pending: deque[Future[_Fused]] = deque()
        clock = time.perf_counter()
        with ThreadPoolExecutor(workers, thread_name_prefix="facefuse-video-fuse") as pool:
            try:
                for decoded in read_frames(self.target, after, self.end_pts, seek, stop):
                    if self.cancel.is_set():
                        self._finish_encoding()  # what was written is kept: a resumed run starts after it
                        raise FacefuseError(ErrorCode.CANCELLED,
                                            f"the video fusion was cancelled after {self.done} frames",
                                            "call again with the same work folder to continue where it stopped",
                                            {"frames_done": self.done})
                    clock = self._lap("decode", clock)
                    placed = self._track(decoded)
                    clock = self._lap("track", clock)
                    for frame in placed:
                        targets, turns = self.turns.take(frame.faces, frame.cut)
                        pending.append(pool.submit(self._fuse, frame.frame, targets, turns))
                        while len(pending) >= workers * IN_FLIGHT_PER_WORKER or (pending and pending[0].done()):
                            self._write(pending.popleft().result())
                    now = time.perf_counter()
                    if self.progress and now - last_report >= PROGRESS_EVERY_S:
                        last_report = now
                        self._report(self.done, max(total, self.done), resumed_from, started)
                    clock = time.perf_counter()
                for frame in self.look_ahead.flush():
                    targets, turns = self.turns.take(frame.faces, frame.cut)
                    pending.append(pool.submit(self._fuse, frame.frame, targets, turns))
                    while len(pending) >= workers * IN_FLIGHT_PER_WORKER:
                        self._write(pending.popleft().result())
                while pending:
                    self._write(pending.popleft().result())
                self._finish_encoding()
            finally:
                stop.set()
                for future in pending:  # let the fusions in flight end (each closes its colour turns)
                    future.exception()
                if self.encoder is not None:
                    self.encoder.abort()
                    self.encoder, self.segment = None, None
                    self.filled.clear()
        if self.progress:
            self._report(self.done, self.done, resumed_from, started)

    def _lap(self, stage: str, clock: float) -> float:
        now = time.perf_counter()
        self.timings[stage] += now - clock
        return now

    def _track(self, decoded: DecodedFrame) -> list[Placed[DecodedFrame]]:
        """This frame tracked; the frames now ready to fuse with their faces (with look-ahead, those
        ``look_ahead`` frames before, placed from the frames around them; frame order)."""
        cuts = self.tracker.scene_cuts
        faces = self.tracker.chosen(self.tracker.step(decoded.image, float(decoded.pts * self.info.time_base)))
        return list(self.look_ahead.push(decoded, faces, self.tracker.scene_cuts != cuts))

    def _fuse(self, decoded: DecodedFrame, targets: list[TargetFace], turns: list[LutTurn | ParsingTurn]) -> _Fused:
        """On a fusion thread: the frame's slice of the stage list (gate … label) on the tracked faces; the frame
        to encode, or the decoded frame itself when nothing changes it."""
        try:
            record = self.fuser.fuse_frame(self.prepared, decoded.image, targets, self.options)
        finally:
            for turn in turns:  # a face the gate refused never used its turns: give them up so later frames go on
                turn.close()
        for note in record.notes:
            self.notes.setdefault(note.translate(_DIGITS), note)
        changed = bool(record.faces) or self.options.visible_label
        return _Fused(decoded.pts, record.image if changed else decoded.frame, bool(record.faces),
                      dict(record.timings_ms))

    def _write(self, fused: _Fused) -> None:
        """Hand one finished frame to the encoder (frame order), starting a segment's file or ending its frames when
        full; record the segments whose files the encoder has completed."""
        for stage, ms in fused.timings_ms.items():
            self.timings[stage] = self.timings.get(stage, 0.0) + ms / 1000
            self.timings["fuse"] += ms / 1000
        if self.encoder is None:
            self.encoder = StreamEncoder(self.info, self.video.codec, self.video.crf, self.video.bitrate,
                                         self.video.preset)
        begins = None
        if self.segment is None:
            self.segment = _Segment(f"seg_{len(self.checkpoint['segments']) + len(self.filled):05d}.mkv")
            begins = self.workdir / f".{self.segment.name}.partial"
        clock = time.perf_counter()
        self.encoder.write(fused.out, fused.pts, begins)
        self.segment.pts.append(fused.pts)
        self.segment.fused += fused.fused
        self.done += 1
        self._lap("encode_wait", clock)
        if len(self.segment.pts) == self.segment_frames:
            self.filled.append(self.segment)
            self.segment = None
        self._record(self.encoder.finished())

    def _finish_encoding(self) -> None:
        """No more frames: flush the encoder and record every segment left (the last one may be short)."""
        if self.encoder is not None:
            clock = time.perf_counter()
            if self.segment is not None:
                self.filled.append(self.segment)
                self.segment = None
            self.encoder.close()
            self.timings["encode"] += self.encoder.busy_s
            self._record(self.encoder.finished())
            self.encoder = None
            self._lap("encode_wait", clock)

    def _record(self, files: list[Path]) -> None:
        """Each completed file under its own name, and its segment in the checkpoint."""
        for path in files:
            segment = self.filled.popleft()
            assert path.name == f".{segment.name}.partial", (path, segment.name)
            os.replace(path, self.workdir / segment.name)
            self.checkpoint["segments"].append({"file": segment.name, "pts": segment.pts})
            self.checkpoint["frames_fused"] += segment.fused
            self._save()

    def _estimate_total(self) -> int:
        rate, tb = self.info.rate, self.info.time_base
        begin = Fraction(self.start_pts or self.info.start_pts) * tb
        # frames at begin, begin + 1/rate, … before the end: ceil, so 3 s at 29.97 fps is 90 frames, not 89
        if self.end_pts is not None:
            return max(1, math.ceil((Fraction(self.end_pts) * tb - begin) * rate))
        full_end = Fraction(self.info.start_pts) * tb + Fraction(self.info.frames) / rate
        return max(1, math.ceil((full_end - begin) * rate))

    def _report(self, done: int, total: int, resumed_from: int, started: float) -> None:
        assert self.progress is not None
        elapsed = time.perf_counter() - started
        fps = (done - resumed_from) / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / fps if fps > 0 else None
        self.progress(VideoProgress(done, total, fps, eta))
