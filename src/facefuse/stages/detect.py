"""detect: where the faces are, with the detector's retries on a turned or tightly cropped photo (see
:meth:`facefuse.analysis.analyzer.FaceAnalyzer.detect`); a source decoded at reduced scale is decoded again in full
when its face needs it (:func:`needs_full_size`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..analysis.analyzer import Detected, FaceAnalyzer
from ..analysis.cache import full_key
from ..config import ImageLimits
from ..errors import FacefuseError
from ..fusion.engine import FusionOptions
from ..geometry.align import crop_template
from ..imageio import decode_image, read_input_bytes
from .base import Stage
from .decode import about
from .record import Record

# a source decoded at reduced scale (facefuse.stages.decode) is kept so while its face there has at least this many
# times the pixels the largest render crop gives a face (eye to eye, ``crop_template(crop_size)``). Why 1.25: the
# mesh engine samples a source face 2.5× its crop's size or more from a pyramid level (mesh_engine.FILTERED_FROM),
# so such a face decoded at ½ loses no detail the render would have used; a smaller one is decoded again in full
SOURCE_DETAIL = 1.25


@dataclass(frozen=True, eq=False)
class Analysing(Stage):
    """A stage that makes the analysis: not wanted once a record has one (from the cache, or from elsewhere)."""

    analyzer: FaceAnalyzer

    def wanted(self, record: Record) -> bool:
        return record.analysis is None


@dataclass(frozen=True, eq=False)
class Detect(Analysing):
    name = "detect"
    limits: ImageLimits

    def __call__(self, record: Record) -> Record:
        assert record.image is not None
        detected = self.analyzer.detect(record.image)
        if record.reduction > 1 and needs_full_size(detected, record.options):
            return self.in_full(record, detected)
        return replace(record, detected=detected)

    def in_full(self, record: Record, detected: Detected) -> Record:
        """The record with its photo decoded again in full and the detections kept: they were found in the analysis
        copy, which is the same size from either decode (the decode stage keeps the reduced photo at least as large),
        so only the copy's scale to the photo changes."""
        assert record.input is not None
        try:
            pixels = decode_image(read_input_bytes(record.input, self.limits), self.limits).pixels  # type: ignore[arg-type]
        except FacefuseError as exc:
            raise about(exc, record) from None
        scale = detected.scale / record.reduction
        detected = replace(detected, scale=scale, view=replace(detected.view, scale=detected.view.scale / record.reduction))
        return replace(record, image=pixels, reduction=1, detected=detected,
                       cache_key=record.cache_key and full_key(record.cache_key))


def needs_full_size(detected: Detected, options: FusionOptions) -> bool:
    """Whether a source decoded at reduced scale must be decoded in full: the face the source choice takes (every
    face found, for a choice by index) has less than :data:`SOURCE_DETAIL` × the eye distance the largest render
    crop gives a face. The eye distance is the conservative measure: a turned face's is shorter."""
    if not detected.detections:
        return False  # the copy the detector saw is the same from a full decode: it would find no more
    eyes = np.array([detected.view.to_original(d.points[:2]) for d in detected.detections])
    distances = np.linalg.norm(eyes[:, 0] - eyes[:, 1], axis=1)
    if options.source_face == "largest":
        areas = [float(np.prod(d.box[2:] - d.box[:2])) for d in detected.detections]
        distances = distances[[int(np.argmax(areas))]]
    template = crop_template(options.crop_size)
    return bool(distances.min() < SOURCE_DETAIL * float(np.linalg.norm(template[0] - template[1])))
