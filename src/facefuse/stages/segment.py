"""segment: which pixels of the rendered crop are skin, hair or an occluder, in the target as photographed and in
the new face (:mod:`facefuse.fusion.occlusion` with our segmenter). ``segmentation="off"``, or a deployment that
disallows the non-commercial segmenter (then with a note), leaves the engine's geometric masks alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..analysis.segmentation import FaceSegmenter
from ..fusion.occlusion import OCCLUDER_RULES, occlusion_masks
from .base import Stage
from .record import Record

SEGMENTER_REFUSED = ("occlusion masks off: the face segmenter is a non-commercial model and "
                     "allow_noncommercial_models is false; classic geometric masks were used")


@dataclass(frozen=True, eq=False)
class Segment(Stage):
    name = "segment"
    per_face = True
    segmenter: Callable[[], FaceSegmenter | None]  # None where the licence setting forbids it

    def wanted(self, record: Record) -> bool:
        return record.options.segmentation != "off"

    def __call__(self, record: Record) -> Record:
        assert record.rendered is not None and record.aligned is not None
        segmenter = self.segmenter()
        if segmenter is None:
            return record.noted(SEGMENTER_REFUSED)
        # a video: the segmenter runs on every n-th frame of the face's track, the frames between reuse its output
        carry = None if record.face is None else record.face.parsing
        return replace(record, masks=occlusion_masks(segmenter, record.rendered, record.aligned.crop,
                                                     OCCLUDER_RULES[record.options.segmentation], carry))

