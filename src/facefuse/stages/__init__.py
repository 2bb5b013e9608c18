"""The pipeline's stages, one module each, and the one ordered list every path runs a slice of:

decode → detect → landmarks → gate → restore → align → render → segment → relight → blend → post → label → encode

(``align`` … ``post`` run once per chosen face.) Which path runs which slice (:class:`facefuse.pipeline.Fuser`):

- a photo fusion: the source through :data:`SOURCE` (once: a batch and a video reuse it; its segment stage parses
  the source face in its own photo, for engines that say where each new face's pixel comes from in it), the target
  through decode … encode;
- Ray Serve: the analysis deployment runs :data:`ANALYSIS`, the fusion deployment the rest;
- a video or live frame: gate … label (the tracker stands in for decode, detect, landmarks and the face choice;
  the video encoder for encode);
- detect: decode … gate (the same verdict as a fusion).

Adding a stage is one module (a :class:`~facefuse.stages.base.Stage`) plus one entry in :func:`default_stages`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..analysis.analyzer import FaceAnalyzer
from ..analysis.cache import AnalysisCache, FaceMemo
from ..analysis.segmentation import FaceSegmenter
from ..config import AnalysisConfig
from ..fusion.engine import FusionEngine
from ..fusion.restorer import LazyRestorer
from .align import Align
from .base import Pipeline, Stage
from .blend import Blend
from .decode import Decode
from .detect import Detect
from .encode import Encode
from .gate import Gate
from .label import Label
from .landmarks import Landmarks
from .post import Post
from .record import AlignedFace, PreparedSource, Record, TargetFace
from .relight import Relight
from .render import Render
from .restore import Restore
from .segment import Segment

__all__ = ["ANALYSIS", "SOURCE", "AlignedFace", "Models", "Pipeline", "PreparedSource", "Record", "Stage",
           "TargetFace", "default_stages"]

ANALYSIS = ("decode", "detect", "landmarks")  # what an analysis (and the cache) holds
SOURCE = (*ANALYSIS, "gate", "restore", "render", "segment")  # the source's slice: prepared once


@dataclass(frozen=True, eq=False)
class Models:
    """What the stages run on, loaded by the :class:`~facefuse.pipeline.Fuser` (engines and the segmenter on first
    use)."""

    analyzer: FaceAnalyzer
    cache: AnalysisCache
    memo: FaceMemo  # work kept with the cache's faces
    restorer: LazyRestorer
    engine: Callable[[str], FusionEngine]
    segmenter: Callable[[], FaceSegmenter | None]


def default_stages(models: Models, analysis: AnalysisConfig) -> Pipeline:
    """The one ordered list."""
    gate = Gate(analysis.quality, models.cache)
    return Pipeline([
        Decode(analysis.limits, models.cache),
        Detect(models.analyzer),
        Landmarks(models.analyzer, models.cache, analysis.limits),
        gate,
        Restore(models.restorer, gate),
        Align(models.memo),
        Render(models.engine, models.memo),
        Segment(models.segmenter, models.memo),
        Relight(),
        Blend(),
        Post(models.restorer),
        Label(),
        Encode(),
    ])
