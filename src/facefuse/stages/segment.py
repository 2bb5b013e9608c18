"""segment: which pixels of the rendered crop are skin, hair or an occluder, in the target as photographed and in
the new face (:mod:`facefuse.fusion.occlusion` with our segmenter). ``segmentation="off"``, or a deployment that
disallows the non-commercial segmenter (then with a note), leaves the engine's geometric masks alone."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import cv2
import numpy as np

from ..analysis.segmentation import SEGMENT_SIZE, FaceSegmenter
from ..background import in_background
from ..fusion.occlusion import occlusion_masks
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
        return record.options.segmentation == "auto"

    def __call__(self, record: Record) -> Record:
        assert record.rendered is not None and record.aligned is not None
        segmenter = self.segmenter()
        if segmenter is None:
            return record.noted(SEGMENTER_REFUSED)
        if record.face is not None and record.face.parsing is not None:
            # a video: the segmenter runs on every n-th frame of the face's track, the frames between reuse it
            segmenter = _Carried(segmenter, record.face.parsing)  # type: ignore[assignment]
        elif record.aligned.photo_parsing is not None:
            segmenter = _PhotoDone(segmenter, record.aligned.photo_parsing)  # type: ignore[assignment]
        return replace(record, masks=occlusion_masks(segmenter, record.rendered, record.aligned.crop))

    def start_photo(self, record: Record, crop: np.ndarray) -> Future[np.ndarray] | None:
        """The segmenter on a photo's aligned ``crop`` (the target as photographed), started by the align stage on
        a thread of its own, so that it runs beside the render: it needs nothing the render makes, and after the
        two analyses a photo's fusion otherwise leaves the second core idle. Only for photos: video and live frames
        already fuse on a thread per core, and carry the segmenter's output along a track. None where this stage
        will not run the segmenter."""
        if record.role != "target" or not self.wanted(record):
            return None
        segmenter = self.segmenter()
        if segmenter is None:
            return None
        small = cv2.resize(crop, (SEGMENT_SIZE, SEGMENT_SIZE), interpolation=cv2.INTER_AREA)
        # its error, if any, is raised by the segment stage, on the fusion's thread
        return in_background(lambda: segmenter.probabilities(small[None])[0])


@dataclass(frozen=True)
class _Carried:
    """The segmenter as a video frame sees it: its probabilities computed now, or an earlier frame's of the same
    tracked face (:mod:`facefuse.video.parsing`)."""

    segmenter: FaceSegmenter
    turn: Callable[[Callable[[], Any]], Any]

    def probabilities(self, crops: np.ndarray) -> np.ndarray:
        return self.turn(lambda: self.segmenter.probabilities(crops))


@dataclass(frozen=True)
class _PhotoDone:
    """The segmenter as a photo's face sees it: the photo's crop (the first of ``crops``) was segmented beside the
    render (:meth:`Segment.start_photo`; the model gives each crop of a batch the same output as alone), so only
    the new face is run now."""

    segmenter: FaceSegmenter
    photo: Future[np.ndarray]

    def probabilities(self, crops: np.ndarray) -> np.ndarray:
        return np.stack([self.photo.result(), self.segmenter.probabilities(crops[1:])[0]])
