"""detect: where the faces are, with the detector's retries on a turned or tightly cropped photo (see
:meth:`facefuse.analysis.analyzer.FaceAnalyzer.detect`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..analysis.analyzer import FaceAnalyzer
from .base import Stage
from .record import Record


@dataclass(frozen=True, eq=False)
class Detect(Stage):
    name = "detect"
    analyzer: FaceAnalyzer

    def wanted(self, record: Record) -> bool:
        return record.analysis is None  # a cached analysis already has its faces

    def __call__(self, record: Record) -> Record:
        assert record.image is not None
        return replace(record, detected=self.analyzer.detect(record.image))
