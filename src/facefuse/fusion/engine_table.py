"""Engine choice by name: the one table of engines — the built-in mesh engine, and one entry per row of the
swapper table (:data:`facefuse.models.swappers.SWAPPERS`)."""

from __future__ import annotations

from functools import partial
from typing import Callable

from ..errors import ErrorCode, FacefuseError
from ..models import ModelStore
from ..runtime import Runtime
from .engine import FusionEngine
from .mesh_engine import MeshFusionEngine
from .swappers import SWAPPERS, SwapperFiles, make_swapper

# (store, runtime, local swapper files or None) → engine
EngineBuilder = Callable[[ModelStore, Runtime, SwapperFiles | None], FusionEngine]

ENGINES: dict[str, EngineBuilder] = {
    "mesh": lambda store, runtime, files: MeshFusionEngine(),
    **{name: partial(make_swapper, name) for name in SWAPPERS},
}


def make_engine(name: str, store: ModelStore, runtime: Runtime,
                swapper_files: SwapperFiles | None = None) -> FusionEngine:
    """``swapper_files`` points a swapper engine at local files (``--model-path``) instead of the registry's."""
    if name not in ENGINES:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"unknown engine '{name}'",
                            f"choose one of: {', '.join(ENGINES)}", {"engine": name, "known": list(ENGINES)})
    return ENGINES[name](store, runtime, swapper_files)
