"""restore: our trained restorer on the chosen faces the gate found blurry, small or heavily compressed
(``restore=auto|on|off``; :class:`facefuse.restore.RestoreStage` decides and applies it), then the gate's final
verdict on what it gave back. The source face is restored into a new, larger source photo; target faces in place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..restore import RestoreStage
from .base import Stage
from .gate import Gate
from .record import Record


@dataclass(frozen=True, eq=False)
class Restore(Stage):
    name = "restore"
    restorer: RestoreStage
    gate: Gate  # the verdict after restoring is the gate's

    def __call__(self, record: Record) -> Record:
        assert record.image is not None
        quality = self.gate.quality
        if not record.faces:  # a frame or a detection the gate refused
            return record
        if record.role == "source":
            (target,) = record.faces
            image, face, notes = self.restorer.source(record.image, target.face, record.options.restore, quality)
            faces = (replace(target, face=face),)
        else:
            mode = record.options.restore if record.fusing else "off"
            image, restored, notes = self.restorer.targets(record.image, [t.face for t in record.faces], mode,
                                                           quality)
            faces = tuple(replace(t, face=f) for t, f in zip(record.faces, restored))
        return self.gate.final(replace(record, image=image, faces=faces).noted(*notes))
