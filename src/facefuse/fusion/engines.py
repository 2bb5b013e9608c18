"""Engine choice by name: the mesh engine is built in; neural swappers register here too."""

from __future__ import annotations

from typing import Callable

from ..errors import ErrorCode, FacefuseError
from ..models import ModelStore
from ..runtime import Runtime
from .engine import FusionEngine
from .mesh_engine import MeshFusionEngine
from .swappers import SWAPPERS, SwapperFiles, make_swapper

EngineBuilder = Callable[[ModelStore, Runtime], FusionEngine]

ENGINES: dict[str, EngineBuilder] = {
    "mesh": lambda store, runtime: MeshFusionEngine(),
}
ENGINES.update({name: (lambda store, runtime, n=name: make_swapper(n, store, runtime)) for name in SWAPPERS})


def make_engine(name: str, store: ModelStore, runtime: Runtime,
                swapper_files: SwapperFiles | None = None) -> FusionEngine:
    """``swapper_files`` points a swapper engine at local files (``--model-path``) instead of the registry's."""
    if name not in ENGINES:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"unknown engine '{name}'",
                            f"choose one of: {', '.join(ENGINES)}", {"engine": name, "known": list(ENGINES)})
    if swapper_files is not None and name in SWAPPERS:
        return make_swapper(name, store, runtime, swapper_files)
    return ENGINES[name](store, runtime)
