"""Typed, frozen configuration objects passed explicitly into every stage (no module-level settings)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from platformdirs import user_cache_dir

from .errors import ErrorCode, FacefuseError
from pydantic import Field

from .schema import Options, Scope, option


class Precision(str, Enum):
    """Numeric precision of a model file — the one list every stage, flag and setting uses.

    FP32 is the published original; INT8 and FP16 are the variants `facefuse optimize --install` makes (stored as
    ``NAME@int8`` / ``NAME@fp16``), and TensorRT engines are built at one of the three.
    """

    FP32 = "fp32"
    INT8 = "int8"
    FP16 = "fp16"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def variants(cls) -> tuple[Precision, ...]:
        """The precisions `facefuse optimize` can make (everything but the original)."""
        return tuple(p for p in cls if p is not cls.FP32)

    @classmethod
    def parse(cls, value: str | Precision) -> Precision:
        try:
            return cls(str(value).lower())
        except ValueError:
            raise FacefuseError(ErrorCode.INVALID_OPTION, f"unknown precision '{value}'",
                                f"choose one of: {', '.join(p.value for p in cls)}", {"precision": str(value)}) from None


def default_home() -> Path:
    """Model cache root: ``FACEFUSE_HOME`` if set, else the per-user cache dir."""
    return Path(os.environ.get("FACEFUSE_HOME") or user_cache_dir("facefuse"))


def default_mirror() -> Path | None:
    mirror = os.environ.get("FACEFUSE_MODEL_MIRROR")
    return Path(mirror) if mirror else None


@dataclass(frozen=True)
class StoreConfig:
    """Where models are cached, where a local mirror is, whether the network may be used, and which licences.

    ``allow_noncommercial_models`` false limits the pipeline to permissively licensed models: stages whose model is
    non-commercial (our UTKFace-trained segmenter and restorer, the InsightFace-derived swappers) fall back to their
    classic method or are refused, so a commercial deployment cannot use such weights by accident.
    """

    home: Path = field(default_factory=lambda: Path(user_cache_dir("facefuse")))
    mirror: Path | None = None
    offline: bool = False
    download_timeout_s: float = 60.0
    allow_noncommercial_models: bool = True

    @classmethod
    def from_env(cls) -> StoreConfig:
        """The configuration the shells start from (the CLI, the service, ``Fuser()`` without a config):
        ``FACEFUSE_HOME``, ``FACEFUSE_MODEL_MIRROR``, ``FACEFUSE_OFFLINE``, ``FACEFUSE_ALLOW_NONCOMMERCIAL_MODELS``.
        Read here, when asked, never in a default: ``StoreConfig()`` is the same on every machine."""
        env = os.environ
        return cls(home=default_home(), mirror=default_mirror(), offline=env.get("FACEFUSE_OFFLINE", "") not in ("", "0"),
                   allow_noncommercial_models=env.get("FACEFUSE_ALLOW_NONCOMMERCIAL_MODELS", "1").lower()
                   not in ("0", "false", "no"))


class GpuOptions(Options):
    """GPU provider settings: flags of every command that runs models and ``facefuse serve`` settings, derived
    from these fields like the fusion options (operator scope: never per request)."""

    device_id: int = option(0, "GPU", "CUDA/TensorRT/DirectML device index", scope=Scope.OPERATOR, ge=0, le=64)
    gpu_mem_limit_mb: int = option(0, "GPU memory limit", "most GPU memory (MiB) the CUDA provider's arena may take "
                                   "(0: no limit)", scope=Scope.OPERATOR, ge=0)
    trt_workspace_mb: int = option(256, "TensorRT workspace", "TensorRT builder workspace (MiB); 256 fits beside "
                                   "the models on 4–6 GB cards", scope=Scope.OPERATOR, ge=16, le=65536)
    trt_fp16: bool = option(True, "TensorRT FP16", "let TensorRT run layers in half precision",
                            scope=Scope.OPERATOR)
    trt_cache_dir: Path | None = option(None, "TensorRT engine cache", "folder where TensorRT engines are kept and "
                                        "reused (default: $FACEFUSE_HOME/tensorrt)", scope=Scope.OPERATOR)

    def engine_cache(self) -> Path:
        return self.trt_cache_dir or default_home() / "tensorrt"


@dataclass(frozen=True)
class RuntimeConfig:
    """How ONNX Runtime sessions are made.

    ``providers`` of ``None`` means the preferred order filtered by what the installed onnxruntime offers.
    ``intra_op_threads`` of 0 lets the runtime divide the cores by ``concurrency`` so that several requests
    running at once do not oversubscribe the CPU. ``batch_window_ms`` > 0 merges concurrent calls of a model with a
    batch axis into one run (see :mod:`facefuse.batching`; worth it on GPUs, not on small CPUs).
    """

    providers: tuple[str, ...] | None = None
    intra_op_threads: int = 0
    concurrency: int = 1
    gpu: GpuOptions = field(default_factory=lambda: GpuOptions())
    batch_window_ms: float = 0.0
    batch_max: int = 8


class ImageLimits(Options):
    """Checked from the header, before any pixel is decoded (decompression bombs): the decode stage's limits.

    Flags of every command that reads photos (``--max-bytes``, ``--max-pixels``, ``--min-side``); the service sets
    them from its own upload limits (``max_image_mb``, ``max_pixels``)."""

    max_bytes: int = option(20 * 1024 * 1024, "Largest file", "largest photo file in bytes", scope=Scope.OPERATOR,
                            ge=1)
    max_pixels: int = option(40_000_000, "Most pixels", "most pixels a photo may decode to", scope=Scope.OPERATOR,
                             ge=1)
    min_side: int = option(16, "Smallest side", "shortest side in pixels a photo may have", scope=Scope.OPERATOR,
                           ge=1)


class QualityConfig(Options):
    """Thresholds of the quality gate (the gate stage, :mod:`facefuse.stages.gate`): flags of every command that
    analyses photos and ``facefuse serve`` settings (``FACEFUSE_MIN_SCORE``…), derived from these fields."""

    min_score: float = option(0.7, "Lowest confidence", "lowest detection confidence", scope=Scope.OPERATOR,
                              ge=0, le=1)
    min_face_px: int = option(40, "Smallest face", "smallest face side in pixels", scope=Scope.OPERATOR,
                              flag="--min-face", ge=1)
    # side faces up to 60° are fused (the hidden side filled from the visible one)
    max_yaw: float = option(60.0, "Largest yaw", "largest |yaw| in degrees", scope=Scope.OPERATOR, ge=0, le=180)
    warn_yaw: float = option(45.0, "Warn from yaw", "|yaw| beyond which a fusion succeeds with a warning (its hidden "
                             "side is filled)", scope=Scope.OPERATOR, ge=0, le=180)
    max_pitch: float = option(30.0, "Largest pitch", "largest |pitch| in degrees", scope=Scope.OPERATOR, ge=0, le=180)
    min_sharpness: float = option(12.0, "Least sharpness", "lowest Laplacian variance of the aligned face",
                                  scope=Scope.OPERATOR, ge=0)


class AnalysisConfig(Options):
    """How photos are analysed (the detect and landmarks stages): flags of every command that analyses photos and
    ``facefuse serve`` settings, derived from these fields; the gate's thresholds (``quality``) and the decode
    stage's limits (``limits``) are options models of their own, with their own flags and settings."""

    detector: str = option("blazeface", "Detector", "face detector (the default cascades two BlazeFace models; "
                           "facefuse.analysis.detectors lists the others; an unknown name is refused when the models "
                           "load)", scope=Scope.OPERATOR)
    try_rotations: bool = option(True, "Try rotations", "retry the photo turned 90/180/270° when no face is found",
                                 scope=Scope.OPERATOR, flag="--rotate")
    detect_threshold: float = option(0.5, "Detection threshold", "lowest detector score a face box is kept at "
                                     "(the gate's min_score then judges the face)", scope=Scope.OPERATOR, ge=0, le=1)
    precision: Precision = option(Precision.FP32, "Precision", "use the INT8/FP16 variants `facefuse optimize "
                                  "--install` made (FP32 where none passed)", scope=Scope.OPERATOR)
    quality: QualityConfig = Field(default_factory=QualityConfig, description="the quality gate's thresholds")
    limits: ImageLimits = Field(default_factory=ImageLimits, description="the decode stage's limits")
