"""The knobs of a video fusion (beyond the photo fusion's :class:`FusionOptions`), its progress and its result."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from ..errors import ErrorCode, FacefuseError
from ..schema import Options, option


class VideoOptions(Options):
    """The knobs of a video beyond the photo fusion's :class:`FusionOptions`; like those, one definition from which
    the ``facefuse video`` flags (and any HTTP fields) are derived. Frozen and validated when built."""

    start: float = option(0.0, "Start", "seconds into the clip where the output starts", ge=0, allow_inf_nan=False)
    end: float | None = option(None, "End", "seconds into the clip where the output ends (default: its end)",
                               gt=0, allow_inf_nan=False)
    every_n: int = option(10, "Detect every n frames", "run the face detector on every n-th frame (and at scene "
                          "cuts); faces are tracked in between", ge=1, le=1000)
    match_source: bool = option(False, "Fuse the person most like the source", "choose the target person whose "
                                "face shape is closest to the source's instead of --target-face")
    crf: float = option(20.0, "Quality (CRF)", "0–51: constant rate factor of x264/x265 (lower is better; 18 is "
                        "near lossless), or the quantiser of mpeg4", ge=0, le=51)
    bitrate: int | None = option(None, "Bit rate", "video bits per second; replaces --crf when given",
                                 ge=10_000, le=1_000_000_000)
    codec: Literal["libx264", "libx265", "mpeg4"] = option("libx264", "Codec", "output video encoder")
    # veryfast kept (benchmarks/encode_presets.py): superfast spends less CPU per frame and keeps PSNR at CRF 20,
    # but the real clip's fused output then jitters and flickers more against its input (still under the input's)
    preset: Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow"] = option(
        "veryfast", "Preset", "x264/x265 speed preset (slower: smaller file at the same quality)")
    smoothing: bool = option(True, "Temporal smoothing", "One-Euro filtering of the landmarks' shape, a "
                             "constant-velocity filter on the head's movement and a running average of the colour "
                             "correction, so the face neither jitters nor flickers")
    landmark_min_cutoff: float = option(1.0, "Landmark cut-off", "Hz: One-Euro cut-off for a face whose shape "
                                        "is still (lower: steadier, more lag)", gt=0, le=30)
    landmark_beta: float = option(20.0, "Landmark speed response", "how fast the One-Euro cut-off rises as the "
                                  "shape changes (per face width per second): a turning or speaking face's shape lags "
                                  "at most its width / (2π × this); the head's movement has its own filter, which "
                                  "does not lag a steady movement", ge=0, le=1000)
    look_ahead: int = option(4, "Look-ahead", "frames on each side a video file's landmarks are smoothed over: each "
                             "frame's face is placed by a straight line fitted to its followed meshes around it, "
                             "which removes jitter without lag; where the head speeds up or stops within them, by "
                             "the causal filter (0: the frames before only, as for the live camera)", ge=0, le=15)
    colour_weight: float = option(0.15, "Colour averaging weight", "0–1: weight of each frame in the running "
                                  "average of the colour correction (1 = no averaging)", gt=0, le=1)
    scene_cut: float = option(0.3, "Scene-cut threshold", "histogram (Bhattacharyya) distance between neighbouring "
                              "frames that counts as a cut", gt=0, le=1)
    masks_every: int = option(3, "Occlusion masks every n frames", "run the face segmenter on every n-th frame "
                              "of a tracked face (and after scene cuts); the frames between reuse its masks",
                              ge=1, le=30)
    segment_s: float = option(2.0, "Segment length", "seconds of video per checkpointed segment: about the most "
                              "a killed run redoes when resumed (plus the encoder's few frames in flight)",
                              ge=0.2, le=60)

    @model_validator(mode="after")
    def _consistent(self) -> VideoOptions:
        if self.end is not None and self.end <= self.start:
            raise FacefuseError(ErrorCode.INVALID_OPTION, f"end ({self.end} s) must come after start ({self.start} s)",
                                "give --end in seconds after --start", {"option": "end"})
        import av  # here, not at the top: the CLI builds these flags without loading FFmpeg

        try:
            av.codec.Codec(self.codec, "w")
        except av.codec.codec.UnknownCodecError:
            raise FacefuseError(ErrorCode.INVALID_OPTION, f"{self.codec} is not in this build of FFmpeg",
                                "use --codec libx264", {"option": "codec"}) from None
        return self


@dataclass(frozen=True)
class VideoProgress:
    frames_done: int
    frames_total: int  # an estimate from the container until the last frame is read
    fps: float  # frames per second of this run so far
    eta_s: float | None


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
