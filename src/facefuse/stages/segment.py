"""segment: which pixels of the rendered crop are skin, hair or an occluder, in the target as photographed and in
the new face (:mod:`facefuse.fusion.occlusion` with our segmenter). ``segmentation="off"``, or a deployment that
disallows the non-commercial segmenter (then with a note), leaves the engine's geometric masks alone.

The target's half of the segmenter's work (its crop as photographed) needs the align stage's crop only, so it begins
right after align, on the second core beside the render (photos, batches, Ray; a video's track carries both halves
together and begins nothing): the same probabilities, the new face's half computed here after the render."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..analysis.segmentation import FaceSegmenter
from ..fusion.occlusion import OCCLUDER_RULES, occlusion_masks, segmenter_crop
from .base import Stage
from .record import Record

SEGMENTER_REFUSED = ("occlusion masks off: the face segmenter is a non-commercial model and "
                     "allow_noncommercial_models is false; classic geometric masks were used")


@dataclass(frozen=True, eq=False)
class Segment(Stage):
    name = "segment"
    per_face = True
    begins_after = "align"
    segmenter: Callable[[], FaceSegmenter | None]  # None where the licence setting forbids it

    def wanted(self, record: Record) -> bool:
        return record.options.segmentation != "off"

    def begins(self, record: Record) -> Callable[[], tuple[np.ndarray, np.ndarray] | None] | None:
        """The target crop's probabilities, with the segmenter's input they came from (None where the licence
        setting forbids the segmenter; the model is loaded there on first use, beside the render too)."""
        assert record.aligned is not None
        if record.face is not None and record.face.parsing is not None:
            return None
        photo = record.aligned.crop

        def target_half() -> tuple[np.ndarray, np.ndarray] | None:
            segmenter = self.segmenter()
            if segmenter is None:
                return None
            crop = segmenter_crop(photo)
            return crop, segmenter.probabilities(crop[None])

        return target_half

    def __call__(self, record: Record) -> Record:
        assert record.rendered is not None and record.aligned is not None
        segmenter = self.segmenter()
        if segmenter is None:
            return record.noted(SEGMENTER_REFUSED)
        # a video: the segmenter runs on every n-th frame of the face's track, the frames between reuse its output
        carry = None if record.face is None else record.face.parsing
        if carry is None and self.name in record.begun:
            segmenter = _Begun(segmenter, *record.begun[self.name].result())  # type: ignore[assignment]
        return replace(record, masks=occlusion_masks(segmenter, record.rendered, record.aligned.crop,
                                                     OCCLUDER_RULES[record.options.segmentation], carry))


@dataclass(frozen=True, eq=False)
class _Begun:
    """The segmenter with the target crop's probabilities already computed (:meth:`Segment.begins`): a batch of the
    target crop and the new face gives the same probabilities per crop as each crop alone (checked on ONNX Runtime's
    CPU kernels: equal to the bit), so only the new face's crop is left to run."""

    segmenter: FaceSegmenter
    target_crop: np.ndarray
    target: np.ndarray

    def probabilities(self, crops: np.ndarray) -> np.ndarray:
        assert np.array_equal(crops[0], self.target_crop), "the begun half is the target crop's"
        return np.concatenate([self.target, self.segmenter.probabilities(crops[1:])])
