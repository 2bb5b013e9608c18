"""align: the target face's aligned crop, computed once: the engine says where it wants the face
(:meth:`~facefuse.fusion.engine.FusionEngine.crop_matrix`), this stage warps the photo; the render stage and the
segment stage both read the result (before, each warped the same crop itself). It needs the target alone, so a
photo fusion computes it ahead, while the source is being prepared (:meth:`Align.ahead`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..analysis.cache import FaceMemo
from ..geometry.align import aligned_crop
from .base import Stage
from .record import AlignedFace, Record


@dataclass(frozen=True, eq=False)
class Align(Stage):
    name = "align"
    per_face = True
    memo: FaceMemo | None = None  # a cached target's crops, kept with its face

    def wanted(self, record: Record) -> bool:
        return record.aligned is None  # else done ahead

    def __call__(self, record: Record) -> Record:
        assert record.source is not None
        return self.ahead(replace(record, engine=record.source.engine))

    def ahead(self, record: Record) -> Record:
        """The crop, with the engine the record was given (a photo fusion resolves it before either photo); for a
        photo whose face the analysis cache holds, kept with the face (it depends on the photo and the crop
        alone: ~2 ms of a fusion of two cached photos, issue 19)."""
        assert record.face is not None and record.engine is not None and record.image is not None
        image = record.image
        matrix, size = record.engine.crop_matrix(record.face.face, record.options)

        def crop() -> np.ndarray:
            return aligned_crop(image, matrix, size)

        face = record.cached_face()
        if face is None or self.memo is None:
            return replace(record, aligned=AlignedFace(matrix, crop()))
        return replace(record, aligned=AlignedFace(matrix, self.memo.get(face, ("aligned", matrix.tobytes(), size),
                                                                          crop)))
