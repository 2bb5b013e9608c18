"""TensorRT optimisation profiles (min/opt/max shapes) for a model's dynamic axes, as ONNX Runtime options.

TensorRT cannot build an engine for a dynamic axis without a range. :class:`facefuse.runtime.Runtime` gives every
TensorRT session these profiles; ONNX Runtime's TensorRT provider then builds the engine once and keeps it in the
engine cache (``GpuOptions.trt_cache_dir``), keyed by model, GPU, TensorRT version and precision, and later
sessions load the cached engine instead of building it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx

from .errors import ErrorCode, FacefuseError


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
