"""TensorRT engines built from our ONNX files, cached by what makes an engine valid.

A serialized engine only runs on the GPU model and TensorRT version that built it, at the precision it was
built for, from the exact model bytes; so the cache key is SHA-256(model) + GPU name + TensorRT version +
precision. Every dynamic axis gets an optimisation profile (min/opt/max) or the build fails; the workspace
defaults to 256 MB, which fits beside the models on 4–6 GB cards. INT8 engines are built from the QDQ files
`facefuse optimize --precision int8` writes (explicit quantisation), so no TensorRT calibrator is needed.

Nothing here imports ``tensorrt`` until a build is asked for; without it, :func:`engine_or_onnx` falls back to
the ONNX file (run by ONNX Runtime), which is what every machine without an NVIDIA GPU does.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import onnx

from ..config import Precision
from ..errors import ErrorCode, FacefuseError
from ..models import sha256_of

_log = logging.getLogger(__name__)

DEFAULT_WORKSPACE_MB = 256


@dataclass(frozen=True)
class DimRange:
    """min ≤ opt ≤ max for one dynamic axis."""

    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        if not (1 <= self.min <= self.opt <= self.max):
            raise FacefuseError(ErrorCode.INVALID_OPTION, f"profile range must satisfy 1 ≤ min ≤ opt ≤ max, got "
                                f"{self.min}/{self.opt}/{self.max}", "fix the --profile values", {})


# Defaults by the axis's role: batch (axis 0) and image sides (the last two axes of a 4-D input).
BATCH_RANGE = DimRange(1, 1, 8)
SIDE_RANGE = DimRange(128, 640, 1280)


@dataclass(frozen=True)
class InputProfile:
    name: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


@dataclass(frozen=True)
class TrtBuildConfig:
    precision: Precision = Precision.FP16
    workspace_mb: int = DEFAULT_WORKSPACE_MB
    profiles: tuple[InputProfile, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "precision", Precision.parse(self.precision))
        if self.workspace_mb < 16:
            raise FacefuseError(ErrorCode.INVALID_OPTION, f"workspace of {self.workspace_mb} MB is too small",
                                "use at least 16 MB (default 256)", {})

    @property
    def workspace_bytes(self) -> int:
        return self.workspace_mb * 2**20


def input_profiles(model_path: Path, ranges: dict[str, DimRange] | None = None,
                   max_batch: int = BATCH_RANGE.max) -> tuple[InputProfile, ...]:
    """A profile for every graph input: fixed axes as they are, dynamic ones from ``ranges`` (keyed by the axis's
    symbolic name, e.g. ``"height"``) or by role (batch / image side)."""
    graph = onnx.load(str(model_path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    ranges = ranges or {}
    profiles = []
    for value in graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        lo, mid, hi = [], [], []
        for axis, dim in enumerate(dims):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                fixed = DimRange(dim.dim_value, dim.dim_value, dim.dim_value)
            elif dim.dim_param in ranges:
                fixed = ranges[dim.dim_param]
            elif axis == 0:
                fixed = DimRange(BATCH_RANGE.min, BATCH_RANGE.opt, max_batch)
            elif len(dims) == 4 and axis >= 2:
                fixed = SIDE_RANGE
            else:
                raise FacefuseError(ErrorCode.INVALID_OPTION,
                                    f"input '{value.name}' axis {axis} ('{dim.dim_param}') is dynamic with no range",
                                    f"pass a range for '{dim.dim_param or axis}'", {"input": value.name})
            lo.append(fixed.min)
            mid.append(fixed.opt)
            hi.append(fixed.max)
        profiles.append(InputProfile(value.name, tuple(lo), tuple(mid), tuple(hi)))
    return tuple(profiles)


def ort_profile_options(profiles: tuple[InputProfile, ...]) -> dict[str, str]:
    """The same profiles as ONNX Runtime TensorRT provider options (``trt_profile_*_shapes``)."""
    def text(shapes: str) -> str:
        return ",".join(f"{p.name}:{'x'.join(map(str, getattr(p, shapes)))}" for p in profiles)

    return {"trt_profile_min_shapes": text("min"), "trt_profile_opt_shapes": text("opt"),
            "trt_profile_max_shapes": text("max")}


def cache_key(model_sha256: str, gpu_name: str, trt_version: str, precision: str) -> str:
    """Engines are only valid for these four; anything else changing means a rebuild."""
    return hashlib.sha256("\n".join([model_sha256, gpu_name.strip(), trt_version, precision]).encode()).hexdigest()


def engine_path(cache_dir: Path, model_path: Path, key: str) -> Path:
    return cache_dir / f"{model_path.stem}-{key[:20]}.engine"


def tensorrt_available() -> bool:
    return importlib.util.find_spec("tensorrt") is not None


def gpu_name(device: int = 0) -> str:
    """The CUDA device's name as NVML reports it (part of the cache key)."""
    from ..gpu import read_gpus

    readings = read_gpus()
    if device >= len(readings):
        raise FacefuseError(ErrorCode.MODEL_MISSING, f"no NVIDIA GPU {device} found for a TensorRT engine",
                            "run without TensorRT, or install the NVIDIA driver and nvidia-ml-py", {})
    return readings[device].name


