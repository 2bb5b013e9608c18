"""landmarks: 468 points and the head pose of every detected face; the faces of several photos share one FaceMesh
batch (the Ray analysis deployment merges requests for it). The finished analysis goes into the cache."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..analysis.cache import AnalysisCache
from ..analysis.types import ImageAnalysis
from .detect import Analysing
from .record import Record


@dataclass(frozen=True, eq=False)
class Landmarks(Analysing):
    name = "landmarks"
    cache: AnalysisCache

    def __call__(self, record: Record) -> Record:
        return self.many([record])[0]

    def many(self, records: list[Record]) -> list[Record]:
        detected, faces = self.analyzer.landmarks([r.detected for r in records])
        out = []
        for record, found, photo_faces in zip(records, detected, faces):
            assert record.image is not None
            analysis = ImageAnalysis(record.image, tuple(photo_faces), found.view.rotation)
            if record.cache_key:
                self.cache.put(record.cache_key, analysis)
            out.append(replace(record, analysis=analysis, detected=None))
        return out
