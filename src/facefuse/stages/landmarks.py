"""landmarks: 468 points and the head pose of every detected face; the faces of several photos share one FaceMesh
batch (the Ray analysis deployment merges requests for it). The finished analysis goes into the cache.

A source decoded at reduced scale (:mod:`facefuse.stages.decode`) whose chosen face lacks the detail the render needs
(:func:`~facefuse.stages.decode.lacks_detail`) is decoded again in full here, its faces scaled to it: they were found
in the analysis copy, which is the same size from either decode (the decode stage keeps the reduced photo at least as
large), so only their scale to the photo changes."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..analysis.cache import AnalysisCache, full_key
from ..analysis.types import ImageAnalysis
from ..config import ImageLimits
from ..errors import FacefuseError
from ..imageio import decode_image
from .decode import about, lacks_detail
from .detect import Analysing
from .record import Record


@dataclass(frozen=True, eq=False)
class Landmarks(Analysing):
    name = "landmarks"
    cache: AnalysisCache
    limits: ImageLimits

    def __call__(self, record: Record) -> Record:
        return self.many([record])[0]

    def many(self, records: list[Record]) -> list[Record]:
        detected, faces = self.analyzer.landmarks([r.detected for r in records])
        out = []
        for record, found, photo_faces in zip(records, detected, faces):
            assert record.image is not None
            record = replace(record, analysis=ImageAnalysis(record.image, tuple(photo_faces), found.view.rotation),
                             detected=None)
            if record.reduction > 1 and lacks_detail(record.analysis, record.options):
                record = self.in_full(record)
            if record.cache_key:
                self.cache.put(record.cache_key, record.analysis)
            out.append(record)
        return out

    def in_full(self, record: Record) -> Record:
        """The record with its photo decoded again in full and its faces scaled to it."""
        assert record.input is not None and record.analysis is not None
        try:
            pixels = decode_image(record.input, self.limits).pixels
        except FacefuseError as exc:
            raise about(exc, record) from None
        analysis = record.analysis
        faces = tuple(face.scaled(record.reduction) for face in analysis.faces)
        return replace(record, image=pixels, analysis=ImageAnalysis(pixels, faces, analysis.rotation), reduction=1,
                       cache_key=record.cache_key and full_key(record.cache_key))