def build_engine(model_path: Path, config: TrtBuildConfig, cache_dir: Path, device: int = 0) -> Path:
    """The cached engine for this model/GPU/TensorRT/precision, building (and caching) it when missing."""
    import tensorrt as trt

    key = cache_key(sha256_of(model_path), gpu_name(device), trt.__version__, config.precision)
    target = engine_path(cache_dir, model_path, key)
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    explicit_batch = 0 if int(trt.__version__.split(".")[0]) >= 10 else \
        1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(explicit_batch)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(model_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise FacefuseError(ErrorCode.MODEL_MISMATCH, f"TensorRT cannot parse {model_path.name}",
                            "run it with ONNX Runtime instead (--providers cuda,cpu)", {"errors": errors})
    build = builder.create_builder_config()
    build.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, config.workspace_bytes)
    if config.precision in ("fp16", "int8"):
        build.set_flag(trt.BuilderFlag.FP16)
    if config.precision == "int8":
        build.set_flag(trt.BuilderFlag.INT8)
    profiles = config.profiles or input_profiles(model_path)
    if any(p.min != p.max for p in profiles):
        profile = builder.create_optimization_profile()
        for p in profiles:
            profile.set_shape(p.name, p.min, p.opt, p.max)
        build.add_optimization_profile(profile)
    timing_path = cache_dir / f"timing-{trt.__version__}.cache"
    timing = build.create_timing_cache(timing_path.read_bytes() if timing_path.is_file() else b"")
    build.set_timing_cache(timing, ignore_mismatch=False)
    serialized = builder.build_serialized_network(network, build)
    if serialized is None:
        raise FacefuseError(ErrorCode.INTERNAL, f"TensorRT could not build an engine for {model_path.name}",
                            "try a larger --trt-workspace or fp32", {})
    _atomic_write(timing_path, bytes(build.get_timing_cache().serialize()))
    _atomic_write(target, bytes(serialized))
    return target


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def engine_or_onnx(model_path: Path, config: TrtBuildConfig, cache_dir: Path, device: int = 0) -> Path:
    """A TensorRT engine when TensorRT and a GPU are there, else the ONNX file itself (run by ONNX Runtime)."""
    if not tensorrt_available():
        _log.info("tensorrt is not installed; %s runs on ONNX Runtime", model_path.name)
        return model_path
    try:
        return build_engine(model_path, config, cache_dir, device)
    except FacefuseError as exc:
        if exc.code is not ErrorCode.MODEL_MISSING:
            raise
        _log.warning("%s; %s runs on ONNX Runtime", exc.message, model_path.name)
        return model_path
