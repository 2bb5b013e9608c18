"""Engine choice by name: the mesh engine is built in; neural swappers register here too."""

from __future__ import annotations

from typing import Callable

from ..errors import ErrorCode, FacefuseError
from ..models import ModelStore
from ..runtime import Runtime
from .engine import FusionEngine
from .mesh_engine import MeshFusionEngine

EngineBuilder = Callable[[ModelStore, Runtime], FusionEngine]

ENGINES: dict[str, EngineBuilder] = {
    "mesh": lambda store, runtime: MeshFusionEngine(),
}


def make_engine(name: str, store: ModelStore, runtime: Runtime) -> FusionEngine:
    if name not in ENGINES:
        raise FacefuseError(ErrorCode.INVALID_OPTION, f"unknown engine '{name}'",
                            f"choose one of: {', '.join(ENGINES)}", {"engine": name, "known": list(ENGINES)})
    return ENGINES[name](store, runtime)
