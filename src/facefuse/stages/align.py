"""align: the target face's aligned crop, computed once: the engine says where it wants the face
(:meth:`~facefuse.fusion.engine.FusionEngine.crop_matrix`), this stage warps the photo; the render stage and the
segment stage both read the result (before, each warped the same crop itself)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..geometry.align import aligned_crop
from .base import Stage
from .record import AlignedFace, Record


@dataclass(frozen=True, eq=False)
class Align(Stage):
    name = "align"
    per_face = True

    def __call__(self, record: Record) -> Record:
        assert record.face is not None and record.source is not None and record.image is not None
        matrix, size = record.source.engine.crop_matrix(record.face.face, record.options)
        return replace(record, aligned=AlignedFace(matrix, aligned_crop(record.image, matrix, size)))
