"""render: the engine's work. For the source (once per fusion, batch, video or live session): the engine is
resolved by name and prepares its payload (mesh, mirror fill, identity embedding). For each target face: the new
face in the aligned crop (the mesh engine's reshaped geometry, or a swapper's output)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..fusion.engine import FusionEngine
from .base import Stage
from .record import Record


@dataclass(frozen=True, eq=False)
class Render(Stage):
    name = "render"
    per_face = True
    engine: Callable[[str], FusionEngine]  # by name, loaded once (Fuser.engine)

    def __call__(self, record: Record) -> Record:
        if record.role == "source":
            (chosen,) = record.faces
            assert record.image is not None
            engine = record.engine or self.engine(record.options.engine)
            return replace(record, engine=engine, prepared=engine.prepare_source(record.image, chosen.face))
        assert record.face is not None and record.aligned is not None and record.source is not None
        source = record.source
        rendered = source.engine.render(source.prepared, record.aligned.crop, record.aligned.matrix,
                                        record.face.face, record.options, record.image, record.face.carry)
        return replace(record, rendered=rendered)
