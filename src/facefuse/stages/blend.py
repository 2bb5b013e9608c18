"""blend: the relit face laid over the target (its eyes, mouth interior and occluders kept), multi-band (or
Poisson) blended, sharpened without halos and pasted back into the photo; pixels outside the changed region keep
their exact bytes (:func:`facefuse.fusion.blend.blend_in`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..fusion.blend import blend_in
from .base import Stage
from .record import Record


@dataclass(frozen=True, eq=False)
class Blend(Stage):
    name = "blend"
    per_face = True

    def wanted(self, record: Record) -> bool:
        return record.region is not None

    def __call__(self, record: Record) -> Record:
        assert record.image is not None and record.rendered is not None and record.region is not None
        assert record.lit is not None
        return replace(record, image=blend_in(record.image, record.rendered, record.region, record.lit,
                                              record.options))
