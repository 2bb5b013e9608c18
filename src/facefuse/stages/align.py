"""align: the target face's aligned crop, computed once: the engine says where it wants the face
(:meth:`~facefuse.fusion.engine.FusionEngine.crop_matrix`), this stage warps the photo; the render stage and the
segment stage both read the result (before, each warped the same crop itself)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace

import numpy as np

from ..geometry.align import aligned_crop
from .base import Stage
from .record import AlignedFace, Record


@dataclass(frozen=True, eq=False)
class Align(Stage):
    name = "align"
    per_face = True
    # the segment stage's start on a photo's crop, beside the render (Segment.start_photo); None: none started
    start_segment: Callable[[Record, np.ndarray], Future[np.ndarray] | None] | None = None

    def __call__(self, record: Record) -> Record:
        assert record.face is not None and record.source is not None and record.image is not None
        matrix, size = record.source.engine.crop_matrix(record.face.face, record.options)
        crop = aligned_crop(record.image, matrix, size)
        started = self.start_segment(record, crop) if self.start_segment is not None else None
        return replace(record, aligned=AlignedFace(matrix, crop, started))
