"""segment: which pixels of the rendered crop are skin, hair or an occluder, in the target as photographed and in
the new face (:mod:`facefuse.fusion.occlusion` with our segmenter). ``segmentation="off"``, or a deployment that
disallows the non-commercial segmenter (then with a note), leaves the engine's geometric masks alone.

For the source (its slice, once per source) it parses the source face in its own photo, when the engine says
where each new face's pixel comes from in that photo (:attr:`~facefuse.fusion.engine.FusionEngine.maps_source`):
each target face then takes the source's masks carried along that map, and the segmenter sees only the target.
Why: the rendered face is the source stretched onto another geometry, with the photo's border reflected into the
crop's corners; parsed there, a fringe over a temple came out half found and showed as a grey smear (issue 17),
and every fusion paid for a second crop in the segmenter's batch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..analysis.cache import FaceMemo
from ..analysis.segmentation import SEGMENT_SIZE, FaceParsing, FaceSegmenter
from ..fusion.occlusion import (OCCLUDER_RULES, occlusion_masks, segmenter_crop, source_edge, target_parsing,
                               without_false_occluders)
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
        segmenter = self.segmenter()
        if record.role == "source":  # (a refused segmenter is noted once, by the target's turn)
            return record if segmenter is None else self.parse_source(record, segmenter)
        if segmenter is None:
            return record.noted(SEGMENTER_REFUSED)
        assert record.rendered is not None and record.aligned is not None
        # a video: the segmenter runs on every n-th frame of the face's track, the frames between reuse its output
        carry = None if record.face is None else record.face.parsing
        assert record.face is not None and record.face.face.landmarks is not None
        target_points = align.apply(record.aligned.matrix, record.face.face.landmarks)[:, :2]
        source = None if record.source is None else record.face_source.source_parsing()
        done = record.target_parsing
        target_turn = self.target_turn(record, segmenter) if done is None else lambda compute: done
        return replace(record, masks=occlusion_masks(segmenter, record.rendered, record.aligned.crop,
                                                     OCCLUDER_RULES[record.options.segmentation], carry,
                                                     target_turn, target_points, source))

    def ahead(self, record: Record) -> Record:
        """The target's half of the output (:func:`~facefuse.fusion.occlusion.target_parsing`): its aligned crop
        parsed alone, which every engine's masks start from; a video frame's carried output is the tracker's."""
        segmenter = self.segmenter()
        if segmenter is None or record.aligned is None or record.face is None or record.face.parsing is not None:
            return record
        assert record.face.face.landmarks is not None
        aligned = record.aligned
        points = align.apply(aligned.matrix, record.face.face.landmarks)[:, :2]

        def compute() -> np.ndarray:
            return target_parsing(segmenter, aligned.crop, points)

        turn = self.target_turn(record, segmenter)
        return replace(record, target_parsing=compute() if turn is None else turn(compute))

    def parse_source(self, record: Record, segmenter: FaceSegmenter) -> Record:
        """The source face parsed in its own photo, framed as a target's aligned crop (the engine's crop at the
        face's resolution, scaled to the segmenter's 128 px), its eyes' glints not occluders; kept with a cached
        source face, so a source seen before costs nothing here."""
        engine = record.engine
        if engine is None or not getattr(engine, "maps_source", False):
            return record
        (chosen,) = record.faces
        assert record.image is not None and chosen.face.landmarks is not None
        image, face = record.image, chosen.face
        matrix, size = engine.crop_matrix(face, record.options)

        def parse() -> FaceParsing:
            crop = segmenter_crop(align.aligned_crop(image, matrix, size))
            probabilities = segmenter.probabilities(crop[None])[0]
            to_parsing = matrix * (SEGMENT_SIZE / size)
            points = align.apply(to_parsing, face.landmarks)[:, :2]
            return FaceParsing(source_edge(without_false_occluders(probabilities, points, crop), points, crop),
                               to_parsing)

        cached = record.cached_face()
        if cached is None or self.memo is None:
            return replace(record, parsing=parse())
        key = ("source parsing", segmenter, matrix.tobytes(), size)
        return replace(record, parsing=self.memo.get(cached, key, parse))

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

