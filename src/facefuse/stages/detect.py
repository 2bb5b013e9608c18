"""detect: where the faces are, with the detector's retries on a turned or tightly cropped photo (see
:meth:`facefuse.analysis.analyzer.FaceAnalyzer.detect`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..analysis.analyzer import FaceAnalyzer
from .base import Stage
from .record import Record


@dataclass(frozen=True, eq=False)
class Analysing(Stage):
    """A stage that makes the analysis: not wanted once a record has one (from the cache, or from elsewhere)."""

    analyzer: FaceAnalyzer

    def wanted(self, record: Record) -> bool:
        return record.analysis is None


@dataclass(frozen=True, eq=False)
class Detect(Analysing):
    name = "detect"

    def __call__(self, record: Record) -> Record:
        assert record.image is not None
        return replace(record, detected=self.analyzer.detect(record.image))
