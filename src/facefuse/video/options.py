"""The knobs of a video fusion (beyond the photo fusion's :class:`FusionOptions`), its progress and its result."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import av

from ..errors import ErrorCode, FacefuseError
from .io import CODECS


@dataclass(frozen=True)
class VideoOptions:
    """start / end: seconds of the input to fuse (the output is that part, audio included).
    every_n: run the face detector on every n-th frame (and at scene cuts); faces are tracked in between.
    crf: quality for x264/x265 (lower = better, 18 ≈ visually lossless); bitrate (bits/s) replaces it when given.
    codec: the output encoder (libx264, libx265, mpeg4); preset: x264/x265 speed preset.
    smoothing: One-Euro filtering of the landmarks and averaging of the colour correction over time.
    segment_s: length of the independently encoded segments a resumed run restarts from.
    """

    start: float = 0.0
    end: float | None = None
    every_n: int = 10
    crf: float = 20.0
    bitrate: int | None = None
    codec: str = "libx264"
    preset: str = "veryfast"
    smoothing: bool = True
    landmark_min_cutoff: float = 1.0  # Hz: One-Euro cut-off of a still face
    landmark_beta: float = 0.5  # cut-off rise per face-width per second of motion
    colour_weight: float = 0.15  # per-frame weight of the colour correction's running average
    scene_cut: float = 0.45  # histogram (Bhattacharyya) distance between frames that counts as a cut
    segment_s: float = 2.0

    def validate(self) -> None:
        def bad(name: str, message: str, hint: str) -> FacefuseError:
            return FacefuseError(ErrorCode.INVALID_OPTION, f"{name} {message}", hint, {"option": name})

        if self.start < 0:
            raise bad("start", f"must be ≥ 0 seconds, got {self.start}", "give the start time in seconds")
        if self.end is not None and self.end <= self.start:
            raise bad("end", f"must be after start ({self.start} s), got {self.end}", "give the end time in seconds")
        if not (1 <= self.every_n <= 1000):
            raise bad("every_n", f"must be 1–1000, got {self.every_n}", "10 suits most clips; 1 detects every frame")
        if not (0 <= self.crf <= 51):
            raise bad("crf", f"must be 0–51, got {self.crf}", "18–28 is the useful range; lower is better")
        if self.bitrate is not None and self.bitrate < 10_000:
            raise bad("bitrate", f"must be at least 10000 bits/s, got {self.bitrate}", "e.g. 4000000 for 4 Mbit/s")
        if self.codec not in CODECS:
            raise bad("codec", f"'{self.codec}' is not supported", f"choose one of: {', '.join(CODECS)}")
        try:
            av.codec.Codec(self.codec, "w")
        except av.codec.codec.UnknownCodecError:
            raise bad("codec", f"'{self.codec}' is not in this build of FFmpeg", "use libx264") from None
        if not (0.2 <= self.segment_s <= 60):
            raise bad("segment_s", f"must be 0.2–60 seconds, got {self.segment_s}", "2 s is the default")
        if not (0 < self.colour_weight <= 1) or self.landmark_min_cutoff <= 0 or self.landmark_beta < 0:
            raise bad("smoothing", "parameters are out of range",
                      "colour_weight in (0, 1], landmark_min_cutoff > 0, landmark_beta ≥ 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class VideoProgress:
    frames_done: int
    frames_total: int  # an estimate from the container until the last frame is read
    fps: float  # frames per second of this run so far
    eta_s: float | None

    @property
    def fraction(self) -> float:
        return min(1.0, self.frames_done / self.frames_total) if self.frames_total else 0.0


@dataclass
class VideoResult:
    output: Path
    frames: int
    frames_fused: int
    fps: float
    tracks: int  # distinct people tracked
    resumed_from_frame: int
    timings_s: dict[str, float]
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"output": str(self.output), "frames": self.frames, "frames_fused": self.frames_fused,
                "fps": round(self.fps, 2), "tracks": self.tracks, "resumed_from_frame": self.resumed_from_frame,
                "timings_s": {k: round(v, 3) for k, v in self.timings_s.items()}, "warnings": self.warnings}
