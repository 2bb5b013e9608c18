"""render: the engine's work. For the source (once per fusion, batch, video or live session): the engine is
resolved by name and prepares its payload (mesh, mirror fill, identity embedding). For each target face: the new
face in the aligned crop (the mesh engine's reshaped geometry, or a swapper's output)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..analysis.cache import FaceMemo
from ..fusion.engine import FusionEngine, SourceFace, StreamCarry
from .base import Stage
from .record import Record


@dataclass(frozen=True, eq=False)
class Render(Stage):
    name = "render"
    per_face = True
    engine: Callable[[str], FusionEngine]  # by name, loaded once (Fuser.engine)
    memo: FaceMemo | None = None  # a cached target's triangles, a cached source's payload, kept with its face

    def __call__(self, record: Record) -> Record:
        if record.role == "source":
            (chosen,) = record.faces
            image = record.image
            assert image is not None
            engine = record.engine or self.engine(record.options.engine)
            face = record.cached_face()

            if face is None or self.memo is None:
                return replace(record, engine=engine, prepared=engine.prepare_source(image, chosen.face))
            # a source seen before (a template, a user's second fusion) keeps its payload (the mesh engine's
            # mouth closed: ~1.5 ms of a fusion of two cached photos, issue 19); it depends on the photo alone.
            # The payload, not the SourceFace: a value that held the face would keep its weak key alive
            payload = self.memo.get(face, ("source payload", engine.name),
                                    lambda: engine.prepare_source(image, chosen.face).payload)
            return replace(record, engine=engine, prepared=SourceFace(chosen.face, payload))
        assert record.face is not None and record.aligned is not None and record.source is not None
        source = record.face_source
        prepared = replace(source.prepared, parsing=source.source_parsing)
        rendered = source.engine.render(prepared, record.aligned.crop, record.aligned.matrix,
                                        record.face.face, record.options, record.image, self.carry(record))
        return replace(record, rendered=rendered)

    def carry(self, record: Record) -> StreamCarry | None:
        """A stream's carry; for a photo whose face the analysis cache holds, one that keeps the face's triangles
        (they depend on its mesh and crop alone) and computes the rest."""
        assert record.face is not None and record.aligned is not None
        face = record.cached_face()
        if record.face.carry is not None or face is None or self.memo is None:
            return record.face.carry
        memo, key = self.memo, ("topology", record.aligned.matrix.tobytes())
        return StreamCarry(topology=lambda compute: memo.get(face, key, compute), toning_turn=_now, mirror=_now,
                           eyes=_now)


def _now(compute: Callable[[], Any]) -> Any:
    """A carry turn that keeps nothing: the work is done here."""
    return compute()
