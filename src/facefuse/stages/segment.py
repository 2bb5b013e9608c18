"""segment: which pixels of the rendered crop are skin, hair or an occluder, in the target as photographed and in
the new face (:mod:`facefuse.fusion.occlusion` with our segmenter). ``segmentation="off"``, or a deployment that
disallows the non-commercial segmenter (then with a note), leaves the engine's geometric masks alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..analysis.cache import FaceMemo
from ..analysis.segmentation import FaceSegmenter
from ..fusion.occlusion import OCCLUDER_RULES, occlusion_masks
from ..geometry import align
from .base import Stage
from .record import Record

SEGMENTER_REFUSED = ("occlusion masks off: the face segmenter is a non-commercial model and "
                     "allow_noncommercial_models is false; classic geometric masks were used")


@dataclass(frozen=True, eq=False)
class Segment(Stage):
    name = "segment"
    per_face = True
    segmenter: Callable[[], FaceSegmenter | None]  # None where the licence setting forbids it
    memo: FaceMemo | None = None  # a cached target's half of the segmenter output, kept with its face

    def wanted(self, record: Record) -> bool:
        return record.options.segmentation != "off"

    def __call__(self, record: Record) -> Record:
        assert record.rendered is not None and record.aligned is not None
        segmenter = self.segmenter()
        if segmenter is None:
            return record.noted(SEGMENTER_REFUSED)
        # a video: the segmenter runs on every n-th frame of the face's track, the frames between reuse its output
        carry = None if record.face is None else record.face.parsing
        assert record.face is not None and record.face.face.landmarks is not None
        target_points = align.apply(record.aligned.matrix, record.face.face.landmarks)[:, :2]
        return replace(record, masks=occlusion_masks(segmenter, record.rendered, record.aligned.crop,
                                                     OCCLUDER_RULES[record.options.segmentation], carry,
                                                     self.target_turn(record, segmenter), target_points))

    def target_turn(self, record: Record, segmenter: FaceSegmenter) -> Callable[[Callable[[], Any]], Any] | None:
        """For a photo whose face the analysis cache holds: the target's half of the segmenter output kept with the
        face (it depends on the face's crop of the cached photo and on the segmenter alone)."""
        face = record.cached_face()
        if face is None or self.memo is None:
            return None
        assert record.aligned is not None
        memo = self.memo
        key = ("segmenter", segmenter, record.aligned.matrix.tobytes(), record.aligned.crop.shape[:2])
        return lambda compute: memo.get(face, key, compute)

