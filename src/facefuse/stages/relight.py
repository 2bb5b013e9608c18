"""relight: the new face's colours and light moved to the target's, inside the region that changes: histogram
matching in Lab, then the light: the target's shading (:func:`facefuse.fusion.relight.relight`; ``light="full"``:
on every skin pixel, none set aside as the source's own deep shading), or with
``light="shape"`` the target's light on the source's 3-D shape (:func:`facefuse.fusion.shading.relight_sh`), each
read from the bare skin of its own photo (the segment stage's masks where it ran). A video carries the colour
transfer over time through the face's ``smoother`` so it cannot flicker."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..fusion.blend import blend_region, match_colour
from .base import Stage
from .record import Record


@dataclass(frozen=True, eq=False)
class Relight(Stage):
    name = "relight"
    per_face = True

    def __call__(self, record: Record) -> Record:
        assert record.rendered is not None and record.face is not None
        region = blend_region(record.rendered, record.masks)
        if region is None:  # nothing in the crop changes
            return record
        normals = region.normals if record.options.light == "shape" else None
        lit = match_colour(region.crop, region.target, region.mask, region.face_skin, region.target_skin,
                           record.face.smoother, normals, robust=record.options.light != "full")
        return replace(record, region=region, lit=lit)
