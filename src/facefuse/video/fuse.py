"""`fuse_video`: the photo pipeline applied to every frame of a clip, tracked, smoothed, resumable.

Per frame: decode → follow/detect faces (:mod:`.tracking`) → smooth landmarks → render + blend with the colour
correction averaged over time (:mod:`.smoothing`) → visible label → encode. The source photo is analysed and
prepared once. Frames are streamed (nothing holds the clip), and encoded in segments: after each finished segment
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
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ErrorCode, FacefuseError
from ..fusion.engine import FusionOptions
from ..imageio import ImageInput, add_visible_mark
from ..pipeline import Fuser, PreparedSource, Stopwatch
from .io import (
    SegmentEncoder,
    VideoInfo,
    assemble,
    container_format,
    probe,
    read_frames,
    to_rgb,
)
from .options import VideoOptions, VideoProgress, VideoResult
from .smoothing import LutAverage
from .tracking import FaceTracker, signature

CHECKPOINT = "checkpoint.json"
CHECKPOINT_VERSION = 1
PROGRESS_EVERY_S = 0.2  # the progress callback's cadence (and always on the last frame)


def fuse_video(source: ImageInput, target: str | Path, output: str | Path, options: FusionOptions | None = None,
               video: VideoOptions | None = None, *, fuser: Fuser | None = None,
               progress: Callable[[VideoProgress], None] | None = None, cancel: threading.Event | None = None,
               workdir: str | Path | None = None) -> VideoResult:
    """Fuse ``source``'s face into every frame of the video ``target``, writing ``output`` (.mp4, .mov, .mkv).

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
    digest.update(np.ascontiguousarray(prepared.analysis.image).tobytes())
    digest.update(json.dumps({"fusion": options.model_dump(), "video": video.model_dump()}, sort_keys=True,
                             default=str).encode())
    return digest.hexdigest()


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a reader (or a resumed run after a kill) sees the old file or the new one, never half."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


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
        self.tracker = FaceTracker(fuser.analyzer, video, fuser.config.analysis.quality, choice,
                                   signature(None, prepared.face.landmarks) if prepared.face.landmarks is not None
                                   else None)
        self.colour: dict[int, LutAverage] = {}
        self.fused_pending = 0  # fused frames of the segment being encoded (counted once it is finished)
        self.timings = {"decode": 0.0, "track": 0.0, "fuse": 0.0, "label": 0.0, "encode": 0.0, "assemble": 0.0}
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
        _write_json(self.workdir / CHECKPOINT, self.checkpoint)

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
        if self.tracker.relocks:
            warnings.append(f"the chosen person was not recognised after {self.tracker.relocks} scene cut(s); the "
                            "face was chosen again in those shots")
        if resumed_from:
            warnings.append(f"resumed from frame {resumed_from} (the frames before came from an earlier run)")
        return warnings

    def _frames(self, resumed_from: int, started: float) -> None:
        segments = self.checkpoint["segments"]
        last = segments[-1]["pts"][-1] if segments else None
        after = last if last is not None else (None if self.start_pts is None else self.start_pts - 1)
        seek = last if last is not None else self.start_pts
        total = self._estimate_total()
        encoder: SegmentEncoder | None = None
        pts_list: list[int] = []
        done, last_report = resumed_from, 0.0
        stop = threading.Event()
        clock = time.perf_counter()
        try:
            for frame in read_frames(self.target, after, self.end_pts, seek, stop):
                if self.cancel.is_set():
                    raise FacefuseError(ErrorCode.CANCELLED, f"the video fusion was cancelled after {done} frames",
                                        "call again with the same work folder to continue where it stopped",
                                        {"frames_done": done})
                if encoder is None:
                    name = f"seg_{len(segments):05d}.mkv"
                    encoder = SegmentEncoder(self.workdir / f".{name}.partial", self.info, self.video.codec,
                                             self.video.crf, self.video.bitrate, self.video.preset)
                    pts_list = []
                clock = self._lap("decode", clock)
                out = self._frame(frame)
                clock = time.perf_counter()
                encoder.write(out, frame.pts)
                pts_list.append(int(frame.pts))
                clock = self._lap("encode", clock)
                done += 1
                if len(pts_list) == self.segment_frames:
                    self._finish(encoder, name, pts_list)
                    encoder = None
                    clock = self._lap("encode", clock)
                now = time.perf_counter()
                if self.progress and now - last_report >= PROGRESS_EVERY_S:
                    last_report = now
                    self._report(done, max(total, done), resumed_from, started)
            if encoder is not None:
                self._finish(encoder, name, pts_list)
                encoder = None
        finally:
            stop.set()
            if encoder is not None:
                encoder.container.close()
        if self.progress:
            self._report(done, done, resumed_from, started)

    def _lap(self, stage: str, clock: float) -> float:
        now = time.perf_counter()
        self.timings[stage] += now - clock
        return now

    def _frame(self, frame: Any) -> Any:
        """The frame to encode: fused and labelled pixels, or the decoded frame itself when nothing changes it."""
        clock = time.perf_counter()
        image = to_rgb(frame)
        cuts = self.tracker.scene_cuts
        faces = self.tracker.chosen(self.tracker.step(image, float(frame.pts * self.info.time_base)))
        if self.tracker.scene_cuts != cuts:
            self.colour.clear()  # the light really changed: start the running colour average again
        clock = self._lap("track", clock)
        watch = Stopwatch()
        for tracked in faces:
            smoother = self.colour.setdefault(tracked.track_id, LutAverage(self.video.colour_weight)) \
                if self.video.smoothing else None
            image = self.fuser.apply(self.prepared, image, [tracked.face], self.options, watch, smoother)
        if faces:
            self.fused_pending += 1
        clock = self._lap("fuse", clock)
        if self.options.visible_label:
            image = add_visible_mark(image)
            self._lap("label", clock)
            return image
        return image if faces else frame

    def _finish(self, encoder: SegmentEncoder, name: str, pts_list: list[int]) -> None:
        encoder.close()
        os.replace(self.workdir / f".{name}.partial", self.workdir / name)
        self.checkpoint["segments"].append({"file": name, "pts": pts_list})
        self.checkpoint["frames_fused"] += self.fused_pending
        self.fused_pending = 0
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
